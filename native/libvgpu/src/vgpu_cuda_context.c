/* Contexts: the first primary context on a device is where this process's host pid is found
 * (the NVML process list before and after) and where the memory the context takes is measured
 * and charged; the last release gives it back; a reset gives back what the context held.
 * Contexts from cuCtxCreate are measured the same way, refused when they do not fit, and given
 * back at cuCtxDestroy. Heap, printf FIFO and stack sizes raised by cuCtxSetLimit reserve
 * device memory and are charged as such. */
#include <pthread.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_limiter.h"
#include "vgpu_log.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

static pthread_mutex_t vgpu_context_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned vgpu_retains[VGPU_MAX_DEVICES];
static uint64_t vgpu_context_bytes[VGPU_MAX_DEVICES];
static CUcontext vgpu_primary[VGPU_MAX_DEVICES];
static struct vgpu_snapshot vgpu_before;  /* under vgpu_context_mutex */

/* Before a call that creates a context on `index` (caller holds vgpu_context_mutex): NVML's
 * process list, so that what the context took, and our host pid, can be told after it.
 * Returns whether discovery is serialised with the container's other processes. */
static int vgpu_measure_start(int index)
{
    int serialised = vgpu_own_slot() != NULL && vgpu_discovery_lock() == 0;
    vgpu_processes(index, &vgpu_before);
    return serialised;
}

/* After it: the bytes the new context took (0 when it failed or cannot be told). */
static uint64_t vgpu_measure_end(int serialised, int index, CUresult rc, CUcontext context)
{
    uint64_t bytes = rc == CUDA_SUCCESS && serialised
                         ? vgpu_discover_context(index, &vgpu_before, context)
                         : 0;
    if (serialised)
        vgpu_discovery_unlock();
    return bytes;
}

/* A context's heap, FIFO and stack reservations beyond their defaults: the records of `context`. */
static uint64_t vgpu_limit_key(CUcontext context, CUlimit limit)
{
    return (uint64_t)(uintptr_t)context * 4 + (uint64_t)limit;
}

static void vgpu_forget_limits(CUcontext context)
{
    static const CUlimit charged[] = {CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE,
                                      CU_LIMIT_MALLOC_HEAP_SIZE};
    for (size_t i = 0; i < sizeof charged / sizeof charged[0]; i++) {
        int dev;
        uint64_t bytes;
        if (vgpu_alloc_take(VGPU_OBJECT_LIMIT, vgpu_limit_key(context, charged[i]), &dev, &bytes,
                            NULL) == 0)
            vgpu_refund(dev, bytes, VGPU_KIND_DATA);
    }
}

static CUresult vgpu_first_retain(CUcontext *context, CUdevice device, int index)
{
    int serialised = vgpu_measure_start(index);
    CUresult rc = vgpu_real.cuDevicePrimaryCtxRetain(context, device);
    uint64_t bytes = vgpu_measure_end(serialised, index, rc, rc == CUDA_SUCCESS ? *context : NULL);
    if (rc == CUDA_SUCCESS) {
        /* The primary context is forced: refusing it would leave the process no device. */
        if (bytes != 0 && vgpu_charge(index, bytes, VGPU_KIND_CONTEXT, 1) == 0)
            vgpu_context_bytes[index] = bytes;
        vgpu_retains[index] = 1;
        vgpu_primary[index] = *context;
    }
    return rc;
}

VGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    VGPU_ENTER(cuDevicePrimaryCtxRetain, context, device);
    int index = vgpu_index_of(device);
    if (vgpu_memory_mode() != VGPU_MEMORY_ACCOUNT || index < 0)
        return vgpu_real.cuDevicePrimaryCtxRetain(context, device);
    vgpu_watcher_ensure();  /* reconciles what NVML sees this process hold */
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
    if (vgpu_retains[index] > 0 && --vgpu_retains[index] == 0) {
        if (vgpu_context_bytes[index])
            vgpu_refund(index, vgpu_context_bytes[index], VGPU_KIND_CONTEXT);
        vgpu_context_bytes[index] = 0;
        vgpu_forget_limits(vgpu_primary[index]);
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
        pthread_mutex_lock(&vgpu_context_mutex);
        vgpu_forget_limits(vgpu_primary[index]);
        pthread_mutex_unlock(&vgpu_context_mutex);
    }
    return rc;
}

