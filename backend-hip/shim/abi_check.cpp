// Compile-time check that hip_abi.h matches the real HIP headers (build where HIP's headers are
// installed, e.g. Debian's libamdhip64-dev):
//   g++ -std=c++17 -fsyntax-only -D__HIP_PLATFORM_AMD__ -I/usr/include abi_check.cpp
#include <cstddef>

#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>

#include <cstddef>

#include "hip_abi.h"

#define SAME(shim, hip) static_assert((long long)(shim) == (long long)(hip), #hip)

SAME(SHIM_hipSuccess, hipSuccess);
SAME(SHIM_hipErrorInvalidValue, hipErrorInvalidValue);
SAME(SHIM_hipErrorOutOfMemory, hipErrorOutOfMemory);
SAME(SHIM_hipErrorNotInitialized, hipErrorNotInitialized);
SAME(SHIM_hipErrorInvalidDevice, hipErrorInvalidDevice);
SAME(SHIM_hipErrorInvalidHandle, hipErrorInvalidHandle);
SAME(SHIM_hipErrorNotReady, hipErrorNotReady);
SAME(SHIM_hipErrorNotSupported, hipErrorNotSupported);
SAME(SHIM_hipErrorStreamCaptureUnsupported, hipErrorStreamCaptureUnsupported);
SAME(SHIM_hipErrorStreamCaptureInvalidated, hipErrorStreamCaptureInvalidated);
SAME(SHIM_hipErrorStreamCaptureUnjoined, hipErrorStreamCaptureUnjoined);
SAME(SHIM_hipErrorStreamCaptureImplicit, hipErrorStreamCaptureImplicit);
SAME(SHIM_hipErrorStreamCaptureWrongThread, hipErrorStreamCaptureWrongThread);
SAME(SHIM_hipErrorUnknown, hipErrorUnknown);
SAME(SHIM_hipStreamCaptureModeGlobal, hipStreamCaptureModeGlobal);
SAME(SHIM_hipStreamCaptureModeThreadLocal, hipStreamCaptureModeThreadLocal);
SAME(SHIM_hipStreamCaptureModeRelaxed, hipStreamCaptureModeRelaxed);
SAME(SHIM_hipStreamCaptureStatusNone, hipStreamCaptureStatusNone);
SAME(SHIM_hipStreamCaptureStatusActive, hipStreamCaptureStatusActive);
SAME(SHIM_hipStreamCaptureStatusInvalidated, hipStreamCaptureStatusInvalidated);
SAME(SHIM_hipGraphNodeTypeKernel, hipGraphNodeTypeKernel);
SAME(SHIM_hipGraphNodeTypeMemcpy, hipGraphNodeTypeMemcpy);
SAME(SHIM_hipGraphNodeTypeMemset, hipGraphNodeTypeMemset);
SAME(SHIM_hipGraphNodeTypeHost, hipGraphNodeTypeHost);
SAME(SHIM_hipGraphNodeTypeGraph, hipGraphNodeTypeGraph);
SAME(SHIM_hipGraphNodeTypeEmpty, hipGraphNodeTypeEmpty);
SAME(SHIM_hipGraphNodeTypeWaitEvent, hipGraphNodeTypeWaitEvent);
SAME(SHIM_hipGraphNodeTypeEventRecord, hipGraphNodeTypeEventRecord);
SAME(SHIM_hipMemcpyHostToHost, hipMemcpyHostToHost);
SAME(SHIM_hipMemcpyHostToDevice, hipMemcpyHostToDevice);
SAME(SHIM_hipMemcpyDeviceToHost, hipMemcpyDeviceToHost);
SAME(SHIM_hipMemcpyDeviceToDevice, hipMemcpyDeviceToDevice);
SAME(SHIM_hipMemcpyDefault, hipMemcpyDefault);
SAME(SHIM_hipStreamDefault, hipStreamDefault);
SAME(SHIM_hipStreamNonBlocking, hipStreamNonBlocking);
SAME(SHIM_hipEventDefault, hipEventDefault);
SAME(SHIM_hipEventBlockingSync, hipEventBlockingSync);
SAME(SHIM_hipEventDisableTiming, hipEventDisableTiming);
SAME(SHIM_hipEventInterprocess, hipEventInterprocess);
SAME(SHIM_hipGraphInstantiateFlagAutoFreeOnLaunch, hipGraphInstantiateFlagAutoFreeOnLaunch);
// Later releases only (ROCm 5.2's headers have neither).
#ifdef hipEventRecordExternal
SAME(SHIM_hipEventRecordDefault, hipEventRecordDefault);
SAME(SHIM_hipEventRecordExternal, hipEventRecordExternal);
#endif
SAME(SHIM_hipErrorGraphExecUpdateFailure, hipErrorGraphExecUpdateFailure);
SAME(SHIM_hipGraphExecUpdateSuccess, hipGraphExecUpdateSuccess);
SAME(SHIM_hipGraphExecUpdateError, hipGraphExecUpdateError);
SAME(SHIM_hipGraphExecUpdateErrorTopologyChanged, hipGraphExecUpdateErrorTopologyChanged);
SAME(SHIM_hipGraphExecUpdateErrorNodeTypeChanged, hipGraphExecUpdateErrorNodeTypeChanged);
SAME(SHIM_hipGraphExecUpdateErrorFunctionChanged, hipGraphExecUpdateErrorFunctionChanged);
SAME(SHIM_hipGraphExecUpdateErrorParametersChanged, hipGraphExecUpdateErrorParametersChanged);
SAME(SHIM_hipGraphExecUpdateErrorNotSupported, hipGraphExecUpdateErrorNotSupported);
SAME(SHIM_hipGraphExecUpdateErrorUnsupportedFunctionChange,
     hipGraphExecUpdateErrorUnsupportedFunctionChange);
