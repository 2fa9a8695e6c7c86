/* This process's live device objects: what each cost and on which device, so a free gives
 * back exactly what its allocation charged. */
#ifndef VGPU_ALLOC_H
#define VGPU_ALLOC_H

#include <stdint.h>

#include "vgpu_region.h"

enum vgpu_object_kind {
    VGPU_OBJECT_POINTER, /* cuMemAlloc*, managed, pitch */
    VGPU_OBJECT_POOLED,  /* stream-ordered: charged through its pool; `link` is the pool */
    VGPU_OBJECT_HANDLE,  /* cuMemCreate handles; `link` counts references */
    VGPU_OBJECT_ARRAY,
    VGPU_OBJECT_MIPMAP,
    VGPU_OBJECT_IMPORT,   /* IPC and pool imports: another process's memory, mapped here */
    VGPU_OBJECT_EXTERNAL, /* cuImportExternalMemory */
    VGPU_OBJECT_CONTEXT,  /* cuCtxCreate contexts */
    VGPU_OBJECT_LIMIT     /* a context's heap, FIFO or stack reservation beyond its default */
};

/* 0 when recorded, -1 when out of host memory. */
int vgpu_alloc_add(enum vgpu_object_kind kind, uint64_t key, int dev, uint64_t bytes,
                   uint64_t link);
/* Remove the record: 0 and its device, size and link, or -1 when the object is not ours. */
int vgpu_alloc_take(enum vgpu_object_kind kind, uint64_t key, int *dev, uint64_t *bytes,
                    uint64_t *link);
/* Add `delta` to a handle's reference count. The count left, or -1 when the handle is not
 * ours; at 0 the record is gone and `dev` and `bytes` say what it was charged. */
int64_t vgpu_alloc_ref(uint64_t key, int64_t delta, int *dev, uint64_t *bytes);

/* A VMM mapping: which handle backs [va, va + size). A mapping of a handle imported from
 * another process is charged itself (`charged` on NVML index `index`). */
struct vgpu_mapping {
    uint64_t va;
    uint64_t size;
    uint64_t handle;
    uint64_t charged;
    int index;
};

int vgpu_mapping_add(const struct vgpu_mapping *mapping);
/* Forget every mapping that starts inside [va, va + size), calling `each` for each (after the
 * table's lock is dropped). */
void vgpu_mapping_remove(uint64_t va, uint64_t size, void (*each)(const struct vgpu_mapping *));

/* Forget every object of `dev` that lives in a context (not VMM handles): the bytes they had. */
uint64_t vgpu_alloc_drop_device(int dev);

void vgpu_alloc_lock_all(void);
void vgpu_alloc_unlock_all(void);
void vgpu_alloc_reset(void);

#endif
