/* Device-memory hooks: every allocation path is checked and charged before the driver is
 * called and refunded if the driver fails; every free is forwarded, and refunds only what its
 * own allocation charged. */
#include <stdint.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_limiter.h"
#include "vgpu_log.h"
#include "vgpu_memory.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

static int vgpu_refused_unknown_device;

CUresult vgpu_reserve(struct vgpu_ticket *ticket, int index, uint64_t bytes)
{
    ticket->index = -1;
    ticket->bytes = bytes;
    enum vgpu_memory_mode mode = vgpu_memory_mode();
    if (mode == VGPU_MEMORY_REFUSE) {
        vgpu_report_refusal();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (mode == VGPU_MEMORY_PASS || index == VGPU_NOT_DEVICE)
        return CUDA_SUCCESS;
    if (index == VGPU_NO_CONTEXT)
        return CUDA_ERROR_INVALID_CONTEXT;  /* what the driver answers without a context */
    if (index < 0) {  /* fail closed: memory on a device we cannot name cannot be counted */
        if (!__atomic_exchange_n(&vgpu_refused_unknown_device, 1, __ATOMIC_RELAXED))
            vgpu_error("refusing device memory on a device libvgpu cannot identify");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    vgpu_watcher_ensure();  /* reconciles what NVML sees this process hold */
    /* A pool may have given memory back since its reservation was last read. */
    if (vgpu_charge(index, bytes, VGPU_KIND_DATA, 0) != 0 &&
        (vgpu_pools_refresh(index) == 0 || vgpu_charge(index, bytes, VGPU_KIND_DATA, 0) != 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    ticket->index = index;
    return CUDA_SUCCESS;
}

CUresult vgpu_settle(const struct vgpu_ticket *ticket, CUresult rc, enum vgpu_object_kind kind,
                     uint64_t key, uint64_t link, vgpu_undo undo)
{
    if (ticket->index < 0)
        return rc;
    if (rc == CUDA_SUCCESS &&
        vgpu_alloc_add(kind, key, ticket->index, ticket->bytes, link) == 0)
        return CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {  /* cannot remember it, so cannot account for its free */
        undo(key);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    vgpu_refund(ticket->index, ticket->bytes, VGPU_KIND_DATA);
    return rc;
}

CUresult vgpu_release(enum vgpu_object_kind kind, uint64_t key, CUresult rc_of_real,
                             int had, int dev, uint64_t bytes)
{
    if (!had)
        return rc_of_real;
    if (rc_of_real == CUDA_SUCCESS)
        vgpu_refund(dev, bytes, VGPU_KIND_DATA);
    else
        vgpu_alloc_add(kind, key, dev, bytes, 0);  /* still alive: keep accounting for it */
    return rc_of_real;
}

/* Forget the object, make the driver's release call, refund on success. */
#define VGPU_RELEASED(kind, key, call)                                           \
    do {                                                                       \
        int dev_ = 0;                                                          \
        uint64_t bytes_ = 0, key_ = (uint64_t)(key);                           \
        int had_ = key_ != 0 && vgpu_alloc_take((kind), key_, &dev_, &bytes_, NULL) == 0; \
        return vgpu_release((kind), key_, (call), had_, dev_, bytes_);         \
    } while (0)

static CUresult vgpu_undo_pointer(uint64_t key)
{
    /* A pre-3.2 allocation has a 32-bit address; its own free takes it. */
    if (key <= UINT32_MAX && vgpu_real.cuMemFree != NULL)
        return vgpu_real.cuMemFree((CUdeviceptr_v1)key);
    return vgpu_real.cuMemFree_v2((CUdeviceptr)key);
}

static CUresult vgpu_undo_handle(uint64_t key)
{
    return vgpu_real.cuMemRelease((CUmemGenericAllocationHandle)key);
}

static CUresult vgpu_undo_array(uint64_t key)
{
    return vgpu_real.cuArrayDestroy((CUarray)(uintptr_t)key);
}

static CUresult vgpu_undo_mipmap(uint64_t key)
{
    return vgpu_real.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)key);
}

VGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    VGPU_ENTER(cuMemAlloc_v2, dptr, bytes);
    VGPU_CHARGED(vgpu_current_index(), bytes, VGPU_OBJECT_POINTER, *dptr, vgpu_undo_pointer,
                 vgpu_real.cuMemAlloc_v2(dptr, bytes));
}

VGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    VGPU_ENTER(cuMemAllocManaged, dptr, bytes, flags);
    VGPU_CHARGED(vgpu_current_index(), bytes, VGPU_OBJECT_POINTER, *dptr, vgpu_undo_pointer,
                 vgpu_real.cuMemAllocManaged(dptr, bytes, flags));
}

/* The pitch is at least the width: that much is charged before the call, the padding the
 * driver chose after it. `legacy` picks the pre-3.2 entry (32-bit sizes). */
static CUresult vgpu_pitched(uint64_t *dptr, uint64_t *pitch, uint64_t width, uint64_t height,
                             unsigned element_bytes, int legacy)
{
    uint64_t least;
    if (__builtin_mul_overflow(width, height, &least))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct vgpu_ticket ticket;
    CUresult rc = vgpu_reserve(&ticket, vgpu_current_index(), least);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (legacy) {
        CUdeviceptr_v1 small = 0;
        unsigned int small_pitch = 0;
        rc = vgpu_real.cuMemAllocPitch(&small, &small_pitch, (unsigned)width, (unsigned)height,
                                       element_bytes);
        *dptr = small;
        *pitch = small_pitch;
    } else {
        CUdeviceptr wide = 0;
        size_t wide_pitch = 0;
        rc = vgpu_real.cuMemAllocPitch_v2(&wide, &wide_pitch, width, height, element_bytes);
        *dptr = wide;
        *pitch = wide_pitch;
    }
    if (rc == CUDA_SUCCESS && ticket.index >= 0 && *pitch > width) {
        uint64_t extra = (*pitch - width) * height;
        if (vgpu_charge(ticket.index, extra, VGPU_KIND_DATA, 0) != 0) {
            vgpu_undo_pointer(*dptr);
            vgpu_refund(ticket.index, least, VGPU_KIND_DATA);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ticket.bytes += extra;
    }
    return vgpu_settle(&ticket, rc, VGPU_OBJECT_POINTER, rc == CUDA_SUCCESS ? *dptr : 0, 0,
                       vgpu_undo_pointer);
}

VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned int element_bytes)
{
    VGPU_ENTER(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
    uint64_t pointer = 0, got = 0;
    CUresult rc = vgpu_pitched(&pointer, &got, width, height, element_bytes, 0);
    if (rc == CUDA_SUCCESS) {
        *dptr = pointer;
        *pitch = got;
    }
    return rc;
}

/* Pre-3.2 entry points (32-bit sizes), handed out by cuGetProcAddress for versions below
 * 3020: charged like their successors. */
VGPU_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes)
{
    VGPU_ENTER(cuMemAlloc, dptr, bytes);
    VGPU_CHARGED(vgpu_current_index(), bytes, VGPU_OBJECT_POINTER, *dptr, vgpu_undo_pointer,
                 vgpu_real.cuMemAlloc(dptr, bytes));
}

VGPU_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch,
                                     unsigned int width, unsigned int height,
                                     unsigned int element_bytes)
{
    VGPU_ENTER(cuMemAllocPitch, dptr, pitch, width, height, element_bytes);
    uint64_t pointer = 0, got = 0;
    CUresult rc = vgpu_pitched(&pointer, &got, width, height, element_bytes, 1);
    if (rc == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr_v1)pointer;
        *pitch = (unsigned int)got;
    }
    return rc;
}

