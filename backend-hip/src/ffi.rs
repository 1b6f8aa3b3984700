//! The HIP entry points the backend calls that hip-sys does not bind (or binds with a newer
//! ROCm's enum layout), and the ones resolved at run time because older runtimes lack them.
//!
//! Every HIP call of the crate goes through this module (`ffi::hipX`), so the shim's
//! consistency test (`tests/shim_files.rs`) can list them from the sources.

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
    pub(crate) fn hiprtcVersion(major: *mut c_int, minor: *mut c_int) -> HiprtcResult;
}

// `hipGetDeviceProperties` is hip-sys' binding; its `hipDeviceProp_t` (generated from ROCm 5.4's
// headers) has ROCm 5.2's layout, which is what the runtime writes and what the HIP-on-CUDA
// shim's `hip_abi.h` writes out (checked against the headers by `abi_check.cpp`).
const _: () = {
    assert!(std::mem::size_of::<hipDeviceProp_t>() == 792);
    assert!(std::mem::offset_of!(hipDeviceProp_t, gcnArchName) == 396);
};

// Node types are read as a plain `int`: ROCm 5.2 numbers them from 1, later releases (and
// hip-sys' enum) from 0, so the value is decoded against the runtime version instead of being
// trusted as hip-sys' enum.
#[link(name = "amdhip64")]
unsafe extern "C" {
    #[link_name = "hipGraphNodeGetType"]
    pub(crate) fn hipGraphNodeGetTypeRaw(node: hipGraphNode_t, kind: *mut c_int) -> hipError_t;
}

// Enum out-parameters of the editing calls are read as plain ints as well, so a value a
// runtime adds later can never be an invalid enum.
#[link(name = "amdhip64")]
unsafe extern "C" {
    #[link_name = "hipGraphExecUpdate"]
    pub(crate) fn hipGraphExecUpdateRaw(
        exec: hipGraphExec_t,
        graph: hipGraph_t,
        error_node: *mut hipGraphNode_t,
        result: *mut c_int,
    ) -> hipError_t;
    #[link_name = "hipStreamGetCaptureInfo_v2"]
    pub(crate) fn hipStreamGetCaptureInfoV2Raw(
        stream: hipStream_t,
        status: *mut c_int,
        id: *mut std::ffi::c_ulonglong,
        graph: *mut hipGraph_t,
        dependencies: *mut *const hipGraphNode_t,
        count: *mut usize,
    ) -> hipError_t;
}

/// `hipGraphUpload(exec, stream)`.
pub(crate) type GraphUploadFn = unsafe extern "C" fn(hipGraphExec_t, hipStream_t) -> hipError_t;
/// `hipGraphDebugDotPrint(graph, path, flags)`.
pub(crate) type GraphDebugDotPrintFn =
    unsafe extern "C" fn(hipGraph_t, *const c_char, c_uint) -> hipError_t;
/// `hipLaunchHostFunc(stream, fn, user_data)`.
pub(crate) type LaunchHostFuncFn =
    unsafe extern "C" fn(hipStream_t, hipHostFn_t, *mut c_void) -> hipError_t;
/// `hipEventRecordWithFlags(event, stream, flags)`.
pub(crate) type EventRecordWithFlagsFn =
    unsafe extern "C" fn(hipEvent_t, hipStream_t, c_uint) -> hipError_t;

/// `hipEventRecordExternal`: the record becomes a node of its own in a capture (the value of
/// the runtimes that have `hipEventRecordWithFlags`; ROCm 5.2's headers lack it).
pub(crate) const EVENT_RECORD_EXTERNAL: c_uint = 0x1;

/// `hipEventWaitExternal`: the wait becomes a node of its own in a capture (runtimes with
/// external event nodes, which `hipEventRecordWithFlags` marks; ROCm 5.2's headers lack it).
pub(crate) const EVENT_WAIT_EXTERNAL: c_uint = 0x1;

/// `hipGraphInstantiateFlagAutoFreeOnLaunch` (ROCm 5.2 has it).
pub(crate) const GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 1;

/// Entry points newer than ROCm 5.2 (same signatures in every release that exports them),
/// looked up in the loaded runtime so the backend links against every 5.x release and uses them
/// where present.
#[derive(Clone, Copy)]
pub(crate) struct OptionalEntryPoints {
    pub(crate) graph_upload: Option<GraphUploadFn>,
    pub(crate) graph_debug_dot_print: Option<GraphDebugDotPrintFn>,
    pub(crate) launch_host_func: Option<LaunchHostFuncFn>,
    pub(crate) event_record_with_flags: Option<EventRecordWithFlagsFn>,
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
        graph_upload: lookup(c"hipGraphUpload")
            // SAFETY: the symbols, where present, have exactly these C signatures in every
            // HIP release that exports them (the same holds for the three below).
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, GraphUploadFn>(p) }),
        graph_debug_dot_print: lookup(c"hipGraphDebugDotPrint")
            // SAFETY: as above.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, GraphDebugDotPrintFn>(p) }),
        launch_host_func: lookup(c"hipLaunchHostFunc")
            // SAFETY: as above.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, LaunchHostFuncFn>(p) }),
        event_record_with_flags: lookup(c"hipEventRecordWithFlags")
            // SAFETY: as above.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, EventRecordWithFlagsFn>(p) }),
    })
}
