//! Per-thread current stream, per backend instance: what `torch.cuda.current_stream()` is.

use std::{
    any::Any,
    cell::RefCell,
    collections::HashMap,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

/// One thread's current stream of one slot, with a way to tell that the slot is gone.
struct Entry {
    alive: Weak<()>,
    stream: Box<dyn Any>,
}

thread_local! {
    /// Current stream of this thread for each slot, keyed by slot id.
    static CURRENT: RefCell<HashMap<u64, Entry>> = RefCell::new(HashMap::new());
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

/// The current-stream slot of one backend instance: each thread sees its own stream, starting
/// with the default stream.
///
/// A thread's entry keeps its stream alive until the thread exits, sets it again, or the slot
/// is dropped: a dropped slot's entries on other threads are purged the next time those
/// threads set any current stream, so backends made and dropped in a loop leak nothing.
///
/// ```
/// use accel_graph_api::backend_kit::CurrentStream;
/// let slot = CurrentStream::new(0u32);
/// assert_eq!(slot.get(), 0);
/// let previous = slot.set(7);
/// assert_eq!((previous, slot.get()), (0, 7));
/// assert_eq!(slot.with(|s| *s + 1), 8);
/// std::thread::scope(|s| { s.spawn(|| assert_eq!(slot.get(), 0)); }); // per thread
/// ```
#[derive(Debug)]
pub struct CurrentStream<S> {
    id: u64,
    alive: Arc<()>,
    default: S,
}

impl<S: Clone + 'static> CurrentStream<S> {
    /// A slot whose value is `default` on every thread until set.
    pub fn new(default: S) -> Self {
        CurrentStream {
            id: NEXT_SLOT.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
            default,
        }
    }

    /// Runs `f` on this thread's current stream without cloning it (the replay and op fast
    /// path).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        CURRENT.with(|map| {
            let map = map.borrow();
            match map.get(&self.id).and_then(|e| e.stream.downcast_ref::<S>()) {
                Some(stream) => f(stream),
                None => f(&self.default),
            }
        })
    }

    /// This thread's current stream.
    pub fn get(&self) -> S {
        self.with(S::clone)
    }

    /// Sets this thread's current stream, returning the previous one.
    pub fn set(&self, stream: S) -> S {
        let previous = self.get();
        let purged: Vec<Entry> = CURRENT.with(|map| {
            let mut map = map.borrow_mut();
            let dead: Vec<u64> = map
                .iter()
                .filter(|(_, e)| e.alive.strong_count() == 0)
                .map(|(&id, _)| id)
                .collect();
            let purged = dead.iter().filter_map(|id| map.remove(id)).collect();
            map.insert(
                self.id,
                Entry {
                    alive: Arc::downgrade(&self.alive),
                    stream: Box::new(stream),
                },
            );
            purged
        });
        // Dropped outside the borrow: a stream's drop may reach back into this map.
        drop(purged);
        previous
    }

    /// The default stream.
    pub fn default_stream(&self) -> &S {
        &self.default
    }
}

impl<S> Drop for CurrentStream<S> {
    fn drop(&mut self) {
        // This thread's entry goes now; other threads purge theirs on their next `set`.
        let removed = CURRENT
            .try_with(|map| map.borrow_mut().remove(&self.id))
            .ok()
            .flatten();
        drop(removed);
    }
}
