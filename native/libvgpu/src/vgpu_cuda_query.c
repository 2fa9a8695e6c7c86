/* Memory queries answer with the container's view: the limit as the total, what the container
 * has left as free. cuMemGetInfo, cuDeviceTotalMem and NVML all use vgpu_memory_view, so they
 * agree with each other and with what an allocation would be allowed. */
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

VGPU_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    VGPU_ENTER(cuMemGetInfo_v2, free, total);
    CUresult rc = vgpu_real.cuMemGetInfo_v2(free, total);
    if (rc != CUDA_SUCCESS || free == NULL || total == NULL)
        return rc;
    enum vgpu_memory_mode mode = vgpu_memory_mode();
    if (mode == VGPU_MEMORY_REFUSE) {
        *free = 0;
    } else if (mode == VGPU_MEMORY_ACCOUNT) {
        vgpu_reap_dead(0);
        int index = vgpu_current_index();
        vgpu_pools_refresh(index);
        uint64_t view_total, view_free;
        vgpu_memory_view(index, *total, *free, &view_total, &view_free);
        *total = view_total;
        *free = view_free;
    }
    return rc;
}

VGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    VGPU_ENTER(cuDeviceTotalMem_v2, bytes, device);
    CUresult rc = vgpu_real.cuDeviceTotalMem_v2(bytes, device);
    if (rc != CUDA_SUCCESS || bytes == NULL || vgpu_memory_mode() != VGPU_MEMORY_ACCOUNT)
        return rc;
    uint64_t view_total, view_free;
    vgpu_memory_view(vgpu_index_of(device), *bytes, *bytes, &view_total, &view_free);
    *bytes = view_total;
    return rc;
}
