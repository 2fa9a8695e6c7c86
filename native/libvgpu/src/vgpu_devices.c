#include "vgpu_devices.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "vgpu_init.h"
#include "vgpu_hooks.h"
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

/* Device memory NVML shows for `pid` (0 when it is not listed or cannot say). */
static uint64_t vgpu_used_by(const struct vgpu_snapshot *snapshot, unsigned pid)
{
    const nvmlProcessInfo_v1_t *found = vgpu_find_pid(snapshot, pid);
    return found != NULL && found->usedGpuMemory != ~0ull ? found->usedGpuMemory : 0;
}

static void vgpu_pause_ms(long ms)
{
    struct timespec pause = {0, ms * 1000 * 1000};
    nanosleep(&pause, NULL);
}

/* Our host pid, told by an act only we make: with the new context current, a probe of
 * VGPU_PROBE_BYTES is allocated, and ours is the one process, new since `before` and no other
 * process's of this container, whose memory grows by at least that much. Another container
 * starting at the same moment cannot be mistaken for us (its pid was what a plain list diff
 * took); when two processes qualify, nothing is guessed. 0 when it cannot be told. */
#define VGPU_PROBE_BYTES (2ull << 20)

static unsigned vgpu_probe_pid(int index, const struct vgpu_snapshot *before, CUcontext context)
{
    static struct vgpu_snapshot ahead, after;  /* callers hold the discovery lock */
    CUcontext popped;
    CUdeviceptr probe = 0;
    vgpu_processes(index, &ahead);
    if (vgpu_real.cuCtxPushCurrent_v2 == NULL || vgpu_real.cuCtxPushCurrent_v2(context) != 0)
        return 0;
    int charged = vgpu_charge(index, VGPU_PROBE_BYTES, VGPU_KIND_DATA, 0) == 0;
    if (!charged || vgpu_real.cuMemAlloc_v2(&probe, VGPU_PROBE_BYTES) != CUDA_SUCCESS) {
        vgpu_real.cuCtxPopCurrent_v2(&popped);
        if (charged)
            vgpu_refund(index, VGPU_PROBE_BYTES, VGPU_KIND_DATA);
        vgpu_info("no room for the host-pid probe on device %d", index);
        return 0;
    }
    unsigned found = 0, rivals = 0;
    /* NVML may list a new context a little late: look a few times. */
    for (int attempt = 0; attempt < 10 && found == 0; attempt++) {
        if (attempt > 0)
            vgpu_pause_ms(2);
        vgpu_processes(index, &after);
        for (unsigned i = 0; i < after.count; i++) {
            unsigned pid = after.procs[i].pid;
            if (vgpu_find_pid(before, pid) != NULL || vgpu_pid_of_other_slot(pid) ||
                vgpu_used_by(&after, pid) < vgpu_used_by(&ahead, pid) + VGPU_PROBE_BYTES)
                continue;
            if (found != 0 && found != pid)
                rivals++;
            found = pid;
        }
    }
    vgpu_real.cuMemFree_v2(probe);
    vgpu_real.cuCtxPopCurrent_v2(&popped);
    vgpu_refund(index, VGPU_PROBE_BYTES, VGPU_KIND_DATA);
    if (rivals != 0) {
        vgpu_warn("host pid: %u processes new on device %d grew as ours did; not guessing (SM "
                  "limiting uses device utilisation, memory is not reconciled with NVML)",
                  rivals + 1, index);
        return 0;
    }
    return found;
}

uint64_t vgpu_discover_context(int index, const struct vgpu_snapshot *before, CUcontext context)
{
    struct vgpu_slot *slot = vgpu_own_slot();
    if (slot == NULL || vgpu_nvml_handle(index) == NULL)
        return 0;
    static struct vgpu_snapshot now;  /* callers hold the discovery lock */
    unsigned pid = (unsigned)__atomic_load_n(&slot->hostpid, __ATOMIC_ACQUIRE);
    if (pid == 0)  /* a host pid written into the slot from outside is kept */
        pid = vgpu_probe_pid(index, before, context);
    if (pid == 0) {
        vgpu_warn("host pid not found on device %d; SM limiting will use device utilisation",
                  index);
        return 0;
    }
    __atomic_store_n(&slot->hostpid, (int32_t)pid, __ATOMIC_RELEASE);
    for (int attempt = 0; attempt < 10; attempt++) {
        vgpu_processes(index, &now);
        if (vgpu_find_pid(&now, pid) != NULL)
            break;
        vgpu_pause_ms(2);
    }
    uint64_t used_now = vgpu_used_by(&now, pid), used_before = vgpu_used_by(before, pid);
    return used_now > used_before ? used_now - used_before : 0;
}
