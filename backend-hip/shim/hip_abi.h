/*
 * The part of the HIP 5.2 ABI (as in ROCm 5.2's hip_runtime_api.h and hiprtc.h) that the
 * HIP-on-CUDA shim implements: enum values, flags and handle types, written out so the shim
 * builds on a machine with only the CUDA toolkit. `abi_check.cpp` compares every value here
 * with the real HIP headers where those are installed.
 */
#ifndef ACCEL_GRAPH_HIP_ABI_H
#define ACCEL_GRAPH_HIP_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Handles: opaque pointers in HIP; the shim stores the CUDA handle in them unchanged. */
typedef struct shim_stream* shim_hipStream_t;
typedef struct shim_event* shim_hipEvent_t;
typedef struct shim_graph* shim_hipGraph_t;
typedef struct shim_graph_node* shim_hipGraphNode_t;
typedef struct shim_graph_exec* shim_hipGraphExec_t;
typedef struct shim_module* shim_hipModule_t;
typedef struct shim_function* shim_hipFunction_t;
typedef struct shim_rtc_program* shim_hiprtcProgram;
typedef void (*shim_hipHostFn_t)(void* user_data);

/* hipError_t: an int-sized enum. HIP numbers its codes as CUDA does wherever both exist. */
typedef int shim_hipError_t;
enum {
    SHIM_hipSuccess = 0,
    SHIM_hipErrorInvalidValue = 1,
    SHIM_hipErrorOutOfMemory = 2,
    SHIM_hipErrorNotInitialized = 3,
    SHIM_hipErrorInvalidDevice = 101,
    SHIM_hipErrorInvalidHandle = 400,
    SHIM_hipErrorNotReady = 600,
    SHIM_hipErrorNotSupported = 801,
    SHIM_hipErrorStreamCaptureUnsupported = 900,
    SHIM_hipErrorStreamCaptureInvalidated = 901,
    SHIM_hipErrorStreamCaptureUnjoined = 904,
    SHIM_hipErrorStreamCaptureImplicit = 906,
    SHIM_hipErrorStreamCaptureWrongThread = 908,
    SHIM_hipErrorUnknown = 999
};

/* hipStreamCaptureMode / hipStreamCaptureStatus. */
enum {
    SHIM_hipStreamCaptureModeGlobal = 0,
    SHIM_hipStreamCaptureModeThreadLocal = 1,
    SHIM_hipStreamCaptureModeRelaxed = 2
};
enum {
    SHIM_hipStreamCaptureStatusNone = 0,
    SHIM_hipStreamCaptureStatusActive = 1,
    SHIM_hipStreamCaptureStatusInvalidated = 2
};

/* hipGraphNodeType in ROCm 5.2: numbered from 1 (CUDA numbers from 0). */
enum {
    SHIM_hipGraphNodeTypeKernel = 1,
    SHIM_hipGraphNodeTypeMemcpy = 2,
    SHIM_hipGraphNodeTypeMemset = 3,
    SHIM_hipGraphNodeTypeHost = 4,
    SHIM_hipGraphNodeTypeGraph = 5,
    SHIM_hipGraphNodeTypeEmpty = 6,
    SHIM_hipGraphNodeTypeWaitEvent = 7,
    SHIM_hipGraphNodeTypeEventRecord = 8
};

/* hipMemcpyKind. */
enum {
    SHIM_hipMemcpyHostToHost = 0,
    SHIM_hipMemcpyHostToDevice = 1,
    SHIM_hipMemcpyDeviceToHost = 2,
    SHIM_hipMemcpyDeviceToDevice = 3,
    SHIM_hipMemcpyDefault = 4
};

/* Stream, event and instantiation flags. */
#define SHIM_hipStreamDefault 0x0u
#define SHIM_hipStreamNonBlocking 0x1u
#define SHIM_hipEventDefault 0x0u
#define SHIM_hipEventBlockingSync 0x1u
#define SHIM_hipEventDisableTiming 0x2u
#define SHIM_hipEventInterprocess 0x4u
#define SHIM_hipGraphInstantiateFlagAutoFreeOnLaunch 1ull

