//! Compiled code objects, cached in memory for the process and on disk across processes:
//! hiprtc takes from a fraction of a second (a small kernel) to seconds (the built-in GEMM
//! kernels on a cold compiler), every backend instance of a device loads the same code, and
//! a program's next run compiles nothing.
//!
//! A code object is filed under a [`CodeKey`]: the source, the entry point's name, the
//! compiler options, the device's architecture (`gcnArchName`, e.g. `gfx90a:sramecc+:xnack-`,
//! which names everything a code object depends on, target features included; the HIP-on-CUDA
//! shim reports `sm_XY`), the hiprtc and runtime versions, and this file format's version.
//! The whole key is stored in the file and compared on reading, and the code carries a
//! checksum: a file name collision, a truncated or corrupted file, or a stale format is a
//! miss, never wrong code. Code that is read back but does not load is dropped and compiled
//! afresh ([`CodeCache::load_with`]).
//!
//! The directory: `ACCEL_GRAPH_KERNEL_CACHE` if set, else `$XDG_CACHE_HOME/accel-graph/kernels`,
//! else `~/.cache/accel-graph/kernels`. Files are written whole under a temporary name and
//! renamed into place, so a reader never sees a partial one, and concurrent writers of one key
//! leave one complete file. A directory that cannot be written is reported once (a warning)
//! and the process goes on without the disk cache.

use std::{
    collections::HashMap,
    ffi::OsString,
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

/// The first bytes of a cache file (the format's version is in them and in every key).
const MAGIC: &[u8; 8] = b"AGHIPCO1";

/// What the code is compiled for: the device's architecture and the compiler's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The device's `gcnArchName` (`sm_XY` under the HIP-on-CUDA shim).
    pub(crate) arch: String,
    /// `hiprtcVersion`.
    pub(crate) rtc_version: Option<(i32, i32)>,
    /// `hipRuntimeGetVersion`.
    pub(crate) runtime_version: i32,
    /// False when the architecture could not be read: the key then names the device ordinal
    /// instead, which is good for this process only, so nothing goes to disk.
    pub(crate) persistent: bool,
}

/// The identity of one compiled code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeKey {
    /// Every component, each length-prefixed (so no two keys run together).
    bytes: Vec<u8>,
    persistent: bool,
}

/// FNV-1a, 64 bits: stable across Rust releases and processes (unlike `DefaultHasher`), for
/// file names and checksums; equality of keys is decided on their bytes, not on this.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn push_field(bytes: &mut Vec<u8>, field: &[u8]) {
    bytes.extend_from_slice(&(field.len() as u64).to_le_bytes());
    bytes.extend_from_slice(field);
}

impl CodeKey {
    /// The key of `source` compiled with `options` for `target`, loaded by entry point (or
    /// program) `name`.
    pub(crate) fn new(target: &Target, source: &str, name: &str, options: &[String]) -> Self {
        let mut bytes = Vec::with_capacity(source.len() + 256);
        push_field(&mut bytes, MAGIC);
        push_field(&mut bytes, target.arch.as_bytes());
        let rtc = target
            .rtc_version
            .map_or_else(|| "unknown".to_owned(), |(a, b)| format!("{a}.{b}"));
        push_field(&mut bytes, rtc.as_bytes());
        push_field(&mut bytes, &target.runtime_version.to_le_bytes());
        push_field(&mut bytes, name.as_bytes());
        push_field(&mut bytes, &(options.len() as u64).to_le_bytes());
        for option in options {
            push_field(&mut bytes, option.as_bytes());
        }
        push_field(&mut bytes, source.as_bytes());
        CodeKey {
            bytes,
            persistent: target.persistent,
        }
    }

    /// The cache file's name.
    fn file_name(&self) -> String {
        format!("hip-{:016x}.co", fnv1a(&self.bytes))
    }
}

/// Where a code object came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// This process had it.
    Memory,
    /// Read from the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

/// The in-memory and on-disk cache of code objects.
#[derive(Debug)]
pub(crate) struct CodeCache {
    dir: Option<PathBuf>,
    /// Cleared at the first failed write: the disk cache is off for the rest of the process.
    writable: AtomicBool,
    memory: Mutex<HashMap<Vec<u8>, Arc<[u8]>>>,
}

/// The directory the environment names (see the module documentation); `None` if none.
fn cache_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("ACCEL_GRAPH_KERNEL_CACHE") {
        return Some(PathBuf::from(dir));
    }
    // The XDG base-directory specification: a relative path is invalid and ignored.
    if let Some(xdg) = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Some(xdg.join("accel-graph").join("kernels"));
    }
    set("HOME").map(|home| {
        PathBuf::from(home)
            .join(".cache")
            .join("accel-graph")
            .join("kernels")
    })
}

