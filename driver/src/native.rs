//! What drivers over a native stream-capture runtime (CUDA, HIP) share: the capture-mode
//! conversions, running work in relaxed mode, how a portable op lowers to the runtime's calls,
//! the grid of an element-wise launch, and RAII wrappers of raw handles.
//!
//! The runtimes differ only in names; the logic is here once.

use std::ffi::c_void;

use accel_graph_api::{CaptureErrorMode, GraphError, PortableOp};

use crate::{DriverError, DriverResult};

/// A runtime's three capture-mode values, for the conversions both ways, and its call that
/// exchanges the calling thread's mode.
#[derive(Debug, Clone, Copy)]
pub struct CaptureModes<M> {
    /// `..._CAPTURE_MODE_GLOBAL`.
    pub global: M,
    /// `..._CAPTURE_MODE_THREAD_LOCAL`.
    pub thread_local: M,
    /// `..._CAPTURE_MODE_RELAXED`.
    pub relaxed: M,
    /// `ThreadExchangeStreamCaptureMode`: sets the thread's mode, leaves the previous one in
    /// its argument; true on success.
    pub exchange: fn(&mut M) -> bool,
}

impl<M: Copy + PartialEq> CaptureModes<M> {
    /// The runtime's value of `mode` (`Default` is global, as in PyTorch).
    pub fn native(&self, mode: CaptureErrorMode) -> M {
        match mode.resolved() {
            CaptureErrorMode::ThreadLocal => self.thread_local,
            CaptureErrorMode::Relaxed => self.relaxed,
            CaptureErrorMode::Global | CaptureErrorMode::Default => self.global,
        }
    }

    /// The API's mode of a runtime value (anything unknown is the strictest, global).
    pub fn api(&self, native: M) -> CaptureErrorMode {
        if native == self.thread_local {
            CaptureErrorMode::ThreadLocal
        } else if native == self.relaxed {
            CaptureErrorMode::Relaxed
        } else {
            CaptureErrorMode::Global
        }
    }

    /// Runs `f` with this thread's capture mode relaxed, and puts the previous mode back:
    /// work that is no stream work (destroying a graph, loading a module, a capture's pool
    /// allocation) must neither disturb a capture in progress elsewhere nor be refused by it.
    pub fn relaxed<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut mode = self.relaxed;
        let exchanged = (self.exchange)(&mut mode);
        let out = f();
        if exchanged {
            (self.exchange)(&mut mode);
        }
        out
    }
}

/// How a native runtime runs a portable op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowering {
    /// A 32-bit memset of the scalar's bits (`fill`).
    Memset,
    /// A device-to-device copy from the read operand (`copy`).
    Memcpy,
    /// The element-wise kernel of this row of the driver's kernel table.
    Kernel(usize),
}

impl Lowering {
    /// The lowering of `op`: `fill` and `copy` are the runtime's memset and memcpy, every other
    /// op the kernel named after it in the driver's table (`kernels`: the names, in table
    /// order). So a new op needs one row in each native driver's table and nothing else.
    pub fn of<'a, T>(
        op: &PortableOp<T>,
        kernels: impl IntoIterator<Item = &'a str>,
    ) -> DriverResult<Lowering> {
        match op {
            PortableOp::Fill { .. } => Ok(Lowering::Memset),
            PortableOp::Copy { .. } => Ok(Lowering::Memcpy),
            _ => kernels
                .into_iter()
                .position(|name| name == op.name())
                .map(Lowering::Kernel)
                .ok_or_else(|| {
                    DriverError::Api(GraphError::Unsupported {
                        what: format!("the portable op {} (no kernel of that name)", op.name()),
                    })
                }),
        }
    }
}

/// Threads per block of every element-wise launch.
pub const BLOCK: u32 = 256;

/// The grid of an element-wise launch over `n` elements in blocks of [`BLOCK`]: at least one
/// block, so that an empty op still launches (and is captured as a node); refused past the
/// grid's x limit.
pub fn grid(n: usize) -> DriverResult<u32> {
    u32::try_from(n.div_ceil(BLOCK as usize).max(1))
        .ok()
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| {
            DriverError::Api(GraphError::Unsupported {
                what: format!("an element-wise op on {n} elements (past the launch grid's limit)"),
            })
        })
}

/// The arguments of every element-wise kernel, `(y, a, x, n)`, laid out for a launch by
/// argument pointers (`cuLaunchKernel`, `hipModuleLaunchKernel`).
#[derive(Debug)]
pub struct ElementArgs<P> {
    y: P,
    a: f32,
    x: P,
    n: u64,
}

impl<P> ElementArgs<P> {
    /// The arguments over `n` elements of `y` (and `x`) with scalar `a`.
    pub fn new(y: P, a: f32, x: P, n: usize) -> Self {
        ElementArgs {
            y,
            a,
            x,
            n: n as u64,
        }
    }

