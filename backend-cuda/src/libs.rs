//! The run-time libraries beside the driver — NVRTC for users' kernels, cuBLAS for GEMM —
//! found before cudarc touches them: cudarc's loader panics when a library or one of its
//! symbols is missing, and a missing library must be a typed error instead.

use std::panic::{self, AssertUnwindSafe};

use accel_graph_api::GraphError;
use accel_graph_driver::{DriverError, DriverResult};

/// A run-time library the backend loads on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Library {
    /// Its name in errors (`libnvrtc`).
    pub(crate) name: &'static str,
    /// File names tried on Linux: the sonames of the CUDA majors cudarc loads, then the
    /// development link.
    linux: &'static [&'static str],
    /// File names tried on Windows.
    windows: &'static [&'static str],
    /// What provides it, for the error.
    install: &'static str,
}

/// NVRTC, which compiles users' CUDA C kernels.
pub(crate) const NVRTC: Library = Library {
    name: "libnvrtc",
    linux: &[
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11.2",
        "libnvrtc.so",
    ],
    windows: &[
        "nvrtc64_130_0.dll",
        "nvrtc64_120_0.dll",
        "nvrtc64_112_0.dll",
    ],
    install: "install the CUDA toolkit's NVRTC (the cuda-nvrtc package, or pip's \
              nvidia-cuda-nvrtc-cu12) and put its lib folder on LD_LIBRARY_PATH",
};

/// cuBLAS, which runs GEMM.
pub(crate) const CUBLAS: Library = Library {
    name: "libcublas",
    linux: &[
        "libcublas.so.13",
        "libcublas.so.12",
        "libcublas.so.11",
        "libcublas.so",
    ],
    windows: &["cublas64_13.dll", "cublas64_12.dll", "cublas64_11.dll"],
    install: "install cuBLAS (the libcublas package, or pip's nvidia-cublas-cu12) and put its \
              lib folder on LD_LIBRARY_PATH",
};

impl Library {
    /// The file names tried. Each is among the names cudarc's loader tries, so one that loads
    /// here is one cudarc finds. Not cudarc's own list (`get_lib_name_candidates`): that exists
    /// only while cudarc loads at run time, and a build where another crate has cudarc link
    /// CUDA instead (candle-core's `cuda` feature asks for `dynamic-linking`) turns loading off
    /// for every crate in it.
    fn candidates(&self) -> Vec<String> {
        let names = if cfg!(windows) {
            self.windows
        } else {
            self.linux
        };
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// `Ok` if one of the file names cudarc tries loads (so cudarc's loader will not panic on
    /// the library itself), else [`GraphError::LibraryUnavailable`] with the loader's first
    /// error and what to install.
    pub(crate) fn probe(&self) -> Result<(), GraphError> {
        let mut first_error = None;
        for name in self.candidates() {
            // SAFETY: loading the library runs its initialisers, which is what using it means;
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
        Err(self.unavailable(&first_error.unwrap_or_else(|| "no candidate names".to_owned())))
    }

    /// [`GraphError::LibraryUnavailable`] for this library, with `detail` (the loader's text).
    pub(crate) fn unavailable(&self, detail: &str) -> GraphError {
        GraphError::LibraryUnavailable {
            library: self.name,
            reason: format!(
                "{detail} (tried {}); {}",
                self.candidates().join(", "),
                self.install
            ),
        }
    }

    /// Runs `f`, which calls into the library through cudarc, turning a panic of cudarc's
    /// loader (a library too old to export a symbol the bindings look up) into
    /// [`GraphError::LibraryUnavailable`].
    pub(crate) fn guard<T>(&self, f: impl FnOnce() -> DriverResult<T>) -> DriverResult<T> {
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(result) => result,
            Err(payload) => {
                let text = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "panic without message".to_owned());
                Err(DriverError::Api(self.unavailable(&text)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABSENT: Library = Library {
        name: "libabsent",
        linux: &["libaccel_graph_no_such_library.so"],
        windows: &["accel_graph_no_such_library.dll"],
        install: "nothing to install",
    };

    #[test]
    fn a_missing_library_is_library_unavailable_naming_it() {
        match ABSENT.probe() {
            Err(GraphError::LibraryUnavailable { library, reason }) => {
                assert_eq!(library, "libabsent");
                assert!(reason.contains("accel_graph_no_such_library"), "{reason}");
                assert!(reason.contains("nothing to install"), "{reason}");
            }
            other => panic!("expected LibraryUnavailable, got {other:?}"),
        }
    }

    #[test]
    fn probes_agree_with_cudarcs_own_presence_checks() {
        // SAFETY: only tries to load the libraries, as the probes do.
        let (nvrtc, cublas) = unsafe {
            (
                cudarc::nvrtc::sys::is_culib_present(),
                cudarc::cublas::sys::is_culib_present(),
            )
        };
        assert_eq!(NVRTC.probe().is_ok(), nvrtc);
        assert_eq!(CUBLAS.probe().is_ok(), cublas);
        for (library, present) in [(NVRTC, nvrtc), (CUBLAS, cublas)] {
            if !present {
                let Err(GraphError::LibraryUnavailable { reason, .. }) = library.probe() else {
                    panic!("{} absent but probed present", library.name);
                };
                assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
            }
        }
    }

    #[test]
    fn a_loader_panic_is_library_unavailable() {
        let out: DriverResult<()> = CUBLAS.guard(|| panic!("Missing symbol cublasFoo"));
        match out {
            Err(DriverError::Api(GraphError::LibraryUnavailable { library, reason })) => {
                assert_eq!(library, "libcublas");
                assert!(reason.contains("Missing symbol cublasFoo"), "{reason}");
            }
            other => panic!("expected LibraryUnavailable, got {other:?}"),
        }
        assert!(matches!(CUBLAS.guard(|| Ok(7)), Ok(7)));
    }
}
