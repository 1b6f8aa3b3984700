// HIP-on-CUDA forwarding library: test infrastructure for accel-graph's HIP backend.
//
// Built with nvcc into a library named `libamdhip64.so.5`, it exports the HIP 5.2 entry points
// the backend uses and forwards each one to CUDA (runtime, driver, NVRTC), translating enum
// values and error codes as HIP's own NVIDIA platform headers do. Every forwarded call really
// reaches CUDA; anything the shim does not translate fails with a HIP error code, never with a
// success that did no work. It proves the backend's logic on a real GPU runtime, not on AMD
// hardware. See README.md.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hip_abi.h"

#define HIP_API extern "C" __attribute__((visibility("default")))

namespace {

// Every error code of HIP 5.2, with its name. HIP numbers these as CUDA (runtime and driver)
// does, so a CUDA code that appears here keeps its value; any other becomes hipErrorUnknown.
struct HipCode {
    int code;
    const char* name;
};
const HipCode kHipCodes[] = {
    {0, "hipSuccess"},
    {1, "hipErrorInvalidValue"},
    {2, "hipErrorOutOfMemory"},
    {3, "hipErrorNotInitialized"},
    {4, "hipErrorDeinitialized"},
    {5, "hipErrorProfilerDisabled"},
    {6, "hipErrorProfilerNotInitialized"},
    {7, "hipErrorProfilerAlreadyStarted"},
    {8, "hipErrorProfilerAlreadyStopped"},
    {9, "hipErrorInvalidConfiguration"},
    {12, "hipErrorInvalidPitchValue"},
    {13, "hipErrorInvalidSymbol"},
    {17, "hipErrorInvalidDevicePointer"},
    {21, "hipErrorInvalidMemcpyDirection"},
    {35, "hipErrorInsufficientDriver"},
    {52, "hipErrorMissingConfiguration"},
    {53, "hipErrorPriorLaunchFailure"},
    {98, "hipErrorInvalidDeviceFunction"},
    {100, "hipErrorNoDevice"},
    {101, "hipErrorInvalidDevice"},
    {200, "hipErrorInvalidImage"},
    {201, "hipErrorInvalidContext"},
    {202, "hipErrorContextAlreadyCurrent"},
    {205, "hipErrorMapFailed"},
    {206, "hipErrorUnmapFailed"},
    {207, "hipErrorArrayIsMapped"},
    {208, "hipErrorAlreadyMapped"},
    {209, "hipErrorNoBinaryForGpu"},
    {210, "hipErrorAlreadyAcquired"},
    {211, "hipErrorNotMapped"},
    {212, "hipErrorNotMappedAsArray"},
    {213, "hipErrorNotMappedAsPointer"},
    {214, "hipErrorECCNotCorrectable"},
    {215, "hipErrorUnsupportedLimit"},
    {216, "hipErrorContextAlreadyInUse"},
    {217, "hipErrorPeerAccessUnsupported"},
    {218, "hipErrorInvalidKernelFile"},
    {219, "hipErrorInvalidGraphicsContext"},
    {300, "hipErrorInvalidSource"},
    {301, "hipErrorFileNotFound"},
    {302, "hipErrorSharedObjectSymbolNotFound"},
    {303, "hipErrorSharedObjectInitFailed"},
    {304, "hipErrorOperatingSystem"},
    {400, "hipErrorInvalidHandle"},
    {401, "hipErrorIllegalState"},
    {500, "hipErrorNotFound"},
    {600, "hipErrorNotReady"},
    {700, "hipErrorIllegalAddress"},
    {701, "hipErrorLaunchOutOfResources"},
    {702, "hipErrorLaunchTimeOut"},
    {704, "hipErrorPeerAccessAlreadyEnabled"},
    {705, "hipErrorPeerAccessNotEnabled"},
    {708, "hipErrorSetOnActiveProcess"},
    {709, "hipErrorContextIsDestroyed"},
    {710, "hipErrorAssert"},
    {712, "hipErrorHostMemoryAlreadyRegistered"},
    {713, "hipErrorHostMemoryNotRegistered"},
    {719, "hipErrorLaunchFailure"},
    {720, "hipErrorCooperativeLaunchTooLarge"},
    {801, "hipErrorNotSupported"},
    {900, "hipErrorStreamCaptureUnsupported"},
    {901, "hipErrorStreamCaptureInvalidated"},
    {902, "hipErrorStreamCaptureMerge"},
    {903, "hipErrorStreamCaptureUnmatched"},
    {904, "hipErrorStreamCaptureUnjoined"},
    {905, "hipErrorStreamCaptureIsolation"},
    {906, "hipErrorStreamCaptureImplicit"},
    {907, "hipErrorCapturedEvent"},
    {908, "hipErrorStreamCaptureWrongThread"},
    {910, "hipErrorGraphExecUpdateFailure"},
    {999, "hipErrorUnknown"},
    {1052, "hipErrorRuntimeMemory"},
    {1053, "hipErrorRuntimeOther"},
};

const char* hip_name(int code) {
    for (const HipCode& c : kHipCodes) {
        if (c.code == code) return c.name;
    }
    return nullptr;
}

bool trace_enabled() {
    static const bool on = std::getenv("HIP_ON_CUDA_TRACE") != nullptr;
    return on;
}

// A CUDA code keeps its value when HIP 5.2 has it; else hipErrorUnknown, reported on stderr so
// the lost detail is visible.
shim_hipError_t from_cuda_code(int code, const char* cuda_name, const char* call) {
    if (hip_name(code) != nullptr) {
        if (code != 0 && trace_enabled()) {
            std::fprintf(stderr, "[hip-on-cuda] %s -> %s (%d)\n", call, cuda_name, code);
        }
        return code;
    }
    std::fprintf(stderr, "[hip-on-cuda] %s: %s (%d) has no HIP 5.2 code: hipErrorUnknown\n",
                 call, cuda_name, code);
    return SHIM_hipErrorUnknown;
}

shim_hipError_t rt(cudaError_t e, const char* call) {
    return from_cuda_code(static_cast<int>(e), cudaGetErrorName(e), call);
}

shim_hipError_t drv(CUresult e, const char* call) {
    const char* name = nullptr;
    if (cuGetErrorName(e, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_?";
    return from_cuda_code(static_cast<int>(e), name, call);
}

shim_hipError_t unsupported(const char* call, const char* what) {
    std::fprintf(stderr, "[hip-on-cuda] %s: %s is not translated: hipErrorNotSupported\n", call,
                 what);
    return SHIM_hipErrorNotSupported;
}

// The driver-API calls need the runtime's primary context current on the calling thread.
shim_hipError_t ensure_context(const char* call) {
    CUcontext ctx = nullptr;
    CUresult r = cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS) return drv(r, call);
    if (ctx != nullptr) return SHIM_hipSuccess;
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return rt(e, call);
    CUdevice dev;
    r = cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return drv(r, call);
    r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r != CUDA_SUCCESS) return drv(r, call);
    return drv(cuCtxSetCurrent(ctx), call);
}

bool capture_mode_to_cuda(int mode, cudaStreamCaptureMode* out) {
    switch (mode) {
        case SHIM_hipStreamCaptureModeGlobal: *out = cudaStreamCaptureModeGlobal; return true;
        case SHIM_hipStreamCaptureModeThreadLocal: *out = cudaStreamCaptureModeThreadLocal; return true;
        case SHIM_hipStreamCaptureModeRelaxed: *out = cudaStreamCaptureModeRelaxed; return true;
        default: return false;
    }
}

int capture_mode_to_hip(cudaStreamCaptureMode mode) {
    switch (mode) {
        case cudaStreamCaptureModeGlobal: return SHIM_hipStreamCaptureModeGlobal;
        case cudaStreamCaptureModeThreadLocal: return SHIM_hipStreamCaptureModeThreadLocal;
        default: return SHIM_hipStreamCaptureModeRelaxed;
    }
}

cudaStream_t S(shim_hipStream_t s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t E(shim_hipEvent_t e) { return reinterpret_cast<cudaEvent_t>(e); }
cudaGraph_t G(shim_hipGraph_t g) { return reinterpret_cast<cudaGraph_t>(g); }
cudaGraphExec_t X(shim_hipGraphExec_t x) { return reinterpret_cast<cudaGraphExec_t>(x); }

}  // namespace

// ---------------------------------------------------------------- device and errors

HIP_API shim_hipError_t hipInit(unsigned int flags) { return drv(cuInit(flags), "hipInit"); }

HIP_API shim_hipError_t hipGetDeviceCount(int* count) {
    return rt(cudaGetDeviceCount(count), "hipGetDeviceCount");
}

HIP_API shim_hipError_t hipSetDevice(int device) {
    return rt(cudaSetDevice(device), "hipSetDevice");
}

HIP_API shim_hipError_t hipGetDevice(int* device) {
    return rt(cudaGetDevice(device), "hipGetDevice");
}

HIP_API shim_hipError_t hipDeviceGetName(char* name, int len, int device) {
    CUdevice dev;
    CUresult r = cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return drv(r, "hipDeviceGetName");
    char cuda_name[256] = {0};
    r = cuDeviceGetName(cuda_name, sizeof cuda_name - 1, dev);
    if (r != CUDA_SUCCESS) return drv(r, "hipDeviceGetName");
    if (name == nullptr || len <= 0) return SHIM_hipErrorInvalidValue;
    // The name says what runs underneath, so no report mistakes it for an AMD device.
    std::snprintf(name, static_cast<size_t>(len), "%s (CUDA, through HIP-on-CUDA)", cuda_name);
    return SHIM_hipSuccess;
}

namespace {

template <typename T>
void put(void* prop, size_t offset, T value) {
    std::memcpy(static_cast<char*>(prop) + offset, &value, sizeof value);
}

}  // namespace

// Fills the fields hip_abi.h lists (SHIM_hipDeviceProp_*) from CUDA and zeroes every other
// one. gcnArchName, an AMD target name on ROCm (gfx90a:sramecc+:xnack-), is the CUDA
// architecture hiprtcCompileProgram compiles for here (sm_90): it names what compiled code runs
// on, as on ROCm, and can never be taken for an AMD target.
HIP_API shim_hipError_t hipGetDeviceProperties(void* prop, int device) {
    if (prop == nullptr) return SHIM_hipErrorInvalidValue;
    CUdevice dev;
    CUresult r = cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return drv(r, "hipGetDeviceProperties");
    const CUdevice_attribute ints[] = {
        CU_DEVICE_ATTRIBUTE_WARP_SIZE,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
    };
    int v[sizeof ints / sizeof ints[0]];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; ++i) {
        r = cuDeviceGetAttribute(&v[i], ints[i], dev);
        if (r != CUDA_SUCCESS) return drv(r, "hipGetDeviceProperties");
    }
    size_t memory = 0;
    r = cuDeviceTotalMem(&memory, dev);
    if (r != CUDA_SUCCESS) return drv(r, "hipGetDeviceProperties");
    char name[256] = {0};
    shim_hipError_t e = hipDeviceGetName(name, sizeof name, device);
    if (e != SHIM_hipSuccess) return e;
    char arch[256] = {0};
    std::snprintf(arch, sizeof arch, "sm_%d", v[8] * 10 + v[9]);

