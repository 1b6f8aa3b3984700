//! Finding the CUDA driver library before cudarc touches it: cudarc's dynamic loader panics
//! when `libcuda` is missing, and a backend constructor must return an error instead.

use std::panic::{self, AssertUnwindSafe};

use accel_graph_api::{GraphError, Result};

use crate::driver_error::BACKEND;

/// Library names tried, in the order cudarc's loader tries its candidates.
fn candidates() -> Vec<String> {
    let mut names = cudarc::get_lib_name_candidates("cuda");
    names.extend(cudarc::get_lib_name_candidates("nvcuda"));
    names
}

/// Checks that the CUDA driver library can be loaded; the error carries the loader's text.
pub(crate) fn ensure_driver_library() -> Result<()> {
    let mut first_error = None;
    for name in candidates() {
        // SAFETY: loading libcuda runs its initialisers, which is what using the driver means;
        // the handle is dropped at once (cudarc keeps its own).
        match unsafe { libloading::Library::new(&name) } {
            Ok(_) => return Ok(()),
            Err(e) => {
                first_error.get_or_insert_with(|| match std::error::Error::source(&e) {
                    Some(cause) => format!("{name}: {e}: {cause}"),
                    None => format!("{name}: {e}"),
                });
            }
        }
    }
    Err(GraphError::BackendUnavailable {
        backend: BACKEND,
        reason: format!(
            "the CUDA driver library could not be loaded (is an NVIDIA driver installed and \
             libcuda on the loader path?): {}",
            first_error.unwrap_or_else(|| "no candidate names".to_owned())
        ),
    })
}

/// Runs `f`, turning a panic from cudarc's loader (a driver too old to export a symbol the
/// bindings need) into `BackendUnavailable`.
pub(crate) fn guard_loader<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic without message".to_owned());
            Err(GraphError::BackendUnavailable {
                backend: BACKEND,
                reason: format!("{what}: {text}"),
            })
        }
    }
}
