//! `AnyGraph`: a graph of whichever backend, dispatched statically over the enabled backends.

use std::path::Path;

// The contract's signatures name these types unqualified.
use accel_graph_api::{
    AcceleratorGraph, BackendKind, CaptureErrorMode, Graph, GraphState, GraphTopology, PoolId,
    Result, backend_kit::GraphImpl,
};
use enum_dispatch::enum_dispatch;

/// Generates, from the one declaration of the graph contract in `accel-graph-api`
/// (`for_each_graph_method!`), the mirror trait `enum_dispatch` forwards — it can only forward
/// a trait defined in this crate — its implementation for every backend graph, and
/// `AcceleratorGraph` for `AnyGraph`. Adding a method to the contract needs no change here.
macro_rules! any_graph_dispatch {
    ($( fn $name:ident(self: $receiver:ty $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?; )*) => {
        /// [`AcceleratorGraph`], method for method, as `enum_dispatch` needs it.
        #[enum_dispatch]
        #[allow(clippy::needless_arbitrary_self_type)]
        trait GraphDispatch {
            $( fn $name(self: $receiver $(, $arg: $ty)*) $(-> $ret)?; )*
        }

        #[allow(clippy::needless_arbitrary_self_type)]
        impl<I: GraphImpl> GraphDispatch for Graph<I> {
            $(
                #[inline]
                fn $name(self: $receiver $(, $arg: $ty)*) $(-> $ret)? {
                    AcceleratorGraph::$name(self $(, $arg)*)
                }
            )*
        }

        #[allow(clippy::needless_arbitrary_self_type)]
        impl AcceleratorGraph for AnyGraph {
            $(
                #[inline]
                fn $name(self: $receiver $(, $arg: $ty)*) $(-> $ret)? {
                    GraphDispatch::$name(self $(, $arg)*)
                }
            )*
        }
    };
}

accel_graph_api::for_each_graph_method!(any_graph_dispatch);

/// A graph of any enabled backend. Calls dispatch through a `match` (no vtable), and every
/// backend's graph converts into it with `From`/`into()`.
///
/// Variants name the concrete `Graph<…>` types: coherence cannot see through an associated
/// type projection such as `<MockBackend as Backend>::Graph` when checking `From` impls.
///
/// ```
/// # #[cfg(feature = "mock")] {
/// use accel_graph::{AcceleratorGraph, AnyGraph, Backend, BackendKind, GraphOptions};
/// let backend = accel_graph::mock::MockBackend::new();
/// let graphs: Vec<AnyGraph> = vec![backend.graph(GraphOptions::new())?.into()];
/// assert_eq!(graphs[0].kind(), BackendKind::Mock);
/// assert_eq!(graphs[0].backend_name(), "mock");
/// # }
/// # Ok::<(), accel_graph::GraphError>(())
/// ```
#[enum_dispatch(GraphDispatch)]
#[derive(Debug)]
pub enum AnyGraph {
    /// A mock graph.
    #[cfg(feature = "mock")]
    Mock(accel_graph_mock::MockGraph),
    /// A CUDA graph.
    #[cfg(feature = "cuda")]
    Cuda(accel_graph_cuda::CudaGraph),
    /// A HIP graph.
    #[cfg(feature = "hip")]
    Hip(accel_graph_hip::HipGraph),
    /// A wgpu graph.
    #[cfg(feature = "wgpu")]
    Wgpu(accel_graph_wgpu::WgpuGraph),
}

impl AnyGraph {
    /// Which backend the graph belongs to.
    pub fn kind(&self) -> BackendKind {
        match self {
            #[cfg(feature = "mock")]
            AnyGraph::Mock(_) => BackendKind::Mock,
            #[cfg(feature = "cuda")]
            AnyGraph::Cuda(_) => BackendKind::Cuda,
            #[cfg(feature = "hip")]
            AnyGraph::Hip(_) => BackendKind::Hip,
            #[cfg(feature = "wgpu")]
            AnyGraph::Wgpu(_) => BackendKind::Wgpu,
        }
    }
}
