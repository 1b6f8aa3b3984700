//! The HIP entry points the backend calls that hip-sys does not bind (or binds with a newer
//! ROCm's enum layout), and the ones resolved at run time because older runtimes lack them.

use std::{
    ffi::{CStr, c_char, c_int, c_uint, c_void},
    sync::OnceLock,
};

pub(crate) use hip_sys::hiprt::*;

/// `hiprtcResult` (an `int` in C; kept as one so that no value read back is ever invalid).
pub(crate) type HiprtcResult = c_int;
/// `hiprtcProgram`.
pub(crate) type HiprtcProgram = *mut c_void;
/// `HIPRTC_SUCCESS`.
pub(crate) const HIPRTC_SUCCESS: HiprtcResult = 0;

// hiprtc lives inside libamdhip64 in ROCm 5.x.
#[link(name = "amdhip64")]
unsafe extern "C" {
    pub(crate) fn hiprtcCreateProgram(
        prog: *mut HiprtcProgram,
        src: *const c_char,
        name: *const c_char,
        num_headers: c_int,
        headers: *const *const c_char,
        include_names: *const *const c_char,
    ) -> HiprtcResult;
    pub(crate) fn hiprtcCompileProgram(
        prog: HiprtcProgram,
        num_options: c_int,
        options: *const *const c_char,
    ) -> HiprtcResult;
    pub(crate) fn hiprtcGetProgramLogSize(prog: HiprtcProgram, size: *mut usize) -> HiprtcResult;
    pub(crate) fn hiprtcGetProgramLog(prog: HiprtcProgram, log: *mut c_char) -> HiprtcResult;
    pub(crate) fn hiprtcGetCodeSize(prog: HiprtcProgram, size: *mut usize) -> HiprtcResult;
    pub(crate) fn hiprtcGetCode(prog: HiprtcProgram, code: *mut c_char) -> HiprtcResult;
    pub(crate) fn hiprtcDestroyProgram(prog: *mut HiprtcProgram) -> HiprtcResult;
    pub(crate) fn hiprtcGetErrorString(result: HiprtcResult) -> *const c_char;
}

// Node types are read as a plain `int`: ROCm 5.2 numbers them from 1, later releases (and
// hip-sys' enum) from 0, so the value is decoded against the runtime version instead of being
// trusted as hip-sys' enum.
#[link(name = "amdhip64")]
unsafe extern "C" {
    #[link_name = "hipGraphNodeGetType"]
    pub(crate) fn hipGraphNodeGetTypeRaw(node: hipGraphNode_t, kind: *mut c_int) -> hipError_t;
}

/// `hipGraphUpload(exec, stream)` (not in ROCm 5.2; later releases export it).
pub(crate) type GraphUploadFn = unsafe extern "C" fn(hipGraphExec_t, hipStream_t) -> hipError_t;
/// `hipGraphDebugDotPrint(graph, path, flags)` (not in ROCm 5.2; later releases export it).
pub(crate) type GraphDebugDotPrintFn =
    unsafe extern "C" fn(hipGraph_t, *const c_char, c_uint) -> hipError_t;

/// `hipLaunchHostFunc(stream, fn, user_data)` (not in ROCm 5.2; later releases export it).
pub(crate) type LaunchHostFuncFn =
    unsafe extern "C" fn(hipStream_t, hipHostFn_t, *mut c_void) -> hipError_t;

/// Entry points newer than ROCm 5.2, looked up in the loaded runtime so the backend links
/// against every 5.x release and uses them where present.
#[derive(Clone, Copy)]
pub(crate) struct OptionalEntryPoints {
    pub(crate) graph_upload: Option<GraphUploadFn>,
    pub(crate) graph_debug_dot_print: Option<GraphDebugDotPrintFn>,
    pub(crate) launch_host_func: Option<LaunchHostFuncFn>,
}

/// Looks a symbol up among the libraries already loaded (libamdhip64 is one).
fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `dlsym` with RTLD_DEFAULT only reads the loaded objects' symbol tables; `name` is
    // a valid NUL-terminated string.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!sym.is_null()).then_some(sym)
}

/// The optional entry points of the loaded runtime (looked up once).
pub(crate) fn optional() -> OptionalEntryPoints {
    static ENTRY_POINTS: OnceLock<OptionalEntryPoints> = OnceLock::new();
    *ENTRY_POINTS.get_or_init(|| OptionalEntryPoints {
        // SAFETY: the symbols, where present, have exactly these C signatures in every HIP
        // release that exports them.
        graph_upload: lookup(c"hipGraphUpload")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, GraphUploadFn>(p) }),
        // SAFETY: as above.
        graph_debug_dot_print: lookup(c"hipGraphDebugDotPrint")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, GraphDebugDotPrintFn>(p) }),
        // SAFETY: as above.
        launch_host_func: lookup(c"hipLaunchHostFunc")
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, LaunchHostFuncFn>(p) }),
    })
}

/// A HIP handle that may cross threads: HIP objects are usable from any host thread.
#[derive(Debug)]
pub(crate) struct Handle<T>(pub(crate) *mut T);

// By hand: derives would require `T: Clone` / `T: PartialEq` of the opaque pointee.
impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
impl<T> PartialEq for Handle<T> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}
impl<T> Eq for Handle<T> {}

// SAFETY: HIP streams, events, graphs, modules and device pointers are process-wide objects the
// runtime lets any thread use; the wrapper only carries the pointer value.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above; sharing the pointer value is harmless.
unsafe impl<T> Sync for Handle<T> {}

impl<T> Handle<T> {
    /// The null handle.
    pub(crate) fn null() -> Self {
        Handle(std::ptr::null_mut())
    }

    /// True for the null handle.
    pub(crate) fn is_null(self) -> bool {
        self.0.is_null()
    }
}
