/* Charging an allocation: reserve before the driver call, then keep (and remember the object)
 * or refund. Shared by every file that hooks an allocation path. */
#ifndef VGPU_MEMORY_H
#define VGPU_MEMORY_H

#include <stdint.h>

#include "vgpu_alloc.h"
#include "vgpu_cuda.h"

struct vgpu_ticket {
    int index;       /* NVML index charged, or -1 when nothing was charged */
    uint64_t bytes;
};

typedef CUresult (*vgpu_undo)(uint64_t key);

/* Reserve `bytes` on `index` (an NVML index, or one of VGPU_NOT_DEVICE, VGPU_NO_CONTEXT, -1 for
 * a device that cannot be named: refused) before the driver call. */
CUresult vgpu_reserve(struct vgpu_ticket *ticket, int index, uint64_t bytes);
/* After the driver call: keep the charge and remember the object, or give the charge back. */
CUresult vgpu_settle(const struct vgpu_ticket *ticket, CUresult rc, enum vgpu_object_kind kind,
                     uint64_t key, uint64_t link, vgpu_undo undo);

/* After the driver's release call: give back what the object was charged, or (the call failed)
 * keep accounting for it. `had`: the object was ours. */
CUresult vgpu_release(enum vgpu_object_kind kind, uint64_t key, CUresult rc_of_real, int had,
                      int dev, uint64_t bytes);

/* Reserve, make the driver call, then keep or refund the charge. */
#define VGPU_CHARGED(index, bytes, kind, key, undo, call)                                    \
    do {                                                                                   \
        struct vgpu_ticket ticket_;                                                        \
        CUresult rc_ = vgpu_reserve(&ticket_, (index), (bytes));                           \
        if (rc_ != CUDA_SUCCESS)                                                           \
            return rc_;                                                                    \
        rc_ = (call);                                                                      \
        return vgpu_settle(&ticket_, rc_, (kind), rc_ == CUDA_SUCCESS ? (uint64_t)(key) : 0, \
                           0, (undo));                                                     \
    } while (0)

#endif