/// Encodes a cache file: magic, key, code length, code checksum, code.
fn encode(key: &CodeKey, code: &[u8]) -> Vec<u8> {
    let mut file = Vec::with_capacity(key.bytes.len() + code.len() + 32);
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(&(key.bytes.len() as u64).to_le_bytes());
    file.extend_from_slice(&key.bytes);
    file.extend_from_slice(&(code.len() as u64).to_le_bytes());
    file.extend_from_slice(&fnv1a(code).to_le_bytes());
    file.extend_from_slice(code);
    file
}

/// The code of a cache file written for `key`; `None` for anything else (another key, a
/// short or corrupted file, another format).
fn decode(key: &CodeKey, file: &[u8]) -> Option<Vec<u8>> {
    fn take_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
        let (head, rest) = bytes.split_at_checked(8)?;
        Some((u64::from_le_bytes(head.try_into().ok()?), rest))
    }
    let rest = file.strip_prefix(MAGIC)?;
    let (key_len, rest) = take_u64(rest)?;
    let (stored_key, rest) = rest.split_at_checked(usize::try_from(key_len).ok()?)?;
    if stored_key != key.bytes {
        return None;
    }
    let (code_len, rest) = take_u64(rest)?;
    let (checksum, code) = take_u64(rest)?;
    (code.len() as u64 == code_len && fnv1a(code) == checksum).then(|| code.to_vec())
}

