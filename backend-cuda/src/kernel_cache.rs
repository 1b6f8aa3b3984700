//! The disk cache of users' compiled kernels: NVRTC takes tens to hundreds of milliseconds per
//! kernel, so a process that loads a kernel another process (or an earlier run) compiled reads
//! the binary instead.
//!
//! * Where: `$ACCEL_GRAPH_KERNEL_CACHE` (an empty value turns the disk cache off), else
//!   `$XDG_CACHE_HOME/accel-graph/kernels`, else `$HOME/.cache/accel-graph/kernels`
//!   (relative values of the XDG and HOME variables are ignored, as the XDG specification
//!   says).
//! * What: one file per compiled kernel, named after the kernel and a hash of its key — the
//!   source, entry point, options, NVRTC version and target architecture. The file holds the
//!   whole key before the binary, and a read compares it, so a hash collision or a foreign
//!   file is a miss, never the wrong kernel.
//! * How: written to a temporary file in the same folder and renamed over the final name, so
//!   concurrent processes never see half a file. A folder that cannot be written only turns
//!   the disk cache off (one warning per process); compilation goes on.

use std::{
    ffi::OsString,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

/// The environment variable naming the cache folder.
pub(crate) const CACHE_ENV: &str = "ACCEL_GRAPH_KERNEL_CACHE";

/// First bytes of every cache file (the format's version is its last digit).
const MAGIC: &[u8; 8] = b"AGKC\x00\x00\x00\x01";

/// The cache folder given the environment (`get` reads one variable), or `None` when the
/// disk cache is off or no folder can be named.
pub(crate) fn cache_dir_from(get: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = get(CACHE_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let absolute = |name: &str| {
        get(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    if let Some(xdg) = absolute("XDG_CACHE_HOME") {
        return Some(xdg.join("accel-graph").join("kernels"));
    }
    absolute("HOME").map(|home| home.join(".cache").join("accel-graph").join("kernels"))
}

/// The cache folder of this process's environment.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    cache_dir_from(|name| std::env::var_os(name))
}

/// What a compiled kernel depends on: equal keys compile to the same binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheKey {
    /// The entry point.
    pub(crate) name: String,
    /// The CUDA C source.
    pub(crate) source: String,
    /// The user's NVRTC options, in order (the target's option is not among them).
    pub(crate) options: Vec<String>,
    /// NVRTC's `(major, minor)` version.
    pub(crate) nvrtc: (i32, i32),
    /// The target (`sm_90` for a cubin, `compute_90` for PTX).
    pub(crate) target: String,
}

impl CacheKey {
    /// The key as bytes: every field length-prefixed, so no two keys share an encoding.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut field = |bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        field(self.name.as_bytes());
        field(self.target.as_bytes());
        field(format!("{}.{}", self.nvrtc.0, self.nvrtc.1).as_bytes());
        field(&(self.options.len() as u64).to_le_bytes());
        for option in &self.options {
            field(option.as_bytes());
        }
        field(self.source.as_bytes());
        out
    }

    /// The file name: the entry point (its file-safe characters, shortened), the FNV-1a hash
    /// of the encoded key, and the binary's kind.
    pub(crate) fn file_name(&self, extension: &str) -> String {
        let stem: String = self
            .name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(48)
            .collect();
        format!("{stem}-{:016x}.{extension}", fnv1a(&self.encode()))
    }
}

/// 64-bit FNV-1a: stable across processes and Rust versions (the standard hasher is not
/// promised to be), and enough to spread file names; the key in the file settles equality.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A cache file's bytes: magic, key, binary (both length-prefixed).
fn encode_file(key: &[u8], image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 16 + key.len() + image.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    out.extend_from_slice(image);
    out
}

/// The binary in a cache file's bytes if the file holds exactly `key`; `None` for another key,
/// a truncated or foreign file.
fn decode_file(bytes: &[u8], key: &[u8]) -> Option<Vec<u8>> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (stored, rest) = take_field(rest)?;
    if stored != key {
        return None;
    }
    let (image, rest) = take_field(rest)?;
    rest.is_empty().then(|| image.to_vec())
}

/// A length-prefixed field and what follows it.
fn take_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// The cached binary of `key` in `dir`, if there is one.
pub(crate) fn read(dir: &Path, key: &CacheKey, extension: &str) -> Option<Vec<u8>> {
    let bytes = fs::read(dir.join(key.file_name(extension))).ok()?;
    decode_file(&bytes, &key.encode())
}

/// Stores `image` as the binary of `key` in `dir` (created if missing), atomically: a
/// temporary file in `dir`, renamed over the final name.
pub(crate) fn write(
    dir: &Path,
    key: &CacheKey,
    extension: &str,
    image: &[u8],
) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    fs::create_dir_all(dir)?;
    let name = key.file_name(extension);
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::File::create(&temp).and_then(|mut file| {
        file.write_all(&encode_file(&key.encode(), image))?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| fs::rename(&temp, dir.join(&name)));
    if renamed.is_err() {
        let _ = fs::remove_file(&temp);
    }
    renamed
}