    std::memset(prop, 0, SHIM_hipDeviceProp_t_size);
    std::memcpy(static_cast<char*>(prop) + SHIM_hipDeviceProp_name, name, sizeof name);
    put(prop, SHIM_hipDeviceProp_totalGlobalMem, memory);
    put(prop, SHIM_hipDeviceProp_sharedMemPerBlock, static_cast<size_t>(v[11]));
    put(prop, SHIM_hipDeviceProp_warpSize, v[0]);
    put(prop, SHIM_hipDeviceProp_maxThreadsPerBlock, v[1]);
    for (int i = 0; i < 3; ++i) {
        put(prop, SHIM_hipDeviceProp_maxThreadsDim + 4 * i, v[2 + i]);
        put(prop, SHIM_hipDeviceProp_maxGridSize + 4 * i, v[5 + i]);
    }
    put(prop, SHIM_hipDeviceProp_major, v[8]);
    put(prop, SHIM_hipDeviceProp_minor, v[9]);
    put(prop, SHIM_hipDeviceProp_multiProcessorCount, v[10]);
    std::memcpy(static_cast<char*>(prop) + SHIM_hipDeviceProp_gcnArchName, arch, sizeof arch);
    return SHIM_hipSuccess;
}

HIP_API shim_hipError_t hipRuntimeGetVersion(int* version) {
    if (version == nullptr) return SHIM_hipErrorInvalidValue;
    // The ABI implemented is HIP 5.2's (enum numbering included), whatever CUDA runs below.
    *version = SHIM_HIP_VERSION;
    return SHIM_hipSuccess;
}

