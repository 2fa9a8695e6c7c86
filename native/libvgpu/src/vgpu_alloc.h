/* This process's live device objects: what each cost and on which device, so a free gives
 * back exactly what its allocation charged. */
#ifndef VGPU_ALLOC_H
#define VGPU_ALLOC_H

#include <stdint.h>

#include "vgpu_region.h"

enum vgpu_object_kind {
    VGPU_OBJECT_POINTER, /* cuMemAlloc*, managed, pitch, async, pool */
    VGPU_OBJECT_HANDLE,  /* cuMemCreate handles */
    VGPU_OBJECT_ARRAY,
    VGPU_OBJECT_MIPMAP
};

/* 0 when recorded, -1 when out of host memory. */
int vgpu_alloc_add(enum vgpu_object_kind kind, uint64_t key, int dev, uint64_t bytes);
/* Remove the record: 0 and its device and size, or -1 when the object is not ours. */
int vgpu_alloc_take(enum vgpu_object_kind kind, uint64_t key, int *dev, uint64_t *bytes);

/* Forget every object of `dev` that lives in a context (not VMM handles): the bytes they had. */
uint64_t vgpu_alloc_drop_device(int dev);

void vgpu_alloc_lock_all(void);
void vgpu_alloc_unlock_all(void);
void vgpu_alloc_reset(void);

#endif
