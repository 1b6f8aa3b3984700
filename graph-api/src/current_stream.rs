//! Per-thread current stream, per backend instance: what `torch.cuda.current_stream()` is.

use std::{
    any::Any,
    cell::RefCell,
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
};

thread_local! {
    /// Current stream of this thread for each backend instance, keyed by instance id.
    static CURRENT: RefCell<HashMap<u64, Box<dyn Any>>> = RefCell::new(HashMap::new());
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// The current-stream slot of one backend instance: each thread sees its own stream, starting
/// with the default stream.
///
/// `S` should be a light handle (an id or a weak reference): a thread's slot keeps its value
/// until the thread exits or the slot is set again.
///
/// ```
/// use accel_graph_api::CurrentStream;
/// let slot = CurrentStream::new(0u32);
/// assert_eq!(slot.get(), 0);
/// let previous = slot.set(7);
/// assert_eq!((previous, slot.get()), (0, 7));
/// std::thread::scope(|s| { s.spawn(|| assert_eq!(slot.get(), 0)); }); // per thread
/// ```
#[derive(Debug)]
pub struct CurrentStream<S> {
    instance: u64,
    default: S,
}

impl<S: Clone + 'static> CurrentStream<S> {
    /// A slot whose value is `default` on every thread until set.
    pub fn new(default: S) -> Self {
        CurrentStream {
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            default,
        }
    }

    /// This thread's current stream.
    pub fn get(&self) -> S {
        CURRENT.with(|map| {
            map.borrow()
                .get(&self.instance)
                .and_then(|b| b.downcast_ref::<S>())
                .cloned()
                .unwrap_or_else(|| self.default.clone())
        })
    }

    /// Sets this thread's current stream, returning the previous one.
    pub fn set(&self, stream: S) -> S {
        let previous = self.get();
        CURRENT.with(|map| {
            map.borrow_mut().insert(self.instance, Box::new(stream));
        });
        previous
    }

    /// The default stream.
    pub fn default_stream(&self) -> &S {
        &self.default
    }
}

impl<S> Drop for CurrentStream<S> {
    fn drop(&mut self) {
        // Only this thread's entry can be reached; other threads drop theirs when they exit.
        let _ = CURRENT.try_with(|map| map.borrow_mut().remove(&self.instance));
    }
}
