/* Imports: memory another process allocated (IPC handles, pool exports, external memory) is
 * charged to each process that maps it, at the size the driver reports, or refused. Counting
 * shared memory more than once errs on the side of the limit; an import whose size or device
 * cannot be told is refused. */
#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_log.h"
#include "vgpu_memory.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

/* The device an imported pointer lives on, as the driver says. */
static int vgpu_pointer_index(CUdeviceptr dptr)
{
    int ordinal = 0;
    if (vgpu_real.cuPointerGetAttribute != NULL &&
        vgpu_real.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr) ==
            CUDA_SUCCESS)
        return vgpu_index_of(ordinal);
    return -1;
}

static uint64_t vgpu_pointer_bytes(CUdeviceptr dptr)
{
    CUdeviceptr base;
    size_t bytes = 0;
    if (vgpu_real.cuMemGetAddressRange_v2 == NULL ||
        vgpu_real.cuMemGetAddressRange_v2(&base, &bytes, dptr) != CUDA_SUCCESS)
        return 0;
    return bytes;
}

/* Charge an import the driver has made; undo it when it does not fit or cannot be measured. */
static CUresult vgpu_imported(enum vgpu_object_kind kind, uint64_t key, int index,
                              uint64_t bytes, vgpu_undo undo)
{
    if (vgpu_memory_mode() == VGPU_MEMORY_PASS)
        return CUDA_SUCCESS;
    if (bytes == 0 && vgpu_memory_mode() == VGPU_MEMORY_ACCOUNT) {
        vgpu_error("cannot tell the size of imported device memory; refused");
        undo(key);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct vgpu_ticket ticket;
    CUresult rc = vgpu_reserve(&ticket, index, bytes);
    if (rc != CUDA_SUCCESS) {
        undo(key);
        return rc;
    }
    return vgpu_settle(&ticket, CUDA_SUCCESS, kind, key, 0, undo);
}

static CUresult vgpu_undo_ipc(uint64_t key)
{
    return vgpu_real.cuIpcCloseMemHandle((CUdeviceptr)key);
}

static CUresult vgpu_undo_pool_import(uint64_t key)
{
    return vgpu_real.cuMemFree_v2((CUdeviceptr)key);
}

static CUresult vgpu_undo_external(uint64_t key)
{
    return vgpu_real.cuDestroyExternalMemory((CUexternalMemory)(uintptr_t)key);
}

VGPU_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle,
                                           unsigned int flags)
{
    VGPU_ENTER(cuIpcOpenMemHandle_v2, dptr, handle, flags);
    CUresult rc = vgpu_real.cuIpcOpenMemHandle_v2(dptr, handle, flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    return vgpu_imported(VGPU_OBJECT_IMPORT, *dptr, vgpu_pointer_index(*dptr),
                         vgpu_pointer_bytes(*dptr), vgpu_undo_ipc);
}

VGPU_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    VGPU_ENTER(cuIpcCloseMemHandle, dptr);
    int dev = 0;
    uint64_t bytes = 0;
    int had = vgpu_alloc_take(VGPU_OBJECT_IMPORT, dptr, &dev, &bytes, NULL) == 0;
    return vgpu_release(VGPU_OBJECT_IMPORT, dptr, vgpu_real.cuIpcCloseMemHandle(dptr), had, dev,
                        bytes);
}

/* Freed like any pointer (cuMemFree*, which looks imports up too). */
VGPU_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *data)
{
    VGPU_ENTER(cuMemPoolImportPointer, dptr, pool, data);
    CUresult rc = vgpu_real.cuMemPoolImportPointer(dptr, pool, data);
    if (rc != CUDA_SUCCESS)
        return rc;
    int index = vgpu_pool_index(pool);
    return vgpu_imported(VGPU_OBJECT_IMPORT, *dptr, index >= 0 ? index : vgpu_pointer_index(*dptr),
                         vgpu_pointer_bytes(*dptr), vgpu_undo_pool_import);
}

VGPU_EXPORT CUresult cuImportExternalMemory(CUexternalMemory *memory,
                                            const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    VGPU_ENTER(cuImportExternalMemory, memory, desc);
    CUresult rc = vgpu_real.cuImportExternalMemory(memory, desc);
    if (rc != CUDA_SUCCESS || desc == NULL)
        return rc;
    return vgpu_imported(VGPU_OBJECT_EXTERNAL, (uintptr_t)*memory, vgpu_current_index(),
                         desc->size, vgpu_undo_external);
}

VGPU_EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory memory)
{
    VGPU_ENTER(cuDestroyExternalMemory, memory);
    int dev = 0;
    uint64_t bytes = 0;
    uint64_t key = (uintptr_t)memory;
    int had = vgpu_alloc_take(VGPU_OBJECT_EXTERNAL, key, &dev, &bytes, NULL) == 0;
    return vgpu_release(VGPU_OBJECT_EXTERNAL, key, vgpu_real.cuDestroyExternalMemory(memory),
                        had, dev, bytes);
}