SAME(SHIM_hipStreamAddCaptureDependencies, hipStreamAddCaptureDependencies);
SAME(SHIM_hipStreamSetCaptureDependencies, hipStreamSetCaptureDependencies);
#define SAME_FIELD(shim, hip, field) \
    static_assert(offsetof(shim, field) == offsetof(hip, field), #hip "." #field)
static_assert(sizeof(shim_hipKernelNodeParams) == sizeof(hipKernelNodeParams), "hipKernelNodeParams");
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, blockDim);
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, extra);
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, func);
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, gridDim);
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, kernelParams);
SAME_FIELD(shim_hipKernelNodeParams, hipKernelNodeParams, sharedMemBytes);
static_assert(sizeof(shim_hipMemsetParams) == sizeof(hipMemsetParams), "hipMemsetParams");
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, dst);
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, elementSize);
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, height);
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, pitch);
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, value);
SAME_FIELD(shim_hipMemsetParams, hipMemsetParams, width);
static_assert(sizeof(shim_dim3) == sizeof(dim3), "dim3");
SAME(SHIM_HIPRTC_SUCCESS, HIPRTC_SUCCESS);
SAME(SHIM_HIPRTC_ERROR_INVALID_INPUT, HIPRTC_ERROR_INVALID_INPUT);
SAME(SHIM_HIPRTC_ERROR_INTERNAL_ERROR, HIPRTC_ERROR_INTERNAL_ERROR);
SAME(SHIM_HIP_VERSION, HIP_VERSION);
#define FIELD(field, type)                                                              \
    static_assert(offsetof(hipDeviceProp_t, field) == SHIM_hipDeviceProp_##field, #field); \
    static_assert(sizeof(((hipDeviceProp_t*)nullptr)->field) == sizeof(type), #field " size")
static_assert(sizeof(hipDeviceProp_t) == SHIM_hipDeviceProp_t_size, "hipDeviceProp_t size");
FIELD(name, char[256]);
FIELD(totalGlobalMem, size_t);
FIELD(sharedMemPerBlock, size_t);
FIELD(warpSize, int);
FIELD(maxThreadsPerBlock, int);
FIELD(maxThreadsDim, int[3]);
FIELD(maxGridSize, int[3]);
FIELD(major, int);
FIELD(minor, int);
FIELD(multiProcessorCount, int);
FIELD(gcnArchName, char[256]);
static_assert(sizeof(hipError_t) == sizeof(shim_hipError_t), "hipError_t size");
static_assert(sizeof(hipStreamCaptureMode) == sizeof(int), "hipStreamCaptureMode size");
static_assert(sizeof(hipGraphNodeType) == sizeof(int), "hipGraphNodeType size");
static_assert(sizeof(hiprtcResult) == sizeof(shim_hiprtcResult), "hiprtcResult size");
