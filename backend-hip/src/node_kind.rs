//! Graph node types as the runtime reports them, decoded into [`NodeKind`].

use std::ffi::c_int;

use accel_graph_api::NodeKind;

/// The first runtime version (`hipRuntimeGetVersion`) numbering node types from 0.
const ZERO_BASED_SINCE: i32 = 50_300_000;

/// Decodes `hipGraphNodeGetType`'s value for a runtime of version `runtime_version`.
///
/// ROCm 5.2 numbers node types from 1 (Kernel = 1 ... EventRecord = 8, then Memcpy1D = 9,
/// MemcpyFromSymbol = 10, MemcpyToSymbol = 11); later releases from 0, as CUDA does, and
/// disagree among themselves past EventRecord = 7, so those values stay `Other`.
pub(crate) fn decode(raw: c_int, runtime_version: i32) -> NodeKind {
    if runtime_version < ZERO_BASED_SINCE {
        match raw {
            1 => NodeKind::Kernel,
            2 | 9 | 10 | 11 => NodeKind::Memcpy,
            3 => NodeKind::Memset,
            4 => NodeKind::Host,
            5 => NodeKind::Graph,
            6 => NodeKind::Empty,
            7 => NodeKind::EventWait,
            8 => NodeKind::EventRecord,
            _ => NodeKind::Other,
        }
    } else {
        match raw {
            0 => NodeKind::Kernel,
            1 => NodeKind::Memcpy,
            2 => NodeKind::Memset,
            3 => NodeKind::Host,
            4 => NodeKind::Graph,
            5 => NodeKind::Empty,
            6 => NodeKind::EventWait,
            7 => NodeKind::EventRecord,
            _ => NodeKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROCM_5_2: i32 = 50_221_153;
    const ROCM_6_0: i32 = 60_032_830;

    /// `(release, [(type number, kind)])`: ROCm 5.2 numbers node types from one (0 is
    /// unknown), later releases from zero.
    const CASES: [(i32, &[(i32, NodeKind)]); 2] = [
        (
            ROCM_5_2,
            &[
                (1, NodeKind::Kernel),
                (2, NodeKind::Memcpy),
                (3, NodeKind::Memset),
                (4, NodeKind::Host),
                (5, NodeKind::Graph),
                (8, NodeKind::EventRecord),
                (9, NodeKind::Memcpy), // Memcpy1D
                (0, NodeKind::Other),
            ],
        ),
        (
            ROCM_6_0,
            &[
                (0, NodeKind::Kernel),
                (1, NodeKind::Memcpy),
                (2, NodeKind::Memset),
                (3, NodeKind::Host),
                (4, NodeKind::Graph),
                (7, NodeKind::EventRecord),
                (10, NodeKind::Other),
            ],
        ),
    ];

    #[test]
    fn node_types_decode_per_release() {
        for (release, cases) in CASES {
            for &(number, kind) in cases {
                assert_eq!(decode(number, release), kind, "type {number} on {release}");
            }
        }
    }
}
