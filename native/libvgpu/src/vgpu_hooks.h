/* Every driver and NVML entry libvgpu touches, in one list.
 *
 * HOOKED names are defined (and exported) by libvgpu under the driver's exact name; USED names
 * are only called. The real addresses of all of them are resolved once (vgpu_resolve.c); the
 * real address of each HOOKED name is also the key of the address -> hook map through which
 * dlsym and cuGetProcAddress hand out hooks. */
#ifndef VGPU_HOOKS_H
#define VGPU_HOOKS_H

#include "vgpu_cuda.h"
#include "vgpu_nvml.h"

#define VGPU_EXPORT __attribute__((visibility("default")))

#define VGPU_CUDA_HOOKED(X)                                                                   \
    X(cuGetProcAddress) X(cuGetProcAddress_v2)                                                \
    X(cuDeviceTotalMem_v2) X(cuMemGetInfo_v2)                                                 \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxReset_v2) \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree_v2)               \
    X(cuMemAlloc) X(cuMemAllocPitch) X(cuMemFree) X(cuArrayCreate) X(cuArray3DCreate)         \
    X(cuCtxCreate) X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy_v2)   \
    X(cuCtxSetLimit)                                                                          \
    X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle) X(cuMemPoolImportPointer)                 \
    X(cuImportExternalMemory) X(cuDestroyExternalMemory)                                      \
    X(cuGraphAddMemAllocNode) X(cuDeviceGraphMemTrim)                                         \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)                                                \
    X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz)                                \
    X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)                                                  \
    X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemRetainAllocationHandle)   \
    X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolTrimTo) X(cuMemPoolSetAttribute)        \
    X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy)                               \
    X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy)                                      \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)     \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz)                            \
    X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                                                    \
    X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams) X(cuGraphExecDestroy)

#define VGPU_CUDA_USED(X)                                                                     \
    X(cuCtxGetDevice) X(cuDeviceGetCount) X(cuDeviceGetUuid_v2) X(cuDeviceGetAttribute)       \
    X(cuStreamGetDevice) X(cuStreamGetCtx) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2)      \
    X(cuDeviceGetMemPool) X(cuDeviceGetDefaultMemPool) X(cuMemPoolGetAttribute)              \
    X(cuCtxGetCurrent) X(cuCtxGetLimit) X(cuPointerGetAttribute) X(cuMemGetAddressRange_v2)   \
    X(cuMemGetAllocationPropertiesFromHandle) X(cuDeviceGetGraphMemAttribute)                \
    X(cuGraphGetNodes) X(cuGraphNodeGetType) X(cuGraphKernelNodeGetParams_v2)

#define VGPU_NVML_HOOKED(X) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2)

#define VGPU_NVML_USED(X)                                                          \
    X(nvmlInit_v2) X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2)       \
    X(nvmlDeviceGetIndex) X(nvmlDeviceGetUUID) X(nvmlDeviceGetComputeRunningProcesses) \
    X(nvmlDeviceGetProcessUtilization) X(nvmlDeviceGetUtilizationRates)

/* Real entry points; NULL where the driver or NVML lacks the name. */
struct vgpu_real {
#define VGPU_REAL_FIELD(name) __typeof__(&name) name;
    VGPU_CUDA_HOOKED(VGPU_REAL_FIELD)
    VGPU_CUDA_USED(VGPU_REAL_FIELD)
    VGPU_NVML_HOOKED(VGPU_REAL_FIELD)
    VGPU_NVML_USED(VGPU_REAL_FIELD)
#undef VGPU_REAL_FIELD
};

extern struct vgpu_real vgpu_real;

/* Fill vgpu_real and the hook map (called once from vgpu_init). */
void vgpu_resolve(void);
/* The hook standing for a real address, or the address itself when it is not hooked. */
void *vgpu_hook_for(void *real_address);
/* libvgpu's hook for one of the HOOKED names, or NULL (cheap; no initialisation). */
void *vgpu_hook_named(const char *name);
/* strcmp(a, b) == 0, safe before any sanitizer runtime is ready. */
int vgpu_same_name(const char *a, const char *b);
/* glibc's own dlsym, found without going through our hook. */
void *vgpu_real_dlsym(void *handle, const char *symbol);

/* The start of every CUDA hook: initialise, refuse to call a missing entry, and pass straight
 * through when libvgpu itself is the caller. */
#define VGPU_ENTER(name, ...)              \
    vgpu_init_once();                      \
    if (vgpu_real.name == NULL)            \
        return CUDA_ERROR_NOT_INITIALIZED; \
    if (vgpu_inside)                       \
    return vgpu_real.name(__VA_ARGS__)

#endif
