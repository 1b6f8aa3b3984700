//! `Store`: the host-side key-value store ranks meet through (torch.distributed's `Store`) —
//! to share a communicator's id, for barriers, and to compare what their captures recorded.
//! It carries a few bytes per rank and call, never tensor data (that goes through the device's
//! collectives).

use std::{
    collections::HashMap,
    fmt,
    path::{Path, PathBuf},
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{GraphError, Result};

/// A key-value store every rank of a communicator reaches: [`MemoryStore`] for ranks that
/// are threads of one process, [`FileStore`] for ranks that are processes sharing a
/// directory (one host, or a shared file system), [`TcpStore`](super::TcpStore) for ranks on
/// several hosts (rank 0 hosts it).
///
/// Keys are made by the communicator (`<name>/<topic>/<round>/<rank>`, and `<name>/rank/<rank>`,
/// each rank's claim of its place, made with [`Store::set_if_absent`]); values are small.
/// Implement it over your own rendezvous service (an etcd store) to run ranks elsewhere:
/// `set_if_absent` must be atomic there too (etcd's transactions,
/// torch's `compare_set`), or two communicators given the same name could mix their ranks.
///
/// ```
/// use std::time::{Duration, Instant};
/// use accel_graph_api::collective::{MemoryStore, Store};
/// let store = MemoryStore::new();
/// let writer = store.clone();
/// std::thread::spawn(move || writer.set("greeting", b"hello")).join().unwrap()?;
/// let deadline = Instant::now() + Duration::from_secs(1);
/// assert_eq!(store.wait("greeting", deadline)?, Some(b"hello".to_vec()));
/// assert_eq!(store.wait("missing", Instant::now())?, None);
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
pub trait Store: Send + Sync + fmt::Debug {
    /// Sets `key` to `value` (replacing what it held).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Removes `key` (nothing happens when it is not set).
    fn delete(&self, key: &str) -> Result<()>;

    /// Sets `key` to `value` only if it is not set, **atomically**: of several callers racing
    /// for one key exactly one sets it. `Ok(None)` when this call set it; `Ok(Some(held))`,
    /// leaving the key as it was, when it already held `held`. Ranks claim their place in a
    /// communicator with it, which is how a second communicator of the same name on the store
    /// is detected.
    ///
    /// ```
    /// use accel_graph_api::collective::{MemoryStore, Store};
    /// let store = MemoryStore::new();
    /// assert_eq!(store.set_if_absent("seat", b"mine")?, None);
    /// assert_eq!(store.set_if_absent("seat", b"yours")?, Some(b"mine".to_vec()));
    /// assert_eq!(store.get("seat")?, Some(b"mine".to_vec()));
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The value of `key` once it is set, or `None` when `deadline` passes first. The
    /// default polls [`Store::get`], sleeping a little longer each time (up to 5 ms).
    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        let mut pause = Duration::from_micros(50);
        loop {
            if let Some(value) = self.get(key)? {
                return Ok(Some(value));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

/// A shared store is a store (so an `Arc<dyn Store>` can be handed to every rank).
impl<S: Store + ?Sized> Store for Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).set(key, value)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        (**self).get(key)
    }

    fn delete(&self, key: &str) -> Result<()> {
        (**self).delete(key)
    }

    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        (**self).set_if_absent(key, value)
    }

    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        (**self).wait(key, deadline)
    }
}

/// `start + timeout`, or the latest instant short of it the platform represents: a timeout
/// of [`Duration::MAX`] means "wait as long as it takes", not an overflow. Every wait of the
/// collectives (the stores, the control plane, a backend's simulated collectives) takes its
/// deadline from here.
///
/// ```
/// use std::time::{Duration, Instant};
/// use accel_graph_api::collective::deadline_after;
/// let now = Instant::now();
/// assert_eq!(deadline_after(now, Duration::from_secs(1)), now + Duration::from_secs(1));
/// assert!(deadline_after(now, Duration::MAX) > now);
/// ```
pub fn deadline_after(start: Instant, timeout: Duration) -> Instant {
    let mut left = timeout;
    loop {
        if let Some(deadline) = start.checked_add(left) {
            return deadline;
        }
        // Halving ends: `start + 0` is `start`.
        left /= 2;
    }
}

