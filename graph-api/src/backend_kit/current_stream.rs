//! Per-thread current stream, per backend instance: what `torch.cuda.current_stream()` is.

use std::{
    any::Any,
    cell::RefCell,
    rc::Rc,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

/// One thread's current stream of one slot, with a way to tell that the slot is gone.
struct Entry {
    /// The slot's id.
    id: u64,
    alive: Weak<()>,
    /// Shared (not boxed) so [`CurrentStream::with`] can hold it without holding the map.
    stream: Rc<dyn Any>,
}

thread_local! {
    /// Current stream of this thread for each slot that set one. A list, not a hash map: a
    /// thread sees a handful of backend instances, and a short scan costs the replay fast path
    /// less than hashing the id.
    static CURRENT: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
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
/// // The body of `with` may switch the stream (it sees the stream it was called with):
/// assert_eq!(slot.with(|s| { slot.set(9); *s }), 7);
/// assert_eq!(slot.get(), 9);
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

    /// Runs `f` on this thread's current stream without cloning the stream (the replay and
    /// op fast path: one non-atomic reference count).
    ///
    /// The thread's map is not borrowed while `f` runs, so `f` may set the current stream —
    /// a host callback run synchronously by a replay may switch streams.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        let entry = CURRENT.with(|map| {
            map.borrow()
                .iter()
                .find(|e| e.id == self.id)
                .map(|e| Rc::clone(&e.stream))
        });
        match entry.as_deref().and_then(|s| s.downcast_ref::<S>()) {
            Some(stream) => f(stream),
            None => f(&self.default),
        }
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
            let (purged, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut *map)
                .into_iter()
                .partition(|e| e.id == self.id || e.alive.strong_count() == 0);
            *map = kept;
            map.push(Entry {
                id: self.id,
                alive: Arc::downgrade(&self.alive),
                stream: Rc::new(stream),
            });
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
            .try_with(|map| {
                let mut map = map.borrow_mut();
                let at = map.iter().position(|e| e.id == self.id)?;
                Some(map.swap_remove(at))
            })
            .ok()
            .flatten();
        drop(removed);
    }
}