/* hipEventRecordWithFlags' flags: not in ROCm 5.2 (neither is the function); the values of the
 * later releases that export it. abi_check.cpp checks them only against headers that have
 * them. */
#define SHIM_hipEventRecordDefault 0x0u
#define SHIM_hipEventRecordExternal 0x1u
#define SHIM_hipEventWaitExternal 0x1u

/* Graph editing (ROCm 5.2's hip_runtime_api.h): hipErrorGraphExecUpdateFailure, the results
 * of hipGraphExecUpdate (numbered as CUDA's), the flags of hipStreamUpdateCaptureDependencies,
 * and the layouts of the node parameter structs. */
#define SHIM_hipErrorGraphExecUpdateFailure 910
enum {
    SHIM_hipGraphExecUpdateSuccess = 0,
    SHIM_hipGraphExecUpdateError = 1,
    SHIM_hipGraphExecUpdateErrorTopologyChanged = 2,
    SHIM_hipGraphExecUpdateErrorNodeTypeChanged = 3,
    SHIM_hipGraphExecUpdateErrorFunctionChanged = 4,
    SHIM_hipGraphExecUpdateErrorParametersChanged = 5,
    SHIM_hipGraphExecUpdateErrorNotSupported = 6,
    SHIM_hipGraphExecUpdateErrorUnsupportedFunctionChange = 7
};
enum {
    SHIM_hipStreamAddCaptureDependencies = 0,
    SHIM_hipStreamSetCaptureDependencies = 1
};
typedef struct shim_dim3 {
    unsigned int x, y, z;
} shim_dim3;
typedef struct shim_hipKernelNodeParams {
    shim_dim3 blockDim;
    void** extra;
    void* func;
    shim_dim3 gridDim;
    void** kernelParams;
    unsigned int sharedMemBytes;
} shim_hipKernelNodeParams;
typedef struct shim_hipMemsetParams {
    void* dst;
    unsigned int elementSize;
    size_t height;
    size_t pitch;
    unsigned int value;
    size_t width;
} shim_hipMemsetParams;
/* hipDeviceProp_t of ROCm 5.2 (hipGetDeviceProperties): its size, and the offset of each field
 * the shim fills. The shim fills these from CUDA and zeroes the rest of the struct. */
#define SHIM_hipDeviceProp_t_size 792
#define SHIM_hipDeviceProp_name 0                  /* char[256] */
#define SHIM_hipDeviceProp_totalGlobalMem 256      /* size_t */
#define SHIM_hipDeviceProp_sharedMemPerBlock 264   /* size_t */
#define SHIM_hipDeviceProp_warpSize 276            /* int */
#define SHIM_hipDeviceProp_maxThreadsPerBlock 280  /* int */
#define SHIM_hipDeviceProp_maxThreadsDim 284       /* int[3] */
#define SHIM_hipDeviceProp_maxGridSize 296         /* int[3] */
#define SHIM_hipDeviceProp_major 328               /* int */
#define SHIM_hipDeviceProp_minor 332               /* int */
#define SHIM_hipDeviceProp_multiProcessorCount 336 /* int */
#define SHIM_hipDeviceProp_gcnArchName 396         /* char[256] */

/* hiprtcResult: numbered as nvrtcResult for the codes both have. */
typedef int shim_hiprtcResult;
#define SHIM_HIPRTC_SUCCESS 0
#define SHIM_HIPRTC_ERROR_INVALID_INPUT 3
#define SHIM_HIPRTC_ERROR_INTERNAL_ERROR 11

/* The HIP runtime version the ABI above belongs to (HIP_VERSION of ROCm 5.2.3). */
#define SHIM_HIP_VERSION 50221153

#ifdef __cplusplus
}
#endif

#endif