/// The values of a [`MemoryStore`], and the condition variable its waiters sleep on.
#[derive(Default)]
struct Shared {
    values: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

/// A store in memory, for ranks that are threads of one process: clones share it.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Shared>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // Values are replaced whole: a panic elsewhere cannot leave one torn.
        self.inner.values.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keys currently set (how many values ranks left behind).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("keys", &self.len())
            .finish()
    }
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.map().insert(key.to_owned(), value.to_vec());
        self.inner.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.map().get(key).cloned())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.map().remove(key);
        Ok(())
    }

    /// Atomic under the store's lock.
    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut map = self.map();
        if let Some(held) = map.get(key) {
            return Ok(Some(held.clone()));
        }
        map.insert(key.to_owned(), value.to_vec());
        drop(map);
        self.inner.changed.notify_all();
        Ok(None)
    }

    /// Waits on a condition variable: no polling.
    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        let mut map = self.map();
        loop {
            if let Some(value) = map.get(key) {
                return Ok(Some(value.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            map = self
                .inner
                .changed
                .wait_timeout(map, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A store in a directory, one file per key, for ranks that are processes (torch's
/// `FileStore`, `file://` init): every rank is given the same directory, which must be
/// **fresh for each launch** — values a previous run left (a communicator id above all)
/// would be read as this run's.
///
/// Values are written to a temporary file and renamed into place, so a reader sees a value
/// whole or not at all.
///
/// ```
/// use std::time::Instant;
/// use accel_graph_api::collective::{FileStore, Store};
/// let dir = std::env::temp_dir().join(format!("accel-graph-doc-store-{}", std::process::id()));
/// let store = FileStore::new(&dir)?;
/// store.set("world/id/0/0", &[1, 2, 3])?;
/// assert_eq!(FileStore::new(&dir)?.wait("world/id/0/0", Instant::now())?, Some(vec![1, 2, 3]));
/// store.delete("world/id/0/0")?;
/// assert_eq!(store.get("world/id/0/0")?, None);
/// std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

/// Distinguishes this process's temporary files.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

impl FileStore {
    /// A store in `dir` (created if missing).
    pub fn new(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| GraphError::io(&dir, e))?;
        Ok(FileStore { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`: letters, digits, `.` and `-` as they are, every other byte as `_`
    /// and two hex digits, so distinct keys get distinct names and no key leaves the directory.
    fn path(&self, key: &str) -> PathBuf {
        let mut name = String::with_capacity(key.len());
        for b in key.bytes() {
            if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
                name.push(char::from(b));
            } else {
                name.push_str(&format!("_{b:02x}"));
            }
        }
        // A leading dot would hide the file and collide with the temporary files.
        if name.starts_with('.') {
            name.insert(0, '_');
        }
        self.dir.join(name)
    }

    /// A temporary file holding `value`, to be moved or linked into place whole.
    fn temp_file(&self, value: &[u8]) -> Result<PathBuf> {
        let temp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            NEXT_TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&temp, value).map_err(|e| GraphError::io(&temp, e))?;
        Ok(temp)
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let target = self.path(key);
        let temp = self.temp_file(value)?;
        std::fs::rename(&temp, &target).map_err(|e| GraphError::io(&target, e))
    }

    /// A hard link of a complete temporary file to the key's name: creating a link fails
    /// when the name exists, atomically (how lock files are made), and a reader sees the
    /// value whole or not at all. Where the file system has no hard links, the file
    /// is created exclusively and then written (still one winner, but a reader racing the
    /// write may see it partly written).
    fn set_if_absent(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let target = self.path(key);
        let temp = self.temp_file(value)?;
        let linked = std::fs::hard_link(&temp, &target);
        let _ = std::fs::remove_file(&temp);
        let created = match linked {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .and_then(|mut file| file.write_all(value))
            }
            linked => linked,
        };
        match created {
            Ok(()) => Ok(None),
            // The holder's value (claims are never deleted; empty while a racing exclusive
            // create has not written it yet).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok(Some(self.get(key)?.unwrap_or_default()))
            }
            Err(e) => Err(GraphError::io(&target, e)),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(value) => Ok(Some(value)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(GraphError::io(&path, e)),
        }
    }

    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(GraphError::io(&path, e)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_distinct_and_stay_in_the_directory() {
        let store = FileStore {
            dir: PathBuf::from("/x"),
        };
        let names: Vec<PathBuf> = ["a/b", "a_2fb", "../etc", ".hidden", "a b"]
            .iter()
            .map(|k| store.path(k))
            .collect();
        for (i, a) in names.iter().enumerate() {
            assert_eq!(a.parent(), Some(Path::new("/x")), "{a:?}");
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert!(
            !store
                .path(".hidden")
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with('.')
        );
    }

    /// Of many threads claiming one key at once, exactly one sets it, and every other one
    /// is told the winner's value.
    fn one_claim_wins(store: &(impl Store + Clone + 'static)) {
        for round in 0..20 {
            let key = format!("claim/{round}");
            let results: Vec<Option<Vec<u8>>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8u8)
                    .map(|t| {
                        let (store, key) = (store.clone(), key.clone());
                        s.spawn(move || store.set_if_absent(&key, &[t]).unwrap())
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let winners: Vec<usize> = (0..8).filter(|&t| results[t].is_none()).collect();
            assert_eq!(winners.len(), 1, "round {round}: {results:?}");
            let held = vec![winners[0] as u8];
            assert_eq!(store.get(&key).unwrap(), Some(held.clone()));
            for (t, r) in results.iter().enumerate() {
                if t != winners[0] {
                    assert_eq!(r.as_ref(), Some(&held));
                }
            }
        }
    }

    #[test]
    fn set_if_absent_has_one_winner_in_memory_and_in_a_directory() {
        one_claim_wins(&MemoryStore::new());
        let dir =
            std::env::temp_dir().join(format!("accel-graph-store-claims-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        one_claim_wins(&FileStore::new(&dir).unwrap());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deadlines_saturate() {
        let now = Instant::now();
        assert_eq!(
            deadline_after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        let far = deadline_after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(86_400 * 365));
        // A wait with a far deadline returns what is there without overflowing.
        let store = MemoryStore::new();
        store.set("k", b"v").unwrap();
        assert_eq!(store.wait("k", far).unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn a_memory_store_wakes_a_waiter() {
        let store = MemoryStore::new();
        let writer = store.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            writer.set("k", b"v")
        });
        let got = store
            .wait("k", Instant::now() + Duration::from_secs(5))
            .unwrap();
        t.join().unwrap().unwrap();
        assert_eq!(got, Some(b"v".to_vec()));
        assert_eq!(store.len(), 1);
        store.delete("k").unwrap();
        assert!(store.is_empty());
    }
}
