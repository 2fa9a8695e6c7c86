/* Device-memory hooks: every allocation path is checked and charged before the driver is
 * called and refunded if the driver fails; every free is forwarded, and refunds only what its
 * own allocation charged. */
#include <stdint.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_region.h"

struct vgpu_ticket {
    int index;       /* NVML index charged, or -1 when nothing was charged */
    uint64_t bytes;
};

/* Reserve `bytes` on `index` before the driver call. */
static CUresult vgpu_reserve(struct vgpu_ticket *ticket, int index, uint64_t bytes)
{
    ticket->index = -1;
    ticket->bytes = bytes;
    enum vgpu_memory_mode mode = vgpu_memory_mode();
    if (mode == VGPU_MEMORY_REFUSE) {
        vgpu_report_refusal();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (mode == VGPU_MEMORY_PASS || index < 0)
        return CUDA_SUCCESS;  /* without a device the driver itself refuses */
    if (vgpu_charge(index, bytes, VGPU_KIND_DATA, 0) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ticket->index = index;
    return CUDA_SUCCESS;
}

typedef CUresult (*vgpu_undo)(uint64_t key);

/* After the driver call: keep the charge and remember the object, or give the charge back. */
static CUresult vgpu_settle(const struct vgpu_ticket *ticket, CUresult rc,
                            enum vgpu_object_kind kind, uint64_t key, vgpu_undo undo)
{
    if (ticket->index < 0)
        return rc;
    if (rc == CUDA_SUCCESS &&
        vgpu_alloc_add(kind, key, ticket->index, ticket->bytes) == 0)
        return CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {  /* cannot remember it, so cannot account for its free */
        undo(key);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    vgpu_refund(ticket->index, ticket->bytes, VGPU_KIND_DATA);
    return rc;
}

/* Forward a release; give back what the object was charged once the driver has freed it. */
static CUresult vgpu_release(enum vgpu_object_kind kind, uint64_t key, CUresult rc_of_real,
                             int had, int dev, uint64_t bytes)
{
    if (!had)
        return rc_of_real;
    if (rc_of_real == CUDA_SUCCESS)
        vgpu_refund(dev, bytes, VGPU_KIND_DATA);
    else
        vgpu_alloc_add(kind, key, dev, bytes);  /* still alive: keep accounting for it */
    return rc_of_real;
}

/* Reserve `bytes` on `index`, make the driver call, then keep or refund the charge. */
#define VGPU_CHARGED(index, bytes, kind, key, undo, call)                                    \
    do {                                                                                   \
        struct vgpu_ticket ticket_;                                                        \
        CUresult rc_ = vgpu_reserve(&ticket_, (index), (bytes));                           \
        if (rc_ != CUDA_SUCCESS)                                                           \
            return rc_;                                                                    \
        rc_ = (call);                                                                      \
        return vgpu_settle(&ticket_, rc_, (kind), rc_ == CUDA_SUCCESS ? (uint64_t)(key) : 0, \
                           (undo));                                                        \
    } while (0)

/* Forget the object, make the driver's release call, refund on success. */
#define VGPU_RELEASED(kind, key, call)                                           \
    do {                                                                       \
        int dev_ = 0;                                                          \
        uint64_t bytes_ = 0, key_ = (uint64_t)(key);                           \
        int had_ = key_ != 0 && vgpu_alloc_take((kind), key_, &dev_, &bytes_) == 0; \
        return vgpu_release((kind), key_, (call), had_, dev_, bytes_);         \
    } while (0)

static CUresult vgpu_undo_pointer(uint64_t key)
{
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

VGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned int element_bytes)
{
    VGPU_ENTER(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
    uint64_t least;  /* the pitch is at least the width; the driver tells the rest */
    if (__builtin_mul_overflow((uint64_t)width, (uint64_t)height, &least))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct vgpu_ticket ticket;
    CUresult rc = vgpu_reserve(&ticket, vgpu_current_index(), least);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = vgpu_real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_bytes);
    if (rc == CUDA_SUCCESS && ticket.index >= 0 && *pitch > width) {
        uint64_t extra = (uint64_t)(*pitch - width) * height;
        if (vgpu_charge(ticket.index, extra, VGPU_KIND_DATA, 0) != 0) {
            vgpu_real.cuMemFree_v2(*dptr);
            vgpu_refund(ticket.index, least, VGPU_KIND_DATA);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ticket.bytes += extra;
    }
    return vgpu_settle(&ticket, rc, VGPU_OBJECT_POINTER, rc == CUDA_SUCCESS ? *dptr : 0,
                       vgpu_undo_pointer);
}

VGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    VGPU_ENTER(cuMemFree_v2, dptr);
    VGPU_RELEASED(VGPU_OBJECT_POINTER, dptr, vgpu_real.cuMemFree_v2(dptr));
}

/* Stream-ordered allocations are charged at their exact size, like cuMemAlloc. */
#define VGPU_ASYNC_ALLOC(name, ...)                                                    \
    {                                                                                  \
        VGPU_ENTER(name, __VA_ARGS__);                                                 \
        VGPU_CHARGED(vgpu_current_index(), bytes, VGPU_OBJECT_POINTER, *dptr,          \
                     vgpu_undo_pointer, vgpu_real.name(__VA_ARGS__));                  \
    }

VGPU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
VGPU_ASYNC_ALLOC(cuMemAllocAsync, dptr, bytes, stream)

VGPU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream)
VGPU_ASYNC_ALLOC(cuMemAllocAsync_ptsz, dptr, bytes, stream)

VGPU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                             CUstream stream)
VGPU_ASYNC_ALLOC(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream)

VGPU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                                  CUmemoryPool pool, CUstream stream)
VGPU_ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream)