    /// The pointers to each argument, in the kernels' parameter order; valid while `self`
    /// is borrowed.
    pub fn pointers(&mut self) -> [*mut c_void; 4] {
        [
            (&raw mut self.y).cast(),
            (&raw mut self.a).cast(),
            (&raw mut self.x).cast(),
            (&raw mut self.n).cast(),
        ]
    }
}

/// Declares a native driver's two graph types — the captured graph and the executable
/// graph, RAII wrappers of the runtime's raw handles — with their documentation: the struct,
/// `Send`, `Debug`, a crate-private `from_raw`, a public accessor of the raw handle, and `Drop`
/// destroying it in relaxed capture mode (destroying one graph while another captures must not
/// disturb that capture), a failure logged.
///
/// ```text
/// accel_graph_driver::native_graph_types! {
///     runtime: "CUDA", succeeded: |rc| rc == sys::CUresult::CUDA_SUCCESS, modes: MODES,
///     graph: CuGraph(sys::CUgraph), cu_graph, sys::cuGraphDestroy;
///     exec: CuGraphExec(sys::CUgraphExec), cu_graph_exec, sys::cuGraphExecDestroy;
/// }
/// ```
#[macro_export]
macro_rules! native_graph_types {
    (
        runtime: $runtime:literal, succeeded: $ok:expr, modes: $modes:path,
        graph: $graph:ident($graph_raw:ty), $graph_acc:ident, $graph_destroy:path;
        exec: $exec:ident($exec_raw:ty), $exec_acc:ident, $exec_destroy:path;
    ) => {
        $crate::native_graph_types!(@one $graph($graph_raw), $graph_acc, $graph_destroy,
            $ok, $modes,
            concat!("A graph captured by the ", $runtime, " runtime (what ",
                "[`Graph::raw_graph`](accel_graph_api::Graph::raw_graph) returns): destroyed on drop."),
            "The raw handle, for inspection or edits before (re-)instantiation. Do not destroy it.");
        $crate::native_graph_types!(@one $exec($exec_raw), $exec_acc, $exec_destroy,
            $ok, $modes,
            concat!("An executable graph of the ", $runtime, " runtime (what ",
                "[`Graph::executable`](accel_graph_api::Graph::executable) returns): destroyed on ",
                "drop, which the runtime defers past launches still running."),
            "The raw handle, e.g. for an executable update. Do not destroy it.");
    };
    (@one $name:ident($raw:ty), $accessor:ident, $destroy:path, $ok:expr, $modes:path,
        $doc:expr, $acc_doc:expr) => {
        #[doc = $doc]
        pub struct $name {
            raw: $raw,
        }

        // SAFETY: a runtime handle is usable from any thread; the driver layer uses a graph or
        // an executable from one thread at a time (`&mut` access through its graph object).
        unsafe impl Send for $name {}

        impl $name {
            pub(crate) fn from_raw(raw: $raw) -> Self {
                $name { raw }
            }

            #[doc = $acc_doc]
            pub fn $accessor(&self) -> $raw {
                self.raw
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.raw).finish()
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                if self.raw.is_null() {
                    return;
                }
                let raw = self.raw;
                // SAFETY: the handle came from the runtime (end of capture, instantiation), is
                // owned by this value alone, and is destroyed once, here.
                let status = $modes.relaxed(|| unsafe { $destroy(raw) });
                if !($ok)(status) {
                    $crate::__tracing::warn!(
                        call = stringify!($destroy),
                        "destroying a runtime graph handle failed"
                    );
                }
            }
        }
    };
}

/// Implements [`DriverCapture`](crate::api::DriverCapture) for a native driver from its
/// runtime's three calls — begin capture, end capture, exchange the thread's capture mode —
/// given the device type, its stream type with the accessor of the raw stream, the graph type
/// (declared by [`native_graph_types!`]), the [`CaptureModes`] constant and the runtime's
/// status check.
///
/// The graph a failed end of capture returns alongside its error is owned before the check,
/// so it is destroyed (cudarc's `result::stream::end_capture` would leak it, hence raw calls).
#[macro_export]
macro_rules! native_capture_impl {
    (
        $device:ty, $stream:ty => $raw_stream:ident, $graph:ident, $modes:path, $check:path;
        begin: $begin:path, end: $end:path, exchange: $exchange:path;
    ) => {
        impl $crate::api::DriverCapture for $device {
            type Graph = $graph;

            unsafe fn begin_capture(
                &self,
                stream: &$stream,
                mode: $crate::__api::CaptureErrorMode,
            ) -> $crate::DriverResult<()> {
                // SAFETY: the stream is alive (the handle holds it).
                let status = unsafe { $begin(stream.$raw_stream(), $modes.native(mode)) };
                $check(
                    status,
                    const { $crate::native::call_name(stringify!($begin)) },
                )
            }

            unsafe fn end_capture(&self, stream: &$stream) -> $crate::DriverResult<$graph> {
                let mut graph = ::std::ptr::null_mut();
                // SAFETY: ends the capture on its own stream; `graph` is a local out-parameter.
                let status = unsafe { $end(stream.$raw_stream(), &mut graph) };
                let graph = $graph::from_raw(graph);
                $check(
                    status,
                    const { $crate::native::call_name(stringify!($end)) },
                )?;
                Ok(graph)
            }

            fn exchange_capture_mode(
                &self,
                mode: $crate::__api::CaptureErrorMode,
            ) -> $crate::DriverResult<$crate::__api::CaptureErrorMode> {
                let mut raw = $modes.native(mode);
                // SAFETY: exchanges this thread's mode with a local.
                let status = unsafe { $exchange(&mut raw) };
                $check(
                    status,
                    const { $crate::native::call_name(stringify!($exchange)) },
                )?;
                Ok($modes.api(raw))
            }
        }
    };
}

