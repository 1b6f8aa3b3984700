//! `NvtxLayer`: tracing spans as NVTX ranges (feature `nvtx`), the way `torch.cuda.nvtx` users
//! see their program in Nsight Systems.
//!
//! accel-graph opens spans around capture (`capture`, with the graph, mode, pool and node
//! count), `instantiate`, `upload`, `replay` (debug level) and the utilities' pre-capture
//! (`precapture`). Added to a subscriber, the layer pushes an NVTX range named after each span
//! when it is entered and pops it when it is left, on the entering thread — NVTX's push/pop
//! ranges are per thread, as entered spans are.
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! tracing_subscriber::registry()
//!     .with(accel_graph_cuda::NvtxLayer::new())
//!     .init();
//! // ... captures and replays now show as NVTX ranges under `nsys profile`.
//! ```

use std::sync::OnceLock;

use tracing::{Subscriber, span};
use tracing_subscriber::{Layer, layer::Context, registry::LookupSpan};

/// Library names tried for NVTX (the version 2 API cudarc binds, which forwards to the tool
/// that injects itself, as Nsight Systems does).
const CANDIDATES: [&str; 3] = [
    "libnvToolsExt.so.1",
    "libnvToolsExt.so",
    "nvToolsExt64_1.dll",
];

/// Whether libnvToolsExt can be loaded (probed once: cudarc's loader panics when it is
/// missing, and a tracing layer must never panic).
fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // SAFETY: loading the library runs its initialisers, which is what using NVTX means;
        // the handle is dropped at once (cudarc keeps its own).
        let found = CANDIDATES
            .iter()
            .any(|&name| unsafe { libloading::Library::new(name) }.is_ok());
        if !found {
            tracing::warn!(
                candidates = ?CANDIDATES,
                "libnvToolsExt not found: NVTX ranges are disabled (install the NVTX library, \
                 e.g. PyTorch's nvidia-nvtx wheel, and put it on the loader path)"
            );
        }
        found
    })
}

/// A [`Layer`] that turns entered spans into NVTX push/pop ranges. Inert (and said so once at
/// warn level) where libnvToolsExt is missing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvtxLayer {
    _private: (),
}

impl NvtxLayer {
    /// The layer.
    pub fn new() -> Self {
        NvtxLayer { _private: () }
    }

    /// True when NVTX ranges will be emitted (libnvToolsExt loads).
    pub fn is_active(&self) -> bool {
        available()
    }
}

impl<S> Layer<S> for NvtxLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        if !available() {
            return;
        }
        if let Some(span) = ctx.span(id) {
            cudarc::nvtx::result::range_push(span.name());
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        if available() && ctx.span(id).is_some() {
            cudarc::nvtx::result::range_pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::prelude::*;

    use super::*;

    #[test]
    fn spans_pass_through_the_layer_whether_or_not_nvtx_loads() {
        let layer = NvtxLayer::new();
        let active = layer.is_active();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("capture", graph = 1).entered();
            tracing::info_span!("instantiate").in_scope(|| {});
            drop(outer);
        });
        // The probe answers the same on every call.
        assert_eq!(NvtxLayer::new().is_active(), active);
    }
}
