/* Reconciliation: memory NVML says this process holds beyond what libvgpu counted is charged
 * too, so the container is refused further allocations while it is over its limit. This
 * covers what no hook sees: a library bound with RTLD_DEEPBIND (it calls the driver directly),
 * module globals and code, driver-internal growth, and entry points a later CUDA adds. The
 * excess lives in the slot's module_size (and so in its total), which the monitor reads as
 * part of the container's usage. */
#include "vgpu_devices.h"
#include "vgpu_limiter.h"
#include "vgpu_region.h"

/* Set our slot's unaccounted memory on `index` to what NVML shows beyond our own count. */
static void vgpu_account_excess(struct vgpu_slot *slot, int index, uint64_t held)
{
    struct vgpu_device_memory *used = &slot->used[index];
    uint64_t excess = __atomic_load_n(&used->module_size, __ATOMIC_RELAXED);
    uint64_t counted = __atomic_load_n(&used->total, __ATOMIC_RELAXED) - excess;
    uint64_t now = held > counted ? held - counted : 0;
    if (now == excess)
        return;
    __atomic_store_n(&used->module_size, now, __ATOMIC_RELAXED);
    __atomic_add_fetch(&used->total, now - excess, __ATOMIC_RELEASE);  /* wraps to subtract */
}

void vgpu_reconcile(void)
{
    static struct vgpu_snapshot snapshot;  /* the watcher thread's own */
    struct vgpu_slot *slot = vgpu_own_slot();
    unsigned pid = slot != NULL ? (unsigned)__atomic_load_n(&slot->hostpid, __ATOMIC_ACQUIRE) : 0;
    if (pid == 0)
        return;  /* NVML's list cannot be read for us without our host pid */
    for (int index = 0; index < VGPU_MAX_DEVICES; index++) {
        if (vgpu_nvml_handle(index) == NULL)
            continue;
        vgpu_processes(index, &snapshot);
        uint64_t held = 0;
        for (unsigned i = 0; i < snapshot.count; i++)
            if (snapshot.procs[i].pid == pid && snapshot.procs[i].usedGpuMemory != ~0ull)
                held = snapshot.procs[i].usedGpuMemory;
        vgpu_account_excess(slot, index, held);
    }
}