HIP_API const char* hipGetErrorName(shim_hipError_t code) {
    const char* name = hip_name(code);
    return name != nullptr ? name : "hipErrorUnknown";
}

HIP_API const char* hipGetErrorString(shim_hipError_t code) {
    // As HIP's NVIDIA headers do: CUDA's description of the same code.
    if (hip_name(code) == nullptr) return "unknown error";
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}

HIP_API shim_hipError_t hipGetLastError(void) {
    return rt(cudaGetLastError(), "hipGetLastError");
}

HIP_API shim_hipError_t hipDeviceSynchronize(void) {
    return rt(cudaDeviceSynchronize(), "hipDeviceSynchronize");
}

// ---------------------------------------------------------------- streams and events

HIP_API shim_hipError_t hipStreamCreateWithFlags(shim_hipStream_t* stream, unsigned int flags) {
    if (flags & ~SHIM_hipStreamNonBlocking) return unsupported("hipStreamCreateWithFlags", "flag");
    unsigned int cuda_flags =
        (flags & SHIM_hipStreamNonBlocking) ? cudaStreamNonBlocking : cudaStreamDefault;
    return rt(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), cuda_flags),
              "hipStreamCreateWithFlags");
}

HIP_API shim_hipError_t hipStreamDestroy(shim_hipStream_t stream) {
    return rt(cudaStreamDestroy(S(stream)), "hipStreamDestroy");
}

// Stream waits and copies go to the driver API, the entry points the CUDA backend uses: through
// the runtime (cudaMemcpyAsync of pageable memory, then cudaStreamSynchronize), libcuda was seen
// to crash with SIGSEGV inside cuStreamSynchronize while other threads' global-mode captures
// were being invalidated; the driver-API path runs the same workload cleanly.
HIP_API shim_hipError_t hipStreamSynchronize(shim_hipStream_t stream) {
    shim_hipError_t e = ensure_context("hipStreamSynchronize");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuStreamSynchronize(reinterpret_cast<CUstream>(stream)), "hipStreamSynchronize");
}

HIP_API shim_hipError_t hipStreamWaitEvent(shim_hipStream_t stream, shim_hipEvent_t event,
                                           unsigned int flags) {
    if (flags & ~SHIM_hipEventWaitExternal) return unsupported("hipStreamWaitEvent", "flags");
    unsigned int cuda_flags =
        (flags & SHIM_hipEventWaitExternal) ? cudaEventWaitExternal : cudaEventWaitDefault;
    return rt(cudaStreamWaitEvent(S(stream), E(event), cuda_flags), "hipStreamWaitEvent");
}

HIP_API shim_hipError_t hipEventCreateWithFlags(shim_hipEvent_t* event, unsigned int flags) {
    const unsigned int known =
        SHIM_hipEventBlockingSync | SHIM_hipEventDisableTiming | SHIM_hipEventInterprocess;
    if (flags & ~known) return unsupported("hipEventCreateWithFlags", "flag");
    unsigned int cuda_flags = 0;
    if (flags & SHIM_hipEventBlockingSync) cuda_flags |= cudaEventBlockingSync;
    if (flags & SHIM_hipEventDisableTiming) cuda_flags |= cudaEventDisableTiming;
    if (flags & SHIM_hipEventInterprocess) cuda_flags |= cudaEventInterprocess;
    return rt(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(event), cuda_flags),
              "hipEventCreateWithFlags");
}

HIP_API shim_hipError_t hipEventDestroy(shim_hipEvent_t event) {
    return rt(cudaEventDestroy(E(event)), "hipEventDestroy");
}

HIP_API shim_hipError_t hipEventRecord(shim_hipEvent_t event, shim_hipStream_t stream) {
    return rt(cudaEventRecord(E(event), S(stream)), "hipEventRecord");
}

HIP_API shim_hipError_t hipEventSynchronize(shim_hipEvent_t event) {
    return rt(cudaEventSynchronize(E(event)), "hipEventSynchronize");
}

// hipSuccess when complete, hipErrorNotReady (600, CUDA's cudaErrorNotReady too) while pending.
HIP_API shim_hipError_t hipEventQuery(shim_hipEvent_t event) {
    return rt(cudaEventQuery(E(event)), "hipEventQuery");
}

HIP_API shim_hipError_t hipEventElapsedTime(float* ms, shim_hipEvent_t start,
                                            shim_hipEvent_t stop) {
    return rt(cudaEventElapsedTime(ms, E(start), E(stop)), "hipEventElapsedTime");
}

// Not in ROCm 5.2 (later releases export it, same signature); the backend looks it up at run
// time. hipEventRecordExternal makes the record a node of its own in a capture, as
// cudaEventRecordExternal does.
HIP_API shim_hipError_t hipEventRecordWithFlags(shim_hipEvent_t event, shim_hipStream_t stream,
                                                unsigned int flags) {
    if (flags & ~SHIM_hipEventRecordExternal) return unsupported("hipEventRecordWithFlags", "flag");
    unsigned int cuda_flags =
        (flags & SHIM_hipEventRecordExternal) ? cudaEventRecordExternal : cudaEventRecordDefault;
    return rt(cudaEventRecordWithFlags(E(event), S(stream), cuda_flags), "hipEventRecordWithFlags");
}

// ---------------------------------------------------------------- memory

HIP_API shim_hipError_t hipMalloc(void** ptr, size_t size) {
    return rt(cudaMalloc(ptr, size), "hipMalloc");
}

HIP_API shim_hipError_t hipFree(void* ptr) { return rt(cudaFree(ptr), "hipFree"); }

HIP_API shim_hipError_t hipMemGetInfo(size_t* free, size_t* total) {
    return rt(cudaMemGetInfo(free, total), "hipMemGetInfo");
}

