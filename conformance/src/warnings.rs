//! Recording `tracing` warnings emitted while a closure runs (PyTorch warns on an empty
//! capture; so must every backend).

use std::{
    fmt,
    sync::{Arc, Mutex},
};

use tracing::{
    Event, Level, Metadata, Subscriber,
    field::{Field, Visit},
    span::{Attributes, Id, Record},
};

/// A subscriber that only records events at WARN level or above, by their message.
struct WarnRecorder {
    messages: Arc<Mutex<Vec<String>>>,
}

/// Reads the `message` field of an event (the text of `tracing::warn!("...")`).
#[derive(Default)]
struct MessageText(String);

impl Visit for MessageText {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for WarnRecorder {
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
            let mut text = MessageText::default();
            event.record(&mut text);
            self.messages
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(text.0);
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Runs `f` with a thread-local subscriber that counts warnings; returns `f`'s result and the
/// number of warnings logged on this thread meanwhile.
pub(crate) fn count_warnings<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let (out, messages) = collect_warnings(f);
    (out, messages.len())
}

/// Runs `f` with a thread-local subscriber that records warnings; returns `f`'s result and the
/// message of every warning logged on this thread meanwhile (PyTorch's tests match warnings by
/// their text: `warnings.catch_warnings(record=True)`).
pub(crate) fn collect_warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let messages = Arc::new(Mutex::new(Vec::new()));
    let subscriber = WarnRecorder {
        messages: Arc::clone(&messages),
    };
    let out = tracing::subscriber::with_default(subscriber, f);
    let recorded = std::mem::take(&mut *messages.lock().unwrap_or_else(|e| e.into_inner()));
    (out, recorded)
}
