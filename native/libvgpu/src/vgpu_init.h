/* Lazy, once-only initialisation and the per-thread reentrancy guard. */
#ifndef VGPU_INIT_H
#define VGPU_INIT_H

#include "vgpu_config.h"

/* Non-zero while libvgpu itself is calling into CUDA or NVML on this thread: hooks reached
 * then pass straight through. */
extern __thread int vgpu_inside;

/* Safe from any hook, any thread, any number of times (pthread_once). */
void vgpu_init_once(void);

const struct vgpu_config *vgpu_settings(void);

enum vgpu_memory_mode {
    VGPU_MEMORY_PASS,    /* no limits and no region: forward untouched */
    VGPU_MEMORY_REFUSE,  /* configuration or region broken while limits may apply */
    VGPU_MEMORY_ACCOUNT  /* charge every allocation in the region */
};

enum vgpu_memory_mode vgpu_memory_mode(void);
/* Log, once per process, why allocations are refused. */
void vgpu_report_refusal(void);

#endif