typedef CUresult (*vgpu_free_call)(CUdeviceptr dptr, CUstream stream);

/* Free a pointer of ours: a plain allocation gives its charge back, a pooled one leaves its
 * memory in the pool, whose reservation is then re-read. */
static CUresult vgpu_free_pointer(CUdeviceptr dptr, CUstream stream, vgpu_free_call call)
{
    int dev = 0;
    uint64_t bytes = 0, pool = 0;
    if (dptr == 0)
        return call(dptr, stream);
    if (vgpu_alloc_take(VGPU_OBJECT_POINTER, dptr, &dev, &bytes, NULL) == 0)
        return vgpu_release(VGPU_OBJECT_POINTER, dptr, call(dptr, stream), 1, dev, bytes);
    if (vgpu_alloc_take(VGPU_OBJECT_IMPORT, dptr, &dev, &bytes, NULL) == 0)  /* pool imports */
        return vgpu_release(VGPU_OBJECT_IMPORT, dptr, call(dptr, stream), 1, dev, bytes);
    if (vgpu_alloc_take(VGPU_OBJECT_POOLED, dptr, &dev, &bytes, &pool) != 0)
        return call(dptr, stream);  /* not ours: forwarded untouched */
    CUresult rc = call(dptr, stream);
    if (rc == CUDA_SUCCESS)
        vgpu_pool_settle((CUmemoryPool)(uintptr_t)pool, 0);
    else
        vgpu_alloc_add(VGPU_OBJECT_POOLED, dptr, dev, 0, pool);
    return rc;
}

static CUresult vgpu_real_free(CUdeviceptr dptr, CUstream stream)
{
    (void)stream;
    return vgpu_real.cuMemFree_v2(dptr);
}