impl CodeCache {
    /// The process's cache, in the directory the environment names.
    pub(crate) fn global() -> &'static CodeCache {
        static CACHE: OnceLock<CodeCache> = OnceLock::new();
        CACHE.get_or_init(|| {
            let dir = cache_dir(|name| std::env::var_os(name));
            if dir.is_none() {
                tracing::warn!(
                    "no kernel cache directory (neither ACCEL_GRAPH_KERNEL_CACHE, \
                     XDG_CACHE_HOME nor HOME is set): compiled kernels are not cached on disk"
                );
            }
            CodeCache::at(dir)
        })
    }

    /// A cache in `dir` (`None`: memory only).
    fn at(dir: Option<PathBuf>) -> Self {
        CodeCache {
            dir,
            writable: AtomicBool::new(true),
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The directory, while the disk cache is on.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir
            .as_deref()
            .filter(|_| self.writable.load(Ordering::Acquire))
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<[u8]>>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The code filed under `key`, or `compile`'s, filed now. The compiler runs without the
    /// cache's lock held: two threads may compile the same code once each, never wait on each
    /// other's compiler.
    pub(crate) fn get_or_compile<E>(
        &self,
        key: &CodeKey,
        compile: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<(Arc<[u8]>, Origin), E> {
        if let Some(code) = self.memory().get(&key.bytes) {
            return Ok((Arc::clone(code), Origin::Memory));
        }
        let (code, origin) = match self.read(key) {
            Some(code) => (code, Origin::Disk),
            None => {
                let code = compile()?;
                self.write(key, &code);
                (code, Origin::Compiled)
            }
        };
        let code: Arc<[u8]> = code.into();
        self.memory().insert(key.bytes.clone(), Arc::clone(&code));
        Ok((code, origin))
    }

    /// `load` of the code filed under `key` (compiled by `compile` if it is not). Code from
    /// the cache that does not load is forgotten and compiled afresh once: a code object the
    /// key does not fully describe (a runtime that changed underneath it) costs a compile,
    /// not a failure.
    pub(crate) fn load_with<M, E: std::fmt::Display>(
        &self,
        key: &CodeKey,
        compile: impl Fn() -> Result<Vec<u8>, E>,
        load: impl Fn(Arc<[u8]>) -> Result<M, E>,
    ) -> Result<M, E> {
        let (code, origin) = self.get_or_compile(key, &compile)?;
        match load(code) {
            Err(e) if origin != Origin::Compiled => {
                tracing::warn!(
                    error = %e,
                    file = key.file_name(),
                    "a cached code object does not load: compiling it again"
                );
                self.forget(key);
                let (code, _) = self.get_or_compile(key, &compile)?;
                load(code)
            }
            loaded => loaded,
        }
    }

    /// Drops the code filed under `key`, in memory and on disk.
    fn forget(&self, key: &CodeKey) {
        self.memory().remove(&key.bytes);
        if let Some(dir) = self.dir() {
            let _ = fs::remove_file(dir.join(key.file_name()));
        }
    }

    /// The code on disk for `key`, if a valid file holds it.
    fn read(&self, key: &CodeKey) -> Option<Vec<u8>> {
        if !key.persistent {
            return None;
        }
        let file = fs::read(self.dir()?.join(key.file_name())).ok()?;
        decode(key, &file)
    }

    /// Files `code` under `key` on disk: written under a unique temporary name, then renamed
    /// over the final one (atomic within a directory).
    fn write(&self, key: &CodeKey, code: &[u8]) {
        static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);
        let Some(dir) = self.dir().filter(|_| key.persistent) else {
            return;
        };
        let name = key.file_name();
        let temporary = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
        ));
        let written = fs::create_dir_all(dir)
            .and_then(|()| {
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&temporary)?;
                file.write_all(&encode(key, code))
            })
            .and_then(|()| fs::rename(&temporary, dir.join(&name)));
        if let Err(error) = written {
            let _ = fs::remove_file(&temporary);
            self.disable(dir, &error);
        }
    }

    /// Turns the disk cache off after a failed write, warning once.
    fn disable(&self, dir: &Path, error: &io::Error) {
        if self.writable.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                dir = %dir.display(),
                %error,
                "the kernel cache directory is not writable: compiled kernels are not cached \
                 on disk (set ACCEL_GRAPH_KERNEL_CACHE to a writable directory)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn target(arch: &str) -> Target {
        Target {
            arch: arch.to_owned(),
            rtc_version: Some((9, 0)),
            runtime_version: 50_221_153,
            persistent: true,
        }
    }

    fn key(arch: &str, source: &str) -> CodeKey {
        CodeKey::new(&target(arch), source, "k", &["-DX=1".to_owned()])
    }

    /// A fresh directory under the system's temporary one.
    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "accel-graph-hip-cache-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn every_component_is_part_of_the_key() {
        let base = key("gfx90a", "src");
        assert_eq!(base, key("gfx90a", "src"));
        let mut other_rtc = target("gfx90a");
        other_rtc.rtc_version = Some((9, 1));
        let mut other_runtime = target("gfx90a");
        other_runtime.runtime_version += 1;
        for other in [
            key("gfx90a:xnack+", "src"),
            key("sm_90", "src"),
            key("gfx90a", "src "),
            CodeKey::new(&target("gfx90a"), "src", "k2", &["-DX=1".to_owned()]),
            CodeKey::new(&target("gfx90a"), "src", "k", &[]),
            CodeKey::new(&target("gfx90a"), "src", "k", &["-DX=2".to_owned()]),
            // Option and source boundaries do not run together.
            CodeKey::new(&target("gfx90a"), "1src", "k", &["-DX=".to_owned()]),
            CodeKey::new(&other_rtc, "src", "k", &["-DX=1".to_owned()]),
            CodeKey::new(&other_runtime, "src", "k", &["-DX=1".to_owned()]),
        ] {
            assert_ne!(base, other);
            assert_ne!(base.file_name(), other.file_name());
        }
    }

    #[test]
    fn file_names_are_stable_across_processes_and_releases() {
        // FNV-1a's published test vectors: the names do not depend on the Rust release.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        let name = key("gfx90a", "src").file_name();
        assert!(name.starts_with("hip-") && name.ends_with(".co") && name.len() == 23);
    }

    #[test]
    fn the_environment_names_the_directory() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        const ALL: [(&str, &str); 3] = [
            ("ACCEL_GRAPH_KERNEL_CACHE", "/k"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir(env(&ALL)), Some(PathBuf::from("/k")));
        assert_eq!(
            cache_dir(env(&ALL[1..])),
            Some(PathBuf::from("/x/accel-graph/kernels"))
        );
        assert_eq!(
            cache_dir(env(&[("XDG_CACHE_HOME", "relative"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/accel-graph/kernels"))
        );
        assert_eq!(
            cache_dir(env(&[("ACCEL_GRAPH_KERNEL_CACHE", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/accel-graph/kernels"))
        );
        assert_eq!(cache_dir(env(&[])), None);
    }

    #[test]
    fn code_is_written_once_and_read_back_by_the_next_process() {
        let dir = scratch_dir("round-trip");
        let key = key("gfx90a", "round trip");
        let compiles = Cell::new(0);
        let compile = || -> Result<Vec<u8>, String> {
            compiles.set(compiles.get() + 1);
            Ok(vec![7u8; 1000])
        };
        let first = CodeCache::at(Some(dir.clone()));
        let (code, origin) = first.get_or_compile(&key, compile).expect("compiled");
        assert_eq!((&code[..], origin), (&[7u8; 1000][..], Origin::Compiled));
        let (_, origin) = first.get_or_compile(&key, compile).expect("cached");
        assert_eq!(origin, Origin::Memory);
        // Only the final file is left (no temporary).
        let files: Vec<_> = fs::read_dir(&dir)
            .expect("the directory was created")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(files, [OsString::from(key.file_name())]);
        // A new cache (the next process) reads it without compiling.
        let next = CodeCache::at(Some(dir.clone()));
        let (code, origin) = next.get_or_compile(&key, compile).expect("read");
        assert_eq!((&code[..], origin), (&[7u8; 1000][..], Origin::Disk));
        assert_eq!(compiles.get(), 1);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_or_foreign_files_are_misses_and_are_replaced() {
        let dir = scratch_dir("damaged");
        let key = key("gfx90a", "damaged");
        let code = vec![1u8, 2, 3, 4, 5, 6, 7, 8];
        let good = encode(&key, &code);
        assert_eq!(decode(&key, &good), Some(code.clone()));
        let mut flipped = good.clone();
        *flipped.last_mut().expect("non-empty") ^= 1;
        let mut other_magic = good.clone();
        other_magic[7] = b'2';
        let foreign = encode(&self::key("gfx1030", "damaged"), &code);
        for bad in [
            flipped,
            good[..good.len() - 1].to_vec(),
            [&good[..], &[0u8][..]].concat(),
            other_magic,
            foreign,
            Vec::new(),
        ] {
            assert_eq!(decode(&key, &bad), None);
            fs::create_dir_all(&dir).expect("scratch directory");
            fs::write(dir.join(key.file_name()), &bad).expect("write the damaged file");
            let cache = CodeCache::at(Some(dir.clone()));
            let (got, origin) = cache
                .get_or_compile(&key, || Ok::<_, String>(code.clone()))
                .expect("compiled");
            assert_eq!((&got[..], origin), (&code[..], Origin::Compiled));
            // The damaged file was replaced by a good one.
            let on_disk = fs::read(dir.join(key.file_name())).expect("rewritten");
            assert_eq!(decode(&key, &on_disk), Some(code.clone()));
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_directory_turns_the_disk_cache_off_and_compiling_goes_on() {
        // A regular file where the directory should be: no directory can be made there
        // (whatever the permissions of the user running the test).
        let blocker = scratch_dir("unwritable");
        fs::write(&blocker, b"not a directory").expect("blocker file");
        let cache = CodeCache::at(Some(blocker.join("kernels")));
        let key = key("gfx90a", "unwritable");
        for _ in 0..2 {
            let (code, _) = cache
                .get_or_compile(&key, || Ok::<_, String>(vec![9u8; 4]))
                .expect("compiled without a disk cache");
            assert_eq!(&code[..], &[9u8; 4]);
        }
        assert!(cache.dir().is_none(), "the disk cache is off");
        let _ = fs::remove_file(&blocker);
    }

    #[test]
    fn keys_of_an_unknown_architecture_stay_in_memory() {
        let dir = scratch_dir("unknown-arch");
        let mut unknown = target("device 0 of unknown architecture");
        unknown.persistent = false;
        let key = CodeKey::new(&unknown, "src", "k", &[]);
        let cache = CodeCache::at(Some(dir.clone()));
        cache
            .get_or_compile(&key, || Ok::<_, String>(vec![1u8]))
            .expect("compiled");
        assert!(!dir.join(key.file_name()).exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn cached_code_that_does_not_load_is_compiled_again_once() {
        let dir = scratch_dir("stale");
        let key = key("gfx90a", "stale");
        fs::create_dir_all(&dir).expect("scratch directory");
        fs::write(dir.join(key.file_name()), encode(&key, b"stale")).expect("stale file");
        let cache = CodeCache::at(Some(dir.clone()));
        let loads = Cell::new(Vec::new());
        let load = |code: Arc<[u8]>| {
            let mut seen = loads.take();
            seen.push(code.to_vec());
            loads.set(seen);
            if &code[..] == b"fresh" {
                Ok(code.len())
            } else {
                Err("invalid image".to_owned())
            }
        };
        let loaded = cache.load_with(&key, || Ok(b"fresh".to_vec()), load);
        assert_eq!(loaded, Ok(5));
        assert_eq!(loads.take(), [b"stale".to_vec(), b"fresh".to_vec()]);
        // Freshly compiled code that does not load is an error, not a loop.
        let key = self::key("gfx90a", "bad");
        let failed = cache.load_with(&key, || Ok(b"bad".to_vec()), load);
        assert_eq!(failed, Err("invalid image".to_owned()));
        assert_eq!(loads.take().len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}