#define VGPU_ASYNC_FREE(name)                                                    \
    {                                                                            \
        VGPU_ENTER(name, dptr, stream);                                          \
        VGPU_RELEASED(VGPU_OBJECT_POINTER, dptr, vgpu_real.name(dptr, stream));  \
    }

VGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
VGPU_ASYNC_FREE(cuMemFreeAsync)

VGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
VGPU_ASYNC_FREE(cuMemFreeAsync_ptsz)

VGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    VGPU_ENTER(cuMemCreate, handle, bytes, prop, flags);
    /* The physical location names the device, context or not. Host memory is not charged. */
    int index = prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                    ? vgpu_index_of(prop->location.id)
                    : -1;
    VGPU_CHARGED(index, bytes, VGPU_OBJECT_HANDLE, *handle, vgpu_undo_handle,
                 vgpu_real.cuMemCreate(handle, bytes, prop, flags));
}

VGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    VGPU_ENTER(cuMemRelease, handle);
    VGPU_RELEASED(VGPU_OBJECT_HANDLE, handle, vgpu_real.cuMemRelease(handle));
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

VGPU_EXPORT CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    VGPU_ENTER(cuArrayCreate_v2, array, desc);
    if (desc == NULL)
        return vgpu_real.cuArrayCreate_v2(array, desc);
    VGPU_CHARGED(vgpu_current_index(),
                 vgpu_array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels),
                 VGPU_OBJECT_ARRAY, (uintptr_t)*array, vgpu_undo_array,
                 vgpu_real.cuArrayCreate_v2(array, desc));
}

VGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    VGPU_ENTER(cuArray3DCreate_v2, array, desc);
    if (desc == NULL)
        return vgpu_real.cuArray3DCreate_v2(array, desc);
    VGPU_CHARGED(vgpu_current_index(),
                 vgpu_array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format,
                                  desc->NumChannels),
                 VGPU_OBJECT_ARRAY, (uintptr_t)*array, vgpu_undo_array,
                 vgpu_real.cuArray3DCreate_v2(array, desc));
}

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