// The stream-ordered allocator: on a capturing stream, graph allocation and free nodes.
HIP_API shim_hipError_t hipMallocAsync(void** ptr, size_t size, shim_hipStream_t stream) {
    return rt(cudaMallocAsync(ptr, size, S(stream)), "hipMallocAsync");
}

HIP_API shim_hipError_t hipFreeAsync(void* ptr, shim_hipStream_t stream) {
    return rt(cudaFreeAsync(ptr, S(stream)), "hipFreeAsync");
}

HIP_API shim_hipError_t hipMemcpyAsync(void* dst, const void* src, size_t bytes, int kind,
                                       shim_hipStream_t stream) {
    shim_hipError_t e = ensure_context("hipMemcpyAsync");
    if (e != SHIM_hipSuccess) return e;
    CUstream s = reinterpret_cast<CUstream>(stream);
    CUdeviceptr d = reinterpret_cast<CUdeviceptr>(dst);
    CUdeviceptr from = reinterpret_cast<CUdeviceptr>(src);
    switch (kind) {
        case SHIM_hipMemcpyHostToDevice:
            return drv(cuMemcpyHtoDAsync(d, src, bytes, s), "hipMemcpyAsync");
        case SHIM_hipMemcpyDeviceToHost:
            return drv(cuMemcpyDtoHAsync(dst, from, bytes, s), "hipMemcpyAsync");
        case SHIM_hipMemcpyDeviceToDevice:
            return drv(cuMemcpyDtoDAsync(d, from, bytes, s), "hipMemcpyAsync");
        // Unified addressing tells host from device pointers, as hipMemcpyDefault does.
        case SHIM_hipMemcpyHostToHost:
        case SHIM_hipMemcpyDefault:
            return drv(cuMemcpyAsync(d, from, bytes, s), "hipMemcpyAsync");
        default: return SHIM_hipErrorInvalidValue;
    }
}

HIP_API shim_hipError_t hipMemsetD32Async(void* dst, int value, size_t count,
                                          shim_hipStream_t stream) {
    shim_hipError_t e = ensure_context("hipMemsetD32Async");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dst), static_cast<unsigned int>(value),
                                count, reinterpret_cast<CUstream>(stream)),
               "hipMemsetD32Async");
}

// ---------------------------------------------------------------- stream capture and graphs

HIP_API shim_hipError_t hipStreamBeginCapture(shim_hipStream_t stream, int mode) {
    cudaStreamCaptureMode cuda_mode;
    if (!capture_mode_to_cuda(mode, &cuda_mode)) return SHIM_hipErrorInvalidValue;
    return rt(cudaStreamBeginCapture(S(stream), cuda_mode), "hipStreamBeginCapture");
}

HIP_API shim_hipError_t hipStreamEndCapture(shim_hipStream_t stream, shim_hipGraph_t* graph) {
    return rt(cudaStreamEndCapture(S(stream), reinterpret_cast<cudaGraph_t*>(graph)),
              "hipStreamEndCapture");
}

HIP_API shim_hipError_t hipStreamGetCaptureInfo(shim_hipStream_t stream, int* status,
                                                unsigned long long* id) {
    cudaStreamCaptureStatus cuda_status = cudaStreamCaptureStatusNone;
    unsigned long long cuda_id = 0;
    shim_hipError_t e = rt(cudaStreamGetCaptureInfo(S(stream), &cuda_status, &cuda_id),
                           "hipStreamGetCaptureInfo");
    if (e != SHIM_hipSuccess) return e;
    if (status != nullptr) {
        switch (cuda_status) {
            case cudaStreamCaptureStatusNone: *status = SHIM_hipStreamCaptureStatusNone; break;
            case cudaStreamCaptureStatusActive: *status = SHIM_hipStreamCaptureStatusActive; break;
            default: *status = SHIM_hipStreamCaptureStatusInvalidated; break;
        }
    }
    if (id != nullptr) *id = cuda_id;
    return SHIM_hipSuccess;
}

HIP_API shim_hipError_t hipThreadExchangeStreamCaptureMode(int* mode) {
    if (mode == nullptr) return SHIM_hipErrorInvalidValue;
    cudaStreamCaptureMode cuda_mode;
    if (!capture_mode_to_cuda(*mode, &cuda_mode)) return SHIM_hipErrorInvalidValue;
    shim_hipError_t e =
        rt(cudaThreadExchangeStreamCaptureMode(&cuda_mode), "hipThreadExchangeStreamCaptureMode");
    if (e == SHIM_hipSuccess) *mode = capture_mode_to_hip(cuda_mode);
    return e;
}

HIP_API shim_hipError_t hipGraphDestroy(shim_hipGraph_t graph) {
    return rt(cudaGraphDestroy(G(graph)), "hipGraphDestroy");
}

HIP_API shim_hipError_t hipGraphInstantiateWithFlags(shim_hipGraphExec_t* exec,
                                                     shim_hipGraph_t graph,
                                                     unsigned long long flags) {
    if (flags & ~SHIM_hipGraphInstantiateFlagAutoFreeOnLaunch) {
        return unsupported("hipGraphInstantiateWithFlags", "flag");
    }
    unsigned long long cuda_flags =
        (flags & SHIM_hipGraphInstantiateFlagAutoFreeOnLaunch) ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0;
    return rt(cudaGraphInstantiateWithFlags(reinterpret_cast<cudaGraphExec_t*>(exec), G(graph),
                                            cuda_flags),
              "hipGraphInstantiateWithFlags");
}

HIP_API shim_hipError_t hipGraphExecDestroy(shim_hipGraphExec_t exec) {
    return rt(cudaGraphExecDestroy(X(exec)), "hipGraphExecDestroy");
}

HIP_API shim_hipError_t hipGraphLaunch(shim_hipGraphExec_t exec, shim_hipStream_t stream) {
    return rt(cudaGraphLaunch(X(exec), S(stream)), "hipGraphLaunch");
}

// Not in ROCm 5.2 (added in later 5.x releases, same signature); the backend looks it up at run
// time and uses it where present.
HIP_API shim_hipError_t hipGraphUpload(shim_hipGraphExec_t exec, shim_hipStream_t stream) {
    return rt(cudaGraphUpload(X(exec), S(stream)), "hipGraphUpload");
}