static CUresult vgpu_real_free_async(CUdeviceptr dptr, CUstream stream)
{
    return vgpu_real.cuMemFreeAsync(dptr, stream);
}

static CUresult vgpu_real_free_async_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return vgpu_real.cuMemFreeAsync_ptsz(dptr, stream);
}

VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    VGPU_ENTER(cuMemFree_v2, dptr);
    return vgpu_free_pointer(dptr, NULL, vgpu_real_free);
}

static CUresult vgpu_real_free_v1(CUdeviceptr dptr, CUstream stream)
{
    (void)stream;
    return vgpu_real.cuMemFree((CUdeviceptr_v1)dptr);
}

VGPU_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    VGPU_ENTER(cuMemFree, dptr);
    return vgpu_free_pointer(dptr, NULL, vgpu_real_free_v1);
}

VGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    VGPU_ENTER(cuMemFreeAsync, dptr, stream);
    return vgpu_free_pointer(dptr, stream, vgpu_real_free_async);
}

VGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    VGPU_ENTER(cuMemFreeAsync_ptsz, dptr, stream);
    return vgpu_free_pointer(dptr, stream, vgpu_real_free_async_ptsz);
}

VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    VGPU_ENTER(cuMemCreate, handle, bytes, prop, flags);
    /* The physical location names the device, context or not. Host memory is not charged. */
    int index = prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                    ? vgpu_index_of(prop->location.id)
                    : VGPU_NOT_DEVICE;
    struct vgpu_ticket ticket;
    CUresult rc = vgpu_reserve(&ticket, index, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = vgpu_real.cuMemCreate(handle, bytes, prop, flags);
    /* One reference: the handle's own. Mappings and retains add theirs. */
    return vgpu_settle(&ticket, rc, VGPU_OBJECT_HANDLE, rc == CUDA_SUCCESS ? *handle : 0, 1,
                       vgpu_undo_handle);
}

/* The driver frees a handle's memory when its last reference goes: the handle's own (released
 * by cuMemRelease), each mapping's (cuMemUnmap) and each cuMemRetainAllocationHandle's. */
static void vgpu_handle_unref(uint64_t handle)
{
    int dev = 0;
    uint64_t bytes = 0;
    if (vgpu_alloc_ref(handle, -1, &dev, &bytes) == 0)
        vgpu_refund(dev, bytes, VGPU_KIND_DATA);
}

static void vgpu_mapping_gone(const struct vgpu_mapping *mapping)
{
    if (mapping->charged != 0)
        vgpu_refund(mapping->index, mapping->charged, VGPU_KIND_DATA);
    else
        vgpu_handle_unref(mapping->handle);
}

VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    VGPU_ENTER(cuMemRelease, handle);
    CUresult rc = vgpu_real.cuMemRelease(handle);
    if (rc == CUDA_SUCCESS)
        vgpu_handle_unref(handle);
    return rc;
}

/* The device of a handle imported from another process (cuMemImportFromShareableHandle). */
static int vgpu_handle_index(CUmemGenericAllocationHandle handle)
{
    CUmemAllocationProp prop;
    if (vgpu_real.cuMemGetAllocationPropertiesFromHandle == NULL ||
        vgpu_real.cuMemGetAllocationPropertiesFromHandle(&prop, handle) != CUDA_SUCCESS)
        return -1;
    return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? vgpu_index_of(prop.location.id)
                                                            : VGPU_NOT_DEVICE;
}

VGPU_EXPORT CUresult cuMemMap(CUdeviceptr dptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    VGPU_ENTER(cuMemMap, dptr, size, offset, handle, flags);
    CUresult rc = vgpu_real.cuMemMap(dptr, size, offset, handle, flags);
    int dev;
    uint64_t bytes;
    if (rc != CUDA_SUCCESS || vgpu_memory_mode() == VGPU_MEMORY_PASS)
        return rc;
    struct vgpu_mapping mapping = {.va = dptr, .size = size, .handle = handle};
    if (vgpu_alloc_ref(handle, 1, &dev, &bytes) < 0) {
        /* Not a handle of ours: memory another process exported, charged as mapped here. */
        struct vgpu_ticket ticket;
        rc = vgpu_reserve(&ticket, vgpu_handle_index(handle), size);
        if (rc != CUDA_SUCCESS) {
            vgpu_real.cuMemUnmap(dptr, size);
            return rc;
        }
        mapping.charged = ticket.index >= 0 ? size : 0;
        mapping.index = ticket.index;
    }
    if (vgpu_mapping_add(&mapping) != 0)
        vgpu_error("cannot record a mapping; its memory stays charged until exit");
    return rc;
}

