/* Stream-ordered memory pools. A pool keeps freed memory reserved on the device until it is
 * trimmed (cuMemPoolTrimTo, or at synchronisation down to its release threshold), so the
 * container is charged what each pool reserves, as the driver reports it, not what is
 * allocated from it. */
#ifndef VGPU_POOL_H
#define VGPU_POOL_H

#include <stdint.h>

#include "vgpu_cuda.h"

/* NVML index of the pool's device, VGPU_NOT_DEVICE for a host pool, -1 when unknown. */
int vgpu_pool_index(CUmemoryPool pool);
/* Re-read the pool's reservation and charge or refund the difference; `ticket` is what the
 * caller already charged for an allocation from it (now part of the reservation or not). */
void vgpu_pool_settle(CUmemoryPool pool, uint64_t ticket);
/* Settle every pool on `index`: the number of pools there. */
int vgpu_pools_refresh(int index);
/* Charge what graph memory nodes hold on each device (after a graph launch). */
void vgpu_graph_memory_settle(void);
/* After fork, in the child: the parent's pools are not ours. */
void vgpu_pools_forget(void);

#endif