// As hipGraphUpload: a later 5.x entry point. Flag bit 0 (verbose) means the same in HIP and
// CUDA; other bits are not translated.
HIP_API shim_hipError_t hipGraphDebugDotPrint(shim_hipGraph_t graph, const char* path,
                                              unsigned int flags) {
    if (flags & ~1u) return unsupported("hipGraphDebugDotPrint", "flag");
    return rt(cudaGraphDebugDotPrint(G(graph), path, flags ? static_cast<unsigned int>(cudaGraphDebugDotFlagsVerbose) : 0u),
              "hipGraphDebugDotPrint");
}

HIP_API shim_hipError_t hipGraphGetNodes(shim_hipGraph_t graph, shim_hipGraphNode_t* nodes,
                                         size_t* count) {
    return rt(cudaGraphGetNodes(G(graph), reinterpret_cast<cudaGraphNode_t*>(nodes), count),
              "hipGraphGetNodes");
}

HIP_API shim_hipError_t hipGraphGetEdges(shim_hipGraph_t graph, shim_hipGraphNode_t* from,
                                         shim_hipGraphNode_t* to, size_t* count) {
#if CUDART_VERSION >= 13000
    return rt(cudaGraphGetEdges(G(graph), reinterpret_cast<cudaGraphNode_t*>(from),
                                reinterpret_cast<cudaGraphNode_t*>(to), nullptr, count),
              "hipGraphGetEdges");
#else
    return rt(cudaGraphGetEdges(G(graph), reinterpret_cast<cudaGraphNode_t*>(from),
                                reinterpret_cast<cudaGraphNode_t*>(to), count),
              "hipGraphGetEdges");
#endif
}

HIP_API shim_hipError_t hipGraphNodeGetType(shim_hipGraphNode_t node, int* type) {
    cudaGraphNodeType t;
    shim_hipError_t e =
        rt(cudaGraphNodeGetType(reinterpret_cast<cudaGraphNode_t>(node), &t), "hipGraphNodeGetType");
    if (e != SHIM_hipSuccess) return e;
    switch (t) {
        case cudaGraphNodeTypeKernel: *type = SHIM_hipGraphNodeTypeKernel; break;
        case cudaGraphNodeTypeMemcpy: *type = SHIM_hipGraphNodeTypeMemcpy; break;
        case cudaGraphNodeTypeMemset: *type = SHIM_hipGraphNodeTypeMemset; break;
        case cudaGraphNodeTypeHost: *type = SHIM_hipGraphNodeTypeHost; break;
        case cudaGraphNodeTypeGraph: *type = SHIM_hipGraphNodeTypeGraph; break;
        case cudaGraphNodeTypeEmpty: *type = SHIM_hipGraphNodeTypeEmpty; break;
        case cudaGraphNodeTypeWaitEvent: *type = SHIM_hipGraphNodeTypeWaitEvent; break;
        case cudaGraphNodeTypeEventRecord: *type = SHIM_hipGraphNodeTypeEventRecord; break;
        // Memory, semaphore and conditional nodes have no HIP 5.2 type.
        default: return unsupported("hipGraphNodeGetType", "this CUDA node type");
    }
    return SHIM_hipSuccess;
}

// ---------------------------------------------------------------- graph editing

namespace {

cudaGraphNode_t N(shim_hipGraphNode_t n) { return reinterpret_cast<cudaGraphNode_t>(n); }

bool memcpy_kind_to_cuda(int kind, cudaMemcpyKind* out) {
    switch (kind) {
        case SHIM_hipMemcpyHostToHost: *out = cudaMemcpyHostToHost; return true;
        case SHIM_hipMemcpyHostToDevice: *out = cudaMemcpyHostToDevice; return true;
        case SHIM_hipMemcpyDeviceToHost: *out = cudaMemcpyDeviceToHost; return true;
        case SHIM_hipMemcpyDeviceToDevice: *out = cudaMemcpyDeviceToDevice; return true;
        case SHIM_hipMemcpyDefault: *out = cudaMemcpyDefault; return true;
        default: return false;
    }
}

// Kernel nodes go through the driver API: the backend launches module functions
// (hipModuleLaunchKernel -> cuLaunchKernel), so a node's function is a CUfunction, which HIP's
// `func` carries unchanged.
CUDA_KERNEL_NODE_PARAMS kernel_to_cuda(const shim_hipKernelNodeParams* p) {
    CUDA_KERNEL_NODE_PARAMS c;
    std::memset(&c, 0, sizeof c);
    c.func = reinterpret_cast<CUfunction>(p->func);
    c.gridDimX = p->gridDim.x;
    c.gridDimY = p->gridDim.y;
    c.gridDimZ = p->gridDim.z;
    c.blockDimX = p->blockDim.x;
    c.blockDimY = p->blockDim.y;
    c.blockDimZ = p->blockDim.z;
    c.sharedMemBytes = p->sharedMemBytes;
    c.kernelParams = p->kernelParams;
    c.extra = nullptr;
    return c;
}

cudaMemsetParams memset_to_cuda(const shim_hipMemsetParams* p) {
    cudaMemsetParams c;
    std::memset(&c, 0, sizeof c);
    c.dst = p->dst;
    c.pitch = p->pitch;
    c.value = p->value;
    c.elementSize = p->elementSize;
    c.width = p->width;
    c.height = p->height;
    return c;
}

}  // namespace