/// The launch and node count of [`DriverGraphs`](crate::api::DriverGraphs) for a native
/// driver, as items of its `impl DriverGraphs` block: the runtime's graph launch and node
/// query, the accessor of the raw stream, and the status check.
#[macro_export]
macro_rules! native_launch_and_count {
    ($stream:ty => $raw_stream:ident, $check:path; launch: $launch:path, nodes: $nodes:path;) => {
        #[inline]
        unsafe fn launch_exec(
            &self,
            exec: &<Self as $crate::api::DriverGraphs>::Exec,
            stream: &$stream,
        ) -> $crate::DriverResult<()> {
            // SAFETY: live executable and stream (this method's contract: its captured memory
            // is alive).
            let status = unsafe { $launch(exec.raw, stream.$raw_stream()) };
            $check(
                status,
                const { $crate::native::call_name(stringify!($launch)) },
            )
        }

        fn node_count(
            &self,
            graph: &<Self as $crate::api::DriverCapture>::Graph,
        ) -> $crate::DriverResult<usize> {
            let mut count = 0usize;
            // SAFETY: counting query on a live graph (a null node array asks for the count).
            let status = unsafe { $nodes(graph.raw, ::std::ptr::null_mut(), &mut count) };
            $check(
                status,
                const { $crate::native::call_name(stringify!($nodes)) },
            )?;
            Ok(count)
        }
    };
}

/// The runtime function's own name in `path` (`sys::cuGraphLaunch` → `cuGraphLaunch`), for
/// error messages. A `const fn`, so the macros above name their calls at compile time and a
/// successful launch does no string work.
pub const fn call_name(path: &'static str) -> &'static str {
    let bytes = path.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b':' || bytes[i] == b' ' {
            start = i + 1;
        }
        i += 1;
    }
    // `start` follows an ASCII byte, so it is a character boundary.
    path.split_at(start).1
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static CURRENT: std::cell::Cell<u8> = const { std::cell::Cell::new(1) };
    }

    const MODES: CaptureModes<u8> = CaptureModes {
        global: 0,
        thread_local: 1,
        relaxed: 2,
        exchange: |mode| {
            *mode = CURRENT.with(|c| c.replace(*mode));
            true
        },
    };

    #[test]
    fn modes_convert_both_ways() {
        for mode in CaptureErrorMode::ALL {
            assert_eq!(MODES.api(MODES.native(mode)), mode.resolved());
        }
        assert_eq!(MODES.api(9), CaptureErrorMode::Global);
    }

    #[test]
    fn relaxed_restores_the_previous_mode() {
        let inside = MODES.relaxed(|| CURRENT.with(std::cell::Cell::get));
        assert_eq!((inside, CURRENT.with(std::cell::Cell::get)), (2, 1));
    }

    #[test]
    fn ops_lower_by_name() {
        let kernels = ["add_scalar", "scale", "axpy"];
        let lower = |op: PortableOp<()>| Lowering::of(&op, kernels).ok();
        assert_eq!(
            lower(PortableOp::Fill { x: (), value: 1.0 }),
            Some(Lowering::Memset)
        );
        assert_eq!(
            lower(PortableOp::Copy { dst: (), src: () }),
            Some(Lowering::Memcpy)
        );
        assert_eq!(
            lower(PortableOp::Scale { x: (), a: 1.0 }),
            Some(Lowering::Kernel(1))
        );
        assert!(Lowering::of(&PortableOp::Scale { x: (), a: 1.0 }, ["axpy"]).is_err());
    }

    #[test]
    fn call_names_drop_the_path() {
        assert_eq!(call_name("sys::cuGraphLaunch"), "cuGraphLaunch");
        assert_eq!(call_name("ffi :: hipGraphLaunch"), "hipGraphLaunch");
        assert_eq!(call_name("hipFree"), "hipFree");
    }

    #[test]
    fn grids_have_at_least_one_block_and_respect_the_limit() {
        assert_eq!(grid(0).ok(), Some(1));
        assert_eq!(grid(257).ok(), Some(2));
        assert!(grid(usize::MAX).is_err());
    }
}
