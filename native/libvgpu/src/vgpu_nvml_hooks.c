/* NVML memory queries show the same container view as cuMemGetInfo (nvidia-smi in the pod
 * shows "used / limit"). Everything else in NVML is left alone. */
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

/* The container's view of the device behind `device`: 1 when it replaces the driver's. */
static int vgpu_nvml_view(nvmlDevice_t device, unsigned long long *total, unsigned long long *free)
{
    enum vgpu_memory_mode mode = vgpu_memory_mode();
    if (mode == VGPU_MEMORY_PASS || vgpu_inside)
        return 0;
    if (mode == VGPU_MEMORY_REFUSE) {
        *free = 0;
        return 1;
    }
    unsigned index;
    if (vgpu_real.nvmlDeviceGetIndex == NULL ||
        vgpu_real.nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS)
        return 0;
    vgpu_reap_dead(0);
    vgpu_pools_refresh((int)index);
    uint64_t view_total, view_free;
    if (!vgpu_memory_view((int)index, *total, *free, &view_total, &view_free))
        return 0;
    *total = view_total;
    *free = view_free;
    return 1;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    vgpu_init_once();
    if (vgpu_real.nvmlDeviceGetMemoryInfo == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = vgpu_real.nvmlDeviceGetMemoryInfo(device, memory);
    if (rc == NVML_SUCCESS && memory != NULL && vgpu_nvml_view(device, &memory->total,
                                                               &memory->free))
        memory->used = memory->total - memory->free;
    return rc;
}

VGPU_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    vgpu_init_once();
    if (vgpu_real.nvmlDeviceGetMemoryInfo_v2 == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = vgpu_real.nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (rc == NVML_SUCCESS && memory != NULL && vgpu_nvml_view(device, &memory->total,
                                                               &memory->free)) {
        /* The driver's reserved memory is inside the container's "used" here: context
         * overhead is charged as usage. */
        memory->reserved = 0;
        memory->used = memory->total - memory->free;
    }
    return rc;
}