/// Stores `image` if a cache folder is configured; a failure turns the disk cache off for
/// this write only, with one warning per process.
pub(crate) fn store(dir: Option<&Path>, key: &CacheKey, extension: &str, image: &[u8]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Some(dir) = dir else { return };
    if let Err(e) = write(dir, key, extension, image)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            folder = %dir.display(),
            error = %e,
            "the kernel cache folder cannot be written: compiled kernels are not kept on disk \
             (set {CACHE_ENV} to a writable folder, or to an empty value to silence this)"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn key() -> CacheKey {
        CacheKey {
            name: "ag_affine".to_owned(),
            source: "extern \"C\" __global__ void ag_affine() {}".to_owned(),
            options: vec!["-DTILE=16".to_owned()],
            nvrtc: (12, 8),
            target: "sm_90".to_owned(),
        }
    }

    /// A fresh folder under the system's temporary folder.
    fn temp_dir(tag: &str) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "accel-graph-kernel-cache-test-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_folder_follows_the_variables_in_order() {
        let all = [
            (CACHE_ENV, "/explicit"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(cache_dir_from(env(&all)), Some(PathBuf::from("/explicit")));
        assert_eq!(
            cache_dir_from(env(&all[1..])),
            Some(PathBuf::from("/xdg/accel-graph/kernels"))
        );
        assert_eq!(
            cache_dir_from(env(&all[2..])),
            Some(PathBuf::from("/home/u/.cache/accel-graph/kernels"))
        );
        assert_eq!(cache_dir_from(env(&[])), None);
    }

    #[test]
    fn an_empty_setting_turns_the_cache_off_and_relative_xdg_paths_are_ignored() {
        assert_eq!(
            cache_dir_from(env(&[(CACHE_ENV, ""), ("HOME", "/home/u")])),
            None
        );
        assert_eq!(
            cache_dir_from(env(&[("XDG_CACHE_HOME", "rel/cache"), ("HOME", "/home/u")])),
            Some(PathBuf::from("/home/u/.cache/accel-graph/kernels"))
        );
        assert_eq!(cache_dir_from(env(&[("HOME", "relative")])), None);
    }

    #[test]
    fn every_part_of_the_key_changes_the_file() {
        let base = key();
        let mut variants = vec![base.clone()];
        let edits: [fn(&mut CacheKey); 6] = [
            |k| k.name.push('2'),
            |k| k.source.push(' '),
            |k| k.options.push("--use_fast_math".to_owned()),
            |k| k.nvrtc = (12, 9),
            |k| k.target = "compute_90".to_owned(),
            // Options split differently are another key, though their text joins the same.
            |k| k.options = vec!["-DTILE=".to_owned(), "16".to_owned()],
        ];
        for edit in edits {
            let mut k = base.clone();
            edit(&mut k);
            variants.push(k);
        }
        for (i, a) in variants.iter().enumerate() {
            for b in &variants[i + 1..] {
                assert_ne!(a.encode(), b.encode(), "{a:?} and {b:?} encode alike");
                assert_ne!(a.file_name("cubin"), b.file_name("cubin"));
            }
        }
        assert!(base.file_name("cubin").starts_with("ag_affine-"));
        assert_eq!(base.file_name("ptx"), key().file_name("ptx"));
    }

    #[test]
    fn file_names_keep_only_safe_characters() {
        let mut k = key();
        k.name = "../evil/na me".to_owned();
        let name = k.file_name("cubin");
        assert!(name.starts_with("evilname-"), "{name}");
        assert!(!name.contains('/'));
    }

    #[test]
    fn a_written_binary_reads_back_and_nothing_else_does() {
        let dir = temp_dir("roundtrip");
        let image = b"\x7fELF a cubin".to_vec();
        assert_eq!(read(&dir, &key(), "cubin"), None, "empty cache");
        write(&dir, &key(), "cubin", &image).expect("writable temp folder");
        assert_eq!(read(&dir, &key(), "cubin"), Some(image.clone()));
        // Another extension (a PTX of the same key) is another file.
        assert_eq!(read(&dir, &key(), "ptx"), None);
        // Overwriting replaces the binary; no temporary file is left behind.
        write(&dir, &key(), "cubin", b"second").expect("writable");
        assert_eq!(read(&dir, &key(), "cubin"), Some(b"second".to_vec()));
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .expect("folder exists")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_of_another_key_or_a_damaged_file_is_a_miss() {
        let dir = temp_dir("damaged");
        let path = dir.join(key().file_name("cubin"));
        write(&dir, &key(), "cubin", b"binary").expect("writable");
        let good = fs::read(&path).expect("written");
        // The same file name holding another key (a hash collision) is a miss.
        let mut other = key();
        other.source.push_str("// changed");
        fs::write(&path, encode_file(&other.encode(), b"other binary")).expect("writable");
        assert_eq!(read(&dir, &key(), "cubin"), None);
        // Truncated, extended, or not a cache file at all.
        for bytes in [
            &good[..good.len() - 1],
            &[good.as_slice(), b"x"].concat()[..],
            b"not a cache file",
            b"",
        ] {
            fs::write(&path, bytes).expect("writable");
            assert_eq!(read(&dir, &key(), "cubin"), None, "{bytes:?}");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_folder_fails_the_write_and_store_carries_on() {
        let dir = temp_dir("unwritable");
        // A file where the folder should be: nothing can be created under it.
        fs::write(&dir, b"in the way").expect("temp folder writable");
        assert!(write(&dir, &key(), "cubin", b"x").is_err());
        store(Some(&dir), &key(), "cubin", b"x");
        store(None, &key(), "cubin", b"x");
        assert_eq!(read(&dir, &key(), "cubin"), None);
        let _ = fs::remove_file(&dir);
    }
}