HIP_API shim_hipError_t hipStreamGetCaptureInfo_v2(shim_hipStream_t stream, int* status,
                                                   unsigned long long* id, shim_hipGraph_t* graph,
                                                   const shim_hipGraphNode_t** dependencies,
                                                   size_t* count) {
    shim_hipError_t e = ensure_context("hipStreamGetCaptureInfo_v2");
    if (e != SHIM_hipSuccess) return e;
    CUstreamCaptureStatus cuda_status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cuda_id = 0;
    CUgraph cuda_graph = nullptr;
    const CUgraphNode* deps = nullptr;
    size_t n = 0;
    // From 12.3 the unversioned name is the call with edge data (none here: a dependency with
    // data would make the query lossy, which the driver reports).
#if CUDA_VERSION >= 12030
    CUresult r = cuStreamGetCaptureInfo(reinterpret_cast<CUstream>(stream), &cuda_status, &cuda_id,
                                        &cuda_graph, &deps, nullptr, &n);
#else
    CUresult r = cuStreamGetCaptureInfo_v2(reinterpret_cast<CUstream>(stream), &cuda_status,
                                           &cuda_id, &cuda_graph, &deps, &n);
#endif
    e = drv(r, "hipStreamGetCaptureInfo_v2");
    if (e != SHIM_hipSuccess) return e;
    if (status != nullptr) {
        switch (cuda_status) {
            case CU_STREAM_CAPTURE_STATUS_NONE: *status = SHIM_hipStreamCaptureStatusNone; break;
            case CU_STREAM_CAPTURE_STATUS_ACTIVE: *status = SHIM_hipStreamCaptureStatusActive; break;
            default: *status = SHIM_hipStreamCaptureStatusInvalidated; break;
        }
    }
    if (id != nullptr) *id = cuda_id;
    if (graph != nullptr) *graph = reinterpret_cast<shim_hipGraph_t>(cuda_graph);
    if (dependencies != nullptr) *dependencies = reinterpret_cast<const shim_hipGraphNode_t*>(deps);
    if (count != nullptr) *count = n;
    return SHIM_hipSuccess;
}

HIP_API shim_hipError_t hipStreamUpdateCaptureDependencies(shim_hipStream_t stream,
                                                           shim_hipGraphNode_t* dependencies,
                                                           size_t count, unsigned int flags) {
    unsigned int cuda_flags;
    switch (flags) {
        case SHIM_hipStreamAddCaptureDependencies: cuda_flags = CU_STREAM_ADD_CAPTURE_DEPENDENCIES; break;
        case SHIM_hipStreamSetCaptureDependencies: cuda_flags = CU_STREAM_SET_CAPTURE_DEPENDENCIES; break;
        default: return unsupported("hipStreamUpdateCaptureDependencies", "flag");
    }
    shim_hipError_t e = ensure_context("hipStreamUpdateCaptureDependencies");
    if (e != SHIM_hipSuccess) return e;
#if CUDA_VERSION >= 12030
    CUresult r = cuStreamUpdateCaptureDependencies(reinterpret_cast<CUstream>(stream),
                                                   reinterpret_cast<CUgraphNode*>(dependencies),
                                                   nullptr, count, cuda_flags);
#else
    CUresult r = cuStreamUpdateCaptureDependencies(reinterpret_cast<CUstream>(stream),
                                                   reinterpret_cast<CUgraphNode*>(dependencies),
                                                   count, cuda_flags);
#endif
    return drv(r, "hipStreamUpdateCaptureDependencies");
}

HIP_API shim_hipError_t hipGraphAddChildGraphNode(shim_hipGraphNode_t* node, shim_hipGraph_t graph,
                                                  const shim_hipGraphNode_t* dependencies,
                                                  size_t count, shim_hipGraph_t child) {
    return rt(cudaGraphAddChildGraphNode(reinterpret_cast<cudaGraphNode_t*>(node), G(graph),
                                         reinterpret_cast<const cudaGraphNode_t*>(dependencies),
                                         count, G(child)),
              "hipGraphAddChildGraphNode");
}

HIP_API shim_hipError_t hipGraphClone(shim_hipGraph_t* clone, shim_hipGraph_t graph) {
    return rt(cudaGraphClone(reinterpret_cast<cudaGraph_t*>(clone), G(graph)), "hipGraphClone");
}

HIP_API shim_hipError_t hipGraphNodeFindInClone(shim_hipGraphNode_t* node,
                                                shim_hipGraphNode_t original,
                                                shim_hipGraph_t clone) {
    return rt(cudaGraphNodeFindInClone(reinterpret_cast<cudaGraphNode_t*>(node), N(original),
                                       G(clone)),
              "hipGraphNodeFindInClone");
}

HIP_API shim_hipError_t hipGraphExecUpdate(shim_hipGraphExec_t exec, shim_hipGraph_t graph,
                                           shim_hipGraphNode_t* error_node, int* result) {
    cudaGraphExecUpdateResultInfo info;
    std::memset(&info, 0, sizeof info);
    shim_hipError_t e = rt(cudaGraphExecUpdate(X(exec), G(graph), &info), "hipGraphExecUpdate");
    if (error_node != nullptr) *error_node = reinterpret_cast<shim_hipGraphNode_t>(info.errorNode);
    if (result != nullptr) {
        switch (info.result) {
            case cudaGraphExecUpdateSuccess: *result = SHIM_hipGraphExecUpdateSuccess; break;
            case cudaGraphExecUpdateErrorTopologyChanged:
                *result = SHIM_hipGraphExecUpdateErrorTopologyChanged; break;
            case cudaGraphExecUpdateErrorNodeTypeChanged:
                *result = SHIM_hipGraphExecUpdateErrorNodeTypeChanged; break;
            case cudaGraphExecUpdateErrorFunctionChanged:
                *result = SHIM_hipGraphExecUpdateErrorFunctionChanged; break;
            case cudaGraphExecUpdateErrorParametersChanged:
                *result = SHIM_hipGraphExecUpdateErrorParametersChanged; break;
            case cudaGraphExecUpdateErrorNotSupported:
                *result = SHIM_hipGraphExecUpdateErrorNotSupported; break;
            case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
                *result = SHIM_hipGraphExecUpdateErrorUnsupportedFunctionChange; break;
            // Attribute changes (and anything newer) have no HIP 5.2 value.
            default: *result = SHIM_hipGraphExecUpdateError; break;
        }
    }
    return e;
}

