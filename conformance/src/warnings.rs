//! Counting `tracing` warnings emitted while a closure runs (PyTorch warns on an empty
//! capture; so must every backend).

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use tracing::{
    Event, Level, Metadata, Subscriber,
    span::{Attributes, Id, Record},
};

/// A subscriber that only counts events at WARN level or above.
struct WarnCounter {
    warnings: Arc<AtomicUsize>,
}

impl Subscriber for WarnCounter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Spans must be enabled too, or events inside them would be filtered out.
        metadata.is_span() || *metadata.level() <= Level::WARN
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() <= Level::WARN {
            self.warnings.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Runs `f` with a thread-local subscriber that counts warnings; returns `f`'s result and the
/// number of warnings logged on this thread meanwhile.
pub(crate) fn count_warnings<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let warnings = Arc::new(AtomicUsize::new(0));
    let subscriber = WarnCounter {
        warnings: Arc::clone(&warnings),
    };
    let out = tracing::subscriber::with_default(subscriber, f);
    (out, warnings.load(Ordering::SeqCst))
}
