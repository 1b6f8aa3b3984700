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
/// directory (one host, or a shared file system).
///
/// Keys are made by the communicator (`<name>/<topic>/<round>/<rank>`); values are small.
/// Implement it over your own rendezvous service (a TCP or etcd store) to run ranks on
/// several hosts.
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

    fn wait(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>> {
        (**self).wait(key, deadline)
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
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let target = self.path(key);
        let temp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            NEXT_TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&temp, value).map_err(|e| GraphError::io(&temp, e))?;
        std::fs::rename(&temp, &target).map_err(|e| GraphError::io(&target, e))
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