HIP_API shim_hipError_t hipGraphKernelNodeGetParams(shim_hipGraphNode_t node,
                                                    shim_hipKernelNodeParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    shim_hipError_t e = ensure_context("hipGraphKernelNodeGetParams");
    if (e != SHIM_hipSuccess) return e;
    CUDA_KERNEL_NODE_PARAMS c;
    std::memset(&c, 0, sizeof c);
    e = drv(cuGraphKernelNodeGetParams(reinterpret_cast<CUgraphNode>(node), &c),
            "hipGraphKernelNodeGetParams");
    if (e != SHIM_hipSuccess) return e;
    if (c.func == nullptr) return unsupported("hipGraphKernelNodeGetParams", "a library kernel node");
    params->func = reinterpret_cast<void*>(c.func);
    params->gridDim = shim_dim3{c.gridDimX, c.gridDimY, c.gridDimZ};
    params->blockDim = shim_dim3{c.blockDimX, c.blockDimY, c.blockDimZ};
    params->sharedMemBytes = c.sharedMemBytes;
    params->kernelParams = c.kernelParams;
    params->extra = c.extra;
    return SHIM_hipSuccess;
}

HIP_API shim_hipError_t hipGraphKernelNodeSetParams(shim_hipGraphNode_t node,
                                                    const shim_hipKernelNodeParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    if (params->extra != nullptr) return unsupported("hipGraphKernelNodeSetParams", "`extra`");
    shim_hipError_t e = ensure_context("hipGraphKernelNodeSetParams");
    if (e != SHIM_hipSuccess) return e;
    CUDA_KERNEL_NODE_PARAMS c = kernel_to_cuda(params);
    return drv(cuGraphKernelNodeSetParams(reinterpret_cast<CUgraphNode>(node), &c),
               "hipGraphKernelNodeSetParams");
}

HIP_API shim_hipError_t hipGraphExecKernelNodeSetParams(shim_hipGraphExec_t exec,
                                                        shim_hipGraphNode_t node,
                                                        const shim_hipKernelNodeParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    if (params->extra != nullptr) return unsupported("hipGraphExecKernelNodeSetParams", "`extra`");
    shim_hipError_t e = ensure_context("hipGraphExecKernelNodeSetParams");
    if (e != SHIM_hipSuccess) return e;
    CUDA_KERNEL_NODE_PARAMS c = kernel_to_cuda(params);
    return drv(cuGraphExecKernelNodeSetParams(reinterpret_cast<CUgraphExec>(exec),
                                              reinterpret_cast<CUgraphNode>(node), &c),
               "hipGraphExecKernelNodeSetParams");
}

HIP_API shim_hipError_t hipGraphMemsetNodeGetParams(shim_hipGraphNode_t node,
                                                    shim_hipMemsetParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    cudaMemsetParams c;
    std::memset(&c, 0, sizeof c);
    shim_hipError_t e = rt(cudaGraphMemsetNodeGetParams(N(node), &c), "hipGraphMemsetNodeGetParams");
    if (e != SHIM_hipSuccess) return e;
    params->dst = c.dst;
    params->pitch = c.pitch;
    params->value = c.value;
    params->elementSize = c.elementSize;
    params->width = c.width;
    params->height = c.height;
    return SHIM_hipSuccess;
}

HIP_API shim_hipError_t hipGraphMemsetNodeSetParams(shim_hipGraphNode_t node,
                                                    const shim_hipMemsetParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    cudaMemsetParams c = memset_to_cuda(params);
    return rt(cudaGraphMemsetNodeSetParams(N(node), &c), "hipGraphMemsetNodeSetParams");
}

HIP_API shim_hipError_t hipGraphExecMemsetNodeSetParams(shim_hipGraphExec_t exec,
                                                        shim_hipGraphNode_t node,
                                                        const shim_hipMemsetParams* params) {
    if (params == nullptr) return SHIM_hipErrorInvalidValue;
    cudaMemsetParams c = memset_to_cuda(params);
    return rt(cudaGraphExecMemsetNodeSetParams(X(exec), N(node), &c),
              "hipGraphExecMemsetNodeSetParams");
}

HIP_API shim_hipError_t hipGraphMemcpyNodeSetParams1D(shim_hipGraphNode_t node, void* dst,
                                                      const void* src, size_t count, int kind) {
    cudaMemcpyKind cuda_kind;
    if (!memcpy_kind_to_cuda(kind, &cuda_kind)) return SHIM_hipErrorInvalidValue;
    return rt(cudaGraphMemcpyNodeSetParams1D(N(node), dst, src, count, cuda_kind),
              "hipGraphMemcpyNodeSetParams1D");
}

HIP_API shim_hipError_t hipGraphExecMemcpyNodeSetParams1D(shim_hipGraphExec_t exec,
                                                          shim_hipGraphNode_t node, void* dst,
                                                          const void* src, size_t count, int kind) {
    cudaMemcpyKind cuda_kind;
    if (!memcpy_kind_to_cuda(kind, &cuda_kind)) return SHIM_hipErrorInvalidValue;
    return rt(cudaGraphExecMemcpyNodeSetParams1D(X(exec), N(node), dst, src, count, cuda_kind),
              "hipGraphExecMemcpyNodeSetParams1D");
}

HIP_API shim_hipError_t hipLaunchHostFunc(shim_hipStream_t stream, shim_hipHostFn_t fn,
                                          void* user_data) {
    return rt(cudaLaunchHostFunc(S(stream), fn, user_data), "hipLaunchHostFunc");
}

// ---------------------------------------------------------------- modules and kernels

HIP_API shim_hipError_t hipModuleLoadData(shim_hipModule_t* module, const void* image) {
    shim_hipError_t e = ensure_context("hipModuleLoadData");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuModuleLoadData(reinterpret_cast<CUmodule*>(module), image), "hipModuleLoadData");
}

HIP_API shim_hipError_t hipModuleGetFunction(shim_hipFunction_t* function, shim_hipModule_t module,
                                             const char* name) {
    shim_hipError_t e = ensure_context("hipModuleGetFunction");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuModuleGetFunction(reinterpret_cast<CUfunction*>(function),
                                   reinterpret_cast<CUmodule>(module), name),
               "hipModuleGetFunction");
}

HIP_API shim_hipError_t hipModuleUnload(shim_hipModule_t module) {
    // cuModuleUnload unloads from the current context: a thread that never made a HIP call
    // has none yet.
    shim_hipError_t e = ensure_context("hipModuleUnload");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuModuleUnload(reinterpret_cast<CUmodule>(module)), "hipModuleUnload");
}

