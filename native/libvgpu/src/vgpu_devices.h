/* One index space for everything: the container's NVML index. CUDA ordinals are mapped to it by
 * UUID (so CUDA_VISIBLE_DEVICES reordering cannot charge the wrong device), and it indexes the
 * region's limit[], sm_limit[], uuids[] and used[] alike. */
#ifndef VGPU_DEVICES_H
#define VGPU_DEVICES_H

#include <stdint.h>

#include "vgpu_hooks.h"

#define VGPU_MAX_SNAPSHOT 256

struct vgpu_snapshot {
    unsigned count;
    nvmlProcessInfo_v1_t procs[VGPU_MAX_SNAPSHOT];
};

/* Where memory goes when it is not an NVML index: host memory (nothing to charge), or no
 * current context (the driver itself refuses). -1 is a device that cannot be named. */
#define VGPU_NOT_DEVICE (-2)
#define VGPU_NO_CONTEXT (-3)

/* NVML index of a CUDA device, or -1 when it is none of the 16 the region can describe. */
int vgpu_index_of(CUdevice device);
/* NVML index of the current context's device, VGPU_NO_CONTEXT without one. */
int vgpu_current_index(void);
/* NVML index of the device a stream belongs to (and its CUDA ordinal in `device`);
 * VGPU_NO_CONTEXT for a default stream without a current context, -1 when it cannot be told. */
int vgpu_stream_device(CUstream stream, CUdevice *device);
/* NVML handle of an index, or NULL without NVML. */
nvmlDevice_t vgpu_nvml_handle(int index);

/* Processes NVML sees on a device (empty without NVML). */
void vgpu_processes(int index, struct vgpu_snapshot *snapshot);
/* After this process created `context` on `index`: find our host pid (when not known yet; see
 * vgpu_devices.c, a probe allocation tells ours from other new processes), record it in our
 * slot, and return the device memory the context took, as NVML reports it for that pid (0 when
 * it cannot be told). */
uint64_t vgpu_discover_context(int index, const struct vgpu_snapshot *before, CUcontext context);

/* After fork, in the child: no contexts of its own yet. */
void vgpu_contexts_forget(void);

#endif