VGPU_EXPORT CUresult cuMemUnmap(CUdeviceptr dptr, size_t size)
{
    VGPU_ENTER(cuMemUnmap, dptr, size);
    CUresult rc = vgpu_real.cuMemUnmap(dptr, size);
    if (rc == CUDA_SUCCESS)
        vgpu_mapping_remove(dptr, size, vgpu_mapping_gone);
    return rc;
}

VGPU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    VGPU_ENTER(cuMemRetainAllocationHandle, handle, addr);
    CUresult rc = vgpu_real.cuMemRetainAllocationHandle(handle, addr);
    int dev;
    uint64_t bytes;
    if (rc == CUDA_SUCCESS && handle != NULL)
        vgpu_alloc_ref(*handle, 1, &dev, &bytes);
    return rc;
}

/* Bytes per channel of an array format; 8 (the widest) for formats not listed. */
static uint64_t vgpu_format_bytes(CUarray_format format)
{
    switch ((int)format) {
    case 0x01: case 0x08: case 0xc0: case 0xc6: return 1;
    case 0x02: case 0x09: case 0x10: case 0xc1: case 0xc3: case 0xc7: case 0xc9: return 2;
    case 0x03: case 0x0a: case 0x20: case 0x50: case 0xc2: case 0xc4: case 0xc8: case 0xca:
        return 4;
    default: return 8;
    }
}

static uint64_t vgpu_array_bytes(uint64_t width, uint64_t height, uint64_t depth,
                                 CUarray_format format, unsigned channels)
{
    uint64_t bytes = vgpu_format_bytes(format) * (channels ? channels : 1);
    uint64_t dims[3] = {width, height ? height : 1, depth ? depth : 1};
    for (int i = 0; i < 3; i++)
        if (__builtin_mul_overflow(bytes, dims[i], &bytes))
            return UINT64_MAX;
    return bytes;
}

/* An array of the descriptor's size (depth 1 for a 2D descriptor), charged before it is made;
 * the pre-3.2 entries take the 32-bit descriptors. */
#define VGPU_ARRAY_CREATE(name, descriptor, depth)                                          \
    VGPU_EXPORT CUresult name(CUarray *array, const descriptor *desc)                      \
    {                                                                                       \
        VGPU_ENTER(name, array, desc);                                                      \
        if (desc == NULL)                                                                   \
            return vgpu_real.name(array, desc);                                             \
        VGPU_CHARGED(vgpu_current_index(),                                                  \
                     vgpu_array_bytes(desc->Width, desc->Height, (depth), desc->Format,     \
                                      desc->NumChannels),                                   \
                     VGPU_OBJECT_ARRAY, (uintptr_t)*array, vgpu_undo_array,                 \
                     vgpu_real.name(array, desc));                                          \
    }

VGPU_ARRAY_CREATE(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 1)
VGPU_ARRAY_CREATE(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, desc->Depth)
VGPU_ARRAY_CREATE(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 1)
VGPU_ARRAY_CREATE(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, desc->Depth)

VGPU_EXPORT CUresult cuArrayDestroy(CUarray array)
{
    VGPU_ENTER(cuArrayDestroy, array);
    VGPU_RELEASED(VGPU_OBJECT_ARRAY, (uintptr_t)array, vgpu_real.cuArrayDestroy(array));
}

VGPU_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *mipmap,
                                            const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                            unsigned int levels)
{
    VGPU_ENTER(cuMipmappedArrayCreate, mipmap, desc, levels);
    if (desc == NULL)
        return vgpu_real.cuMipmappedArrayCreate(mipmap, desc, levels);
    uint64_t bytes = 0;
    for (unsigned level = 0; level < levels && level < 64; level++) {
        uint64_t w = desc->Width >> level, h = desc->Height >> level, d = desc->Depth >> level;
        uint64_t one = vgpu_array_bytes(w ? w : 1, h ? h : desc->Height != 0,
                                        d ? d : desc->Depth != 0, desc->Format,
                                        desc->NumChannels);
        if (__builtin_add_overflow(bytes, one, &bytes))
            bytes = UINT64_MAX;
    }
    VGPU_CHARGED(vgpu_current_index(), bytes, VGPU_OBJECT_MIPMAP, (uintptr_t)*mipmap,
                 vgpu_undo_mipmap, vgpu_real.cuMipmappedArrayCreate(mipmap, desc, levels));
}

VGPU_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap)
{
    VGPU_ENTER(cuMipmappedArrayDestroy, mipmap);
    VGPU_RELEASED(VGPU_OBJECT_MIPMAP, (uintptr_t)mipmap, vgpu_real.cuMipmappedArrayDestroy(mipmap));
}