/* A created context costs what NVML saw it take; one that does not fit is destroyed again. */
static CUresult vgpu_context_made(CUresult rc, CUcontext *context, int index, uint64_t bytes)
{
    if (rc != CUDA_SUCCESS || bytes == 0)
        return rc;
    if (vgpu_charge(index, bytes, VGPU_KIND_CONTEXT, 0) != 0) {
        vgpu_real.cuCtxDestroy_v2(*context);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (vgpu_alloc_add(VGPU_OBJECT_CONTEXT, (uintptr_t)*context, index, bytes, 0) != 0) {
        vgpu_refund(index, bytes, VGPU_KIND_CONTEXT);
        vgpu_real.cuCtxDestroy_v2(*context);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

#define VGPU_CONTEXT_CREATE(name, device, ...)                                            \
    {                                                                                     \
        VGPU_ENTER(name, __VA_ARGS__);                                                    \
        int index = vgpu_index_of(device);                                                \
        if (vgpu_memory_mode() != VGPU_MEMORY_ACCOUNT || index < 0)                       \
            return vgpu_real.name(__VA_ARGS__);                                           \
        vgpu_watcher_ensure();                                                            \
        pthread_mutex_lock(&vgpu_context_mutex);                                          \
        int serialised = vgpu_measure_start(index);                                       \
        CUresult rc = vgpu_real.name(__VA_ARGS__);                                        \
        uint64_t bytes = vgpu_measure_end(serialised, index, rc,                          \
                                          rc == CUDA_SUCCESS ? *pctx : NULL);             \
        pthread_mutex_unlock(&vgpu_context_mutex);                                        \
        return vgpu_context_made(rc, pctx, index, bytes);                                 \
    }

VGPU_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
VGPU_CONTEXT_CREATE(cuCtxCreate, dev, pctx, flags, dev)

VGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
VGPU_CONTEXT_CREATE(cuCtxCreate_v2, dev, pctx, flags, dev)

VGPU_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int count,
                                    unsigned int flags, CUdevice dev)
VGPU_CONTEXT_CREATE(cuCtxCreate_v3, dev, pctx, params, count, flags, dev)

VGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                    unsigned int flags, CUdevice dev)
VGPU_CONTEXT_CREATE(cuCtxCreate_v4, dev, pctx, params, flags, dev)

VGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext context)
{
    VGPU_ENTER(cuCtxDestroy_v2, context);
    CUresult rc = vgpu_real.cuCtxDestroy_v2(context);
    int dev;
    uint64_t bytes;
    if (rc != CUDA_SUCCESS)
        return rc;
    if (vgpu_alloc_take(VGPU_OBJECT_CONTEXT, (uintptr_t)context, &dev, &bytes, NULL) == 0)
        vgpu_refund(dev, bytes, VGPU_KIND_CONTEXT);
    vgpu_forget_limits(context);
    return rc;
}

/* Device memory a limit's value reserves: the stack size is per thread, for every thread the
 * device can hold at once. */
static uint64_t vgpu_limit_bytes(CUlimit limit, size_t value, CUdevice device)
{
    if (limit != CU_LIMIT_STACK_SIZE)
        return value;
    int sms = 0, threads = 0;
    if (vgpu_real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) ||
        vgpu_real.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                       device))
        return UINT64_MAX;  /* cannot tell: such a stack is refused */
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)value, (uint64_t)sms * (uint64_t)threads, &bytes))
        return UINT64_MAX;
    return bytes;
}

VGPU_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    VGPU_ENTER(cuCtxSetLimit, limit, value);
    CUcontext context = NULL;
    CUdevice device;
    size_t old = 0;
    int charged_kind = limit == CU_LIMIT_STACK_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE ||
                       limit == CU_LIMIT_MALLOC_HEAP_SIZE;
    int index = vgpu_current_index();
    if (vgpu_memory_mode() != VGPU_MEMORY_ACCOUNT || !charged_kind || index < 0 ||
        vgpu_real.cuCtxGetCurrent == NULL || vgpu_real.cuCtxGetLimit == NULL ||
        vgpu_real.cuCtxGetCurrent(&context) != CUDA_SUCCESS ||
        vgpu_real.cuCtxGetDevice(&device) != CUDA_SUCCESS ||
        vgpu_real.cuCtxGetLimit(&old, limit) != CUDA_SUCCESS)
        return vgpu_real.cuCtxSetLimit(limit, value);
    uint64_t was = vgpu_limit_bytes(limit, old, device), now = vgpu_limit_bytes(limit, value, device);
    uint64_t key = vgpu_limit_key(context, limit), held = 0;
    int dev;
    vgpu_alloc_take(VGPU_OBJECT_LIMIT, key, &dev, &held, NULL);
    /* What the driver reserves beyond its default is charged; it answers this when short. */
    if (now > was && vgpu_charge(index, now - was, VGPU_KIND_DATA, 0) != 0) {
        vgpu_alloc_add(VGPU_OBJECT_LIMIT, key, index, held, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = vgpu_real.cuCtxSetLimit(limit, value);
    if (rc != CUDA_SUCCESS) {
        if (now > was)
            vgpu_refund(index, now - was, VGPU_KIND_DATA);
    } else if (now > was) {
        held += now - was;
    } else {
        uint64_t back = was - now < held ? was - now : held;
        vgpu_refund(index, back, VGPU_KIND_DATA);
        held -= back;
    }
    if (held != 0 && vgpu_alloc_add(VGPU_OBJECT_LIMIT, key, index, held, 0) != 0)
        vgpu_error("cannot record a context limit; its memory stays charged until exit");
    return rc;
}

void vgpu_contexts_forget(void)
{
    pthread_mutex_init(&vgpu_context_mutex, NULL);
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        vgpu_retains[i] = 0;
        vgpu_context_bytes[i] = 0;
        vgpu_primary[i] = NULL;
    }
}