HIP_API shim_hipError_t hipModuleLaunchKernel(shim_hipFunction_t f, unsigned int gx,
                                              unsigned int gy, unsigned int gz, unsigned int bx,
                                              unsigned int by, unsigned int bz,
                                              unsigned int shared_bytes, shim_hipStream_t stream,
                                              void** params, void** extra) {
    // HIP_LAUNCH_PARAM_* and CU_LAUNCH_PARAM_* differ in value; `extra` is not translated.
    if (extra != nullptr) return unsupported("hipModuleLaunchKernel", "`extra`");
    shim_hipError_t e = ensure_context("hipModuleLaunchKernel");
    if (e != SHIM_hipSuccess) return e;
    return drv(cuLaunchKernel(reinterpret_cast<CUfunction>(f), gx, gy, gz, bx, by, bz, shared_bytes,
                              reinterpret_cast<CUstream>(stream), params, nullptr),
               "hipModuleLaunchKernel");
}

// ---------------------------------------------------------------- hiprtc over NVRTC

namespace {

// HIP's device-side names for kernel sources written with them; CUDA's own names work as is.
const char kPrelude[] =
    "#define hipThreadIdx_x threadIdx.x\n#define hipThreadIdx_y threadIdx.y\n"
    "#define hipThreadIdx_z threadIdx.z\n#define hipBlockIdx_x blockIdx.x\n"
    "#define hipBlockIdx_y blockIdx.y\n#define hipBlockIdx_z blockIdx.z\n"
    "#define hipBlockDim_x blockDim.x\n#define hipBlockDim_y blockDim.y\n"
    "#define hipBlockDim_z blockDim.z\n#define hipGridDim_x gridDim.x\n"
    "#define hipGridDim_y gridDim.y\n#define hipGridDim_z gridDim.z\n"
    "#define __HIP_PLATFORM_NVIDIA__ 1\n#line 1\n";

const char* const kRtcNames[] = {
    "HIPRTC_SUCCESS",
    "HIPRTC_ERROR_OUT_OF_MEMORY",
    "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
    "HIPRTC_ERROR_INVALID_INPUT",
    "HIPRTC_ERROR_INVALID_PROGRAM",
    "HIPRTC_ERROR_INVALID_OPTION",
    "HIPRTC_ERROR_COMPILATION",
    "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
    "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
    "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
    "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
    "HIPRTC_ERROR_INTERNAL_ERROR",
};

// nvrtcResult 0..11 are numbered as hiprtcResult; newer NVRTC codes have no HIP 5.2 value.
shim_hiprtcResult rtc(nvrtcResult r, const char* call) {
    int code = static_cast<int>(r);
    if (code >= 0 && code <= SHIM_HIPRTC_ERROR_INTERNAL_ERROR) return code;
    std::fprintf(stderr, "[hip-on-cuda] %s: %s has no hiprtc code: HIPRTC_ERROR_INTERNAL_ERROR\n",
                 call, nvrtcGetErrorString(r));
    return SHIM_HIPRTC_ERROR_INTERNAL_ERROR;
}

nvrtcProgram P(shim_hiprtcProgram p) { return reinterpret_cast<nvrtcProgram>(p); }

}  // namespace

HIP_API const char* hiprtcGetErrorString(shim_hiprtcResult result) {
    if (result >= 0 && result <= SHIM_HIPRTC_ERROR_INTERNAL_ERROR) return kRtcNames[result];
    return "HIPRTC_ERROR_INVALID_INPUT";
}

HIP_API shim_hiprtcResult hiprtcCreateProgram(shim_hiprtcProgram* prog, const char* src,
                                              const char* name, int num_headers,
                                              const char** headers, const char** include_names) {
    if (prog == nullptr || src == nullptr) return SHIM_HIPRTC_ERROR_INVALID_INPUT;
    std::string full = std::string(kPrelude) + src;
    return rtc(nvrtcCreateProgram(reinterpret_cast<nvrtcProgram*>(prog), full.c_str(), name,
                                  num_headers, headers, include_names),
               "hiprtcCreateProgram");
}

HIP_API shim_hiprtcResult hiprtcCompileProgram(shim_hiprtcProgram prog, int num_options,
                                               const char** options) {
    // hiprtc targets the current device by default; NVRTC needs the architecture spelled out.
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        return SHIM_HIPRTC_ERROR_INTERNAL_ERROR;
    }
    std::string arch = "--gpu-architecture=sm_" + std::to_string(major * 10 + minor);
    std::vector<const char*> opts(options, options + (num_options > 0 ? num_options : 0));
    opts.push_back(arch.c_str());
    return rtc(nvrtcCompileProgram(P(prog), static_cast<int>(opts.size()), opts.data()),
               "hiprtcCompileProgram");
}

HIP_API shim_hiprtcResult hiprtcGetProgramLogSize(shim_hiprtcProgram prog, size_t* size) {
    return rtc(nvrtcGetProgramLogSize(P(prog), size), "hiprtcGetProgramLogSize");
}

HIP_API shim_hiprtcResult hiprtcGetProgramLog(shim_hiprtcProgram prog, char* log) {
    return rtc(nvrtcGetProgramLog(P(prog), log), "hiprtcGetProgramLog");
}

// The code object is a cubin for the current device's sm_XY (--gpu-architecture names a real
// architecture above, so NVRTC produces one), which the forwarded hipModuleLoadData
// (cuModuleLoadData) loads — and which the backend's kernel cache stores and loads back.
HIP_API shim_hiprtcResult hiprtcGetCodeSize(shim_hiprtcProgram prog, size_t* size) {
    return rtc(nvrtcGetCUBINSize(P(prog), size), "hiprtcGetCodeSize");
}

HIP_API shim_hiprtcResult hiprtcGetCode(shim_hiprtcProgram prog, char* code) {
    return rtc(nvrtcGetCUBIN(P(prog), code), "hiprtcGetCode");
}

// NVRTC's version: the compiler that produced the code (part of the backend's kernel-cache key).
HIP_API shim_hiprtcResult hiprtcVersion(int* major, int* minor) {
    return rtc(nvrtcVersion(major, minor), "hiprtcVersion");
}

HIP_API shim_hiprtcResult hiprtcDestroyProgram(shim_hiprtcProgram* prog) {
    return rtc(nvrtcDestroyProgram(reinterpret_cast<nvrtcProgram*>(prog)), "hiprtcDestroyProgram");
}
