//! Consistency checks of the HIP-on-CUDA shim's sources (built only on a GPU machine, so
//! mistakes would otherwise surface there first):
//!
//! * every function the shim exports is listed in its symbol-version script (the script hides
//!   whatever it does not list);
//! * every HIP function the backend's sources call (linked, or looked up at run time) is
//!   exported by the shim — the binaries' imports are checked again on the GPU machine
//!   (`scripts/device/run-hip.sh`), this catches a missing entry here first;
//! * with the `runtime` feature (HIP headers present), the HIP 5.2 values the shim writes out
//!   match the real headers, checked by compiling `shim/abi_check.cpp`.

use std::{collections::BTreeSet, path::PathBuf};

fn shim_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("shim")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Names of the functions defined with `HIP_API` in the shim.
fn exported_functions() -> BTreeSet<String> {
    let source = shim_file("hip_on_cuda.cpp");
    source
        .lines()
        .filter(|l| l.starts_with("HIP_API "))
        .filter_map(|l| {
            let before_paren = &l[..l.find('(')?];
            let name = before_paren.rsplit([' ', '*']).next()?;
            Some(name.to_owned())
        })
        .collect()
}

/// Names listed as `global:` symbols in the version script.
fn versioned_symbols() -> BTreeSet<String> {
    shim_file("libamdhip64.map")
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("hip") && l.ends_with(';'))
        .map(|l| l.trim_end_matches(';').to_owned())
        .collect()
}

#[test]
fn every_exported_function_has_a_symbol_version() {
    let exported = exported_functions();
    assert!(exported.len() > 40, "parsed too few exports: {exported:?}");
    assert!(exported.contains("hipStreamBeginCapture") && exported.contains("hiprtcGetCode"));
    let versioned = versioned_symbols();
    let unlisted: Vec<_> = exported.difference(&versioned).collect();
    assert!(
        unlisted.is_empty(),
        "exported but hidden by the version script: {unlisted:?}"
    );
    let stale: Vec<_> = versioned.difference(&exported).collect();
    assert!(
        stale.is_empty(),
        "in the version script but not defined: {stale:?}"
    );
}

/// The identifier starting at `text`'s beginning.
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// HIP functions the backend's sources and its test binaries call: every `ffi::hip...(` (all
/// HIP calls go through the crate's `ffi` module, or in tests through `hip_sys::hiprt` imported
/// as `ffi`; a `link_name` alias counts as the symbol it names) and every symbol `ffi.rs` looks
/// up at run time (`c"hip..."`).
fn called_functions() -> BTreeSet<String> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let ffi = std::fs::read_to_string(src.join("ffi.rs")).expect("src/ffi.rs");
    // `#[link_name = "X"]` followed by `fn Y(`: Y is X.
    let mut aliases = Vec::new();
    for (i, _) in ffi.match_indices("link_name = \"") {
        let linked = identifier(&ffi[i + "link_name = \"".len()..]);
        if let Some(j) = ffi[i..].find("fn ") {
            aliases.push((identifier(&ffi[i + j + 3..]).to_owned(), linked.to_owned()));
        }
    }
    let mut called = BTreeSet::new();
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let files = std::fs::read_dir(&src)
        .expect("src/")
        .chain(std::fs::read_dir(&tests).expect("tests/"));
    for entry in files {
        let path = entry.expect("a source folder entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        for (i, _) in text.match_indices("ffi::hip") {
            let name = identifier(&text[i + "ffi::".len()..]);
            let after = text[i + "ffi::".len() + name.len()..].trim_start();
            if after.starts_with('(') {
                let name = aliases
                    .iter()
                    .find(|(alias, _)| alias == name)
                    .map_or(name, |(_, linked)| linked.as_str());
                called.insert(name.to_owned());
            }
        }
    }
    for (i, _) in ffi.match_indices("c\"hip") {
        called.insert(identifier(&ffi[i + 2..]).to_owned());
    }
    called
}

#[test]
fn every_hip_function_the_backend_calls_is_exported() {
    let called = called_functions();
    assert!(called.len() > 30, "parsed too few calls: {called:?}");
    for expected in [
        "hipGraphNodeGetType",
        "hipEventRecordWithFlags",
        "hipEventElapsedTime",
        "hiprtcCompileProgram",
        "hipGetDeviceProperties",
        // Called by tests/interop.rs only.
        "hipStreamBeginCapture",
        "hipGraphDestroy",
    ] {
        assert!(
            called.contains(expected),
            "{expected} not found in {called:?}"
        );
    }
    let exported = exported_functions();
    let missing: Vec<_> = called.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "called by the backend but not exported by the shim: {missing:?}"
    );
}

#[cfg(feature = "runtime")]
#[test]
fn the_shim_abi_matches_the_hip_headers() {
    let hip_path = std::env::var("HIP_PATH").unwrap_or_else(|_| "/opt/rocm".to_owned());
    let include = PathBuf::from(hip_path).join("include");
    let check = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shim/abi_check.cpp");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    let output = std::process::Command::new(&compiler)
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-D__HIP_PLATFORM_AMD__",
            "-I",
        ])
        .arg(&include)
        .arg(&check)
        .output()
        .unwrap_or_else(|e| panic!("running {compiler} (a C++ compiler is needed): {e}"));
    assert!(
        output.status.success(),
        "shim/abi_check.cpp does not compile against {}:\n{}",
        include.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}
