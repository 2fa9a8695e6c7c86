/* Primary contexts: the first one on a device is where this process's host pid is found (the
 * NVML process list before and after) and where the memory the context takes is measured and
 * charged; the last release gives it back; a reset gives back what the context held. */
#include <pthread.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

static pthread_mutex_t vgpu_context_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned vgpu_retains[VGPU_MAX_DEVICES];
static uint64_t vgpu_context_bytes[VGPU_MAX_DEVICES];
static struct vgpu_snapshot vgpu_before;  /* under vgpu_context_mutex */

static CUresult vgpu_first_retain(CUcontext *context, CUdevice device, int index)
{
    int serialised = vgpu_own_slot() != NULL && vgpu_discovery_lock() == 0;
    vgpu_processes(index, &vgpu_before);
    CUresult rc = vgpu_real.cuDevicePrimaryCtxRetain(context, device);
    if (rc == CUDA_SUCCESS) {
        uint64_t bytes = serialised ? vgpu_discover_context(index, &vgpu_before) : 0;
        if (bytes != 0 && vgpu_charge(index, bytes, VGPU_KIND_CONTEXT, 1) == 0)
            vgpu_context_bytes[index] = bytes;
        vgpu_retains[index] = 1;
    }
    if (serialised)
        vgpu_discovery_unlock();
    return rc;
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    VGPU_ENTER(cuDevicePrimaryCtxRetain, context, device);
    int index = vgpu_index_of(device);
    if (vgpu_memory_mode() != VGPU_MEMORY_ACCOUNT || index < 0)
        return vgpu_real.cuDevicePrimaryCtxRetain(context, device);
    pthread_mutex_lock(&vgpu_context_mutex);
    CUresult rc;
    if (vgpu_retains[index] == 0) {
        rc = vgpu_first_retain(context, device, index);
    } else {
        rc = vgpu_real.cuDevicePrimaryCtxRetain(context, device);
        if (rc == CUDA_SUCCESS)
            vgpu_retains[index]++;
    }
    pthread_mutex_unlock(&vgpu_context_mutex);
    return rc;
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    VGPU_ENTER(cuDevicePrimaryCtxRelease_v2, device);
    CUresult rc = vgpu_real.cuDevicePrimaryCtxRelease_v2(device);
    int index = vgpu_index_of(device);
    if (rc != CUDA_SUCCESS || index < 0)
        return rc;
    pthread_mutex_lock(&vgpu_context_mutex);
    if (vgpu_retains[index] > 0 && --vgpu_retains[index] == 0 && vgpu_context_bytes[index]) {
        vgpu_refund(index, vgpu_context_bytes[index], VGPU_KIND_CONTEXT);
        vgpu_context_bytes[index] = 0;
    }
    pthread_mutex_unlock(&vgpu_context_mutex);
    return rc;
}

/* cudaDeviceReset: the driver destroys every allocation of the primary context. */
VGPU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device)
{
    VGPU_ENTER(cuDevicePrimaryCtxReset_v2, device);
    CUresult rc = vgpu_real.cuDevicePrimaryCtxReset_v2(device);
    int index = vgpu_index_of(device);
    if (rc == CUDA_SUCCESS && index >= 0 && vgpu_memory_mode() == VGPU_MEMORY_ACCOUNT) {
        vgpu_refund(index, vgpu_alloc_drop_device(index), VGPU_KIND_DATA);
        vgpu_pools_refresh(index);  /* the pools gave their memory back too */
    }
    return rc;
}

void vgpu_contexts_forget(void)
{
    pthread_mutex_init(&vgpu_context_mutex, NULL);
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        vgpu_retains[i] = 0;
        vgpu_context_bytes[i] = 0;
    }
}
