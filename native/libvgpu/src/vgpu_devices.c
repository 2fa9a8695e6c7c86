#include "vgpu_devices.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "vgpu_init.h"
#include "vgpu_log.h"
#include "vgpu_region.h"

static pthread_mutex_t vgpu_map_mutex = PTHREAD_MUTEX_INITIALIZER;
static int vgpu_map_ready;
static int vgpu_cuda_to_nvml[VGPU_MAX_DEVICES];
static nvmlDevice_t vgpu_handles[VGPU_MAX_DEVICES];

static void vgpu_format_uuid(const CUuuid *uuid, char out[96])
{
    const unsigned char *b = (const unsigned char *)uuid->bytes;
    snprintf(out, 96,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static unsigned vgpu_nvml_devices(char uuids[][96])
{
    unsigned count = 0;
    if (vgpu_real.nvmlInit_v2 == NULL || vgpu_real.nvmlInit_v2() != NVML_SUCCESS ||
        vgpu_real.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS)
        return 0;
    if (count > VGPU_MAX_DEVICES)
        count = VGPU_MAX_DEVICES;
    for (unsigned i = 0; i < count; i++) {
        if (vgpu_real.nvmlDeviceGetHandleByIndex_v2(i, &vgpu_handles[i]) != NVML_SUCCESS ||
            vgpu_real.nvmlDeviceGetUUID(vgpu_handles[i], uuids[i], 96) != NVML_SUCCESS)
            uuids[i][0] = '\0';
    }
    return count;
}

/* Built on first need after cuInit; retried until the driver answers. */
static void vgpu_build_map(void)
{
    pthread_mutex_lock(&vgpu_map_mutex);
    int cuda_count = 0;
    vgpu_inside++;
    if (!vgpu_map_ready && vgpu_real.cuDeviceGetCount != NULL &&
        vgpu_real.cuDeviceGetCount(&cuda_count) == CUDA_SUCCESS) {
        char uuids[VGPU_MAX_DEVICES][96];
        memset(uuids, 0, sizeof uuids);
        unsigned nvml_count = vgpu_nvml_devices(uuids);
        for (int k = 0; k < VGPU_MAX_DEVICES; k++) {
            vgpu_cuda_to_nvml[k] = k;
            CUuuid uuid;
            char text[96];
            if (k >= cuda_count || nvml_count == 0 || vgpu_real.cuDeviceGetUuid_v2 == NULL ||
                vgpu_real.cuDeviceGetUuid_v2(&uuid, (CUdevice)k) != CUDA_SUCCESS)
                continue;
            vgpu_format_uuid(&uuid, text);
            for (unsigned n = 0; n < nvml_count; n++)
                if (strcmp(uuids[n], text) == 0)
                    vgpu_cuda_to_nvml[k] = (int)n;
        }
        if (nvml_count > 0)
            vgpu_region_set_devices(nvml_count, uuids);
        __atomic_store_n(&vgpu_map_ready, 1, __ATOMIC_RELEASE);
    }
    vgpu_inside--;
    pthread_mutex_unlock(&vgpu_map_mutex);
}

int vgpu_index_of(CUdevice device)
{
    if (device < 0 || device >= VGPU_MAX_DEVICES)
        return -1;
    if (!__atomic_load_n(&vgpu_map_ready, __ATOMIC_ACQUIRE))
        vgpu_build_map();
    /* Before cuInit the driver cannot say; identity is HAMi's assumption too. */
    return __atomic_load_n(&vgpu_map_ready, __ATOMIC_ACQUIRE) ? vgpu_cuda_to_nvml[device]
                                                               : device;
}

int vgpu_current_index(void)
{
    CUdevice device;
    if (vgpu_real.cuCtxGetDevice == NULL || vgpu_real.cuCtxGetDevice(&device) != CUDA_SUCCESS)
        return VGPU_NO_CONTEXT;
    return vgpu_index_of(device);
}

/* Drivers before CUDA 12.8 lack cuStreamGetDevice: ask the stream's context instead. */
static CUresult vgpu_stream_context_device(CUstream stream, CUdevice *device)
{
    CUcontext context, popped;
    CUresult rc = vgpu_real.cuStreamGetCtx == NULL ? CUDA_ERROR_NOT_SUPPORTED
                                                   : vgpu_real.cuStreamGetCtx(stream, &context);
    if (rc != CUDA_SUCCESS || vgpu_real.cuCtxPushCurrent_v2 == NULL ||
        vgpu_real.cuCtxPopCurrent_v2 == NULL)
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED;
    if ((rc = vgpu_real.cuCtxPushCurrent_v2(context)) != CUDA_SUCCESS)
        return rc;
    rc = vgpu_real.cuCtxGetDevice(device);
    vgpu_real.cuCtxPopCurrent_v2(&popped);
    return rc;
}

int vgpu_stream_device(CUstream stream, CUdevice *device)
{
    CUresult rc = vgpu_real.cuStreamGetDevice != NULL ? vgpu_real.cuStreamGetDevice(stream, device)
                                                      : vgpu_stream_context_device(stream, device);
    if (rc == CUDA_ERROR_INVALID_CONTEXT)
        return VGPU_NO_CONTEXT;
    return rc == CUDA_SUCCESS ? vgpu_index_of(*device) : -1;
}

nvmlDevice_t vgpu_nvml_handle(int index)
{
    if (index < 0 || index >= VGPU_MAX_DEVICES ||
        !__atomic_load_n(&vgpu_map_ready, __ATOMIC_ACQUIRE))
        return NULL;
    return vgpu_handles[index];
}

void vgpu_processes(int index, struct vgpu_snapshot *snapshot)
{
    snapshot->count = 0;
    nvmlDevice_t handle = vgpu_nvml_handle(index);
    unsigned count = VGPU_MAX_SNAPSHOT;
    if (handle == NULL || vgpu_real.nvmlDeviceGetComputeRunningProcesses == NULL)
        return;
    vgpu_inside++;
    if (vgpu_real.nvmlDeviceGetComputeRunningProcesses(handle, &count, snapshot->procs) ==
        NVML_SUCCESS)
        snapshot->count = count;
    vgpu_inside--;
}

static const nvmlProcessInfo_v1_t *vgpu_find_pid(const struct vgpu_snapshot *snapshot,
                                                 unsigned pid)
{
    for (unsigned i = 0; i < snapshot->count; i++)
        if (snapshot->procs[i].pid == pid)
            return &snapshot->procs[i];
    return NULL;
}

static int vgpu_pid_of_other_slot(unsigned pid)
{
    const struct vgpu_region_v1 *v1 = &vgpu_region()->v1;
    const struct vgpu_slot *own = vgpu_own_slot();
    for (int i = 0; i < v1->proc_num && i < VGPU_MAX_PROCS; i++)
        if (&v1->procs[i] != own && v1->procs[i].status != VGPU_SLOT_FREE &&
            (unsigned)v1->procs[i].hostpid == pid)
            return 1;
    return 0;
}

/* The one pid new since `before` that belongs to no other process of this container. */
static unsigned vgpu_new_pid(const struct vgpu_snapshot *before, const struct vgpu_snapshot *after)
{
    unsigned found = 0;
    for (unsigned i = 0; i < after->count; i++) {
        unsigned pid = after->procs[i].pid;
        if (vgpu_find_pid(before, pid) != NULL || vgpu_pid_of_other_slot(pid) || pid == found)
            continue;
        if (found != 0)
            return 0;  /* another container started a context at the same moment */
        found = pid;
    }
    return found;
}

uint64_t vgpu_discover_context(int index, const struct vgpu_snapshot *before)
{
    struct vgpu_slot *slot = vgpu_own_slot();
    if (slot == NULL || vgpu_nvml_handle(index) == NULL)
        return 0;
    static struct vgpu_snapshot after;  /* callers hold the discovery lock */
    unsigned pid = (unsigned)__atomic_load_n(&slot->hostpid, __ATOMIC_ACQUIRE);
    /* NVML may list a new context a little late: look a few times. */
    for (int attempt = 0; attempt < 10; attempt++) {
        vgpu_processes(index, &after);
        if (pid == 0)
            pid = vgpu_new_pid(before, &after);
        if (pid != 0 && vgpu_find_pid(&after, pid) != NULL)
            break;
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (pid == 0) {
        vgpu_info("host pid not found on device %d; SM limiting will use device utilisation",
                  index);
        return 0;
    }
    __atomic_store_n(&slot->hostpid, (int32_t)pid, __ATOMIC_RELEASE);
    const nvmlProcessInfo_v1_t *now = vgpu_find_pid(&after, pid);
    const nvmlProcessInfo_v1_t *was = vgpu_find_pid(before, pid);
    /* NVML_VALUE_NOT_AVAILABLE (all ones) where the driver may not tell: count nothing. */
    uint64_t used_now = now && now->usedGpuMemory != ~0ull ? now->usedGpuMemory : 0;
    uint64_t used_before = was && was->usedGpuMemory != ~0ull ? was->usedGpuMemory : 0;
    return used_now > used_before ? used_now - used_before : 0;
}
