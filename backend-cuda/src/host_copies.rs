//! Copies from or to pageable host memory in a captured graph. The backend never captures
//! one (its uploads and downloads synchronize, which a capture refuses), but the user's own
//! work can: cudarc's `clone_htod` of a `Vec` on a capturing stream is recorded as a copy node
//! that names the vector's address, and each replay copies whatever that address then holds —
//! long after the vector was freed. Nothing keeps pageable memory alive for a graph, so such a
//! capture is refused at its end rather than replayed into a silent wrong answer.

use accel_graph_api::GraphError;
use accel_graph_driver::{DriverError, DriverResult};
use cudarc::driver::sys;

use crate::error::check;

/// `Err(CaptureInvalidated)` naming the first copy node of `graph` (its top level) that reads
/// or writes pageable host memory.
pub(crate) fn refuse_pageable_copies(graph: sys::CUgraph) -> DriverResult<()> {
    for (node, kind) in crate::topology::graph_nodes(graph)? {
        if kind != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY {
            continue;
        }
        let mut params = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
        // SAFETY: a copy node of the live graph; `params` is an out-parameter of its type.
        let rc = unsafe { sys::cuGraphMemcpyNodeGetParams(node, params.as_mut_ptr()) };
        check(rc, "cuGraphMemcpyNodeGetParams")?;
        // SAFETY: filled by the driver above (zeroed before, a valid bit pattern anyway).
        let params = unsafe { params.assume_init() };
        let sides = [
            (
                "from",
                params.srcMemoryType,
                params.srcHost as u64,
                params.srcDevice,
            ),
            (
                "to",
                params.dstMemoryType,
                params.dstHost as u64,
                params.dstDevice,
            ),
        ];
        for (direction, memory, host, unified) in sides {
            let address = match memory {
                sys::CUmemorytype::CU_MEMORYTYPE_HOST => host,
                sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED => unified,
                _ => continue,
            };
            if is_pageable(address) {
                return Err(DriverError::Api(GraphError::CaptureInvalidated {
                    reason: format!(
                        "the capture holds a copy {direction} pageable host memory at \
                         {address:#x} (a host copy issued on the capturing stream, e.g. \
                         cudarc's clone_htod of a Vec): each replay would copy whatever that \
                         address then holds, and nothing keeps it alive. Upload before the \
                         capture, or copy from page-locked memory the program keeps for the \
                         graph's life"
                    ),
                }));
            }
        }
    }
    Ok(())
}

/// Whether `address` is host memory the driver does not know (not page-locked, not managed,
/// not device memory).
fn is_pageable(address: u64) -> bool {
    let mut memory = 0u32;
    // SAFETY: `memory` is an out-parameter of the attribute's type (a `CUmemorytype`).
    let rc = unsafe {
        sys::cuPointerGetAttribute(
            (&mut memory as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address,
        )
    };
    rc != sys::CUresult::CUDA_SUCCESS
}
