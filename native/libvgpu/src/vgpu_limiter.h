/* SM limiting: a budget of device time per device, refilled every 100 ms at the limit's share
 * of the time and spent by each launch at its kernel's estimated duration. The watcher thread
 * learns the durations from the utilisation NVML measures, and this process's share of the
 * limit from the container's. */
#ifndef VGPU_LIMITER_H
#define VGPU_LIMITER_H

#include <stdint.h>

#include "vgpu_cuda.h"

/* Before every launch: honour the monitor's priority freeze, mark the container active
 * (recent_kernel, last_kernel_time) and wait for tokens when the device is SM-limited. */
void vgpu_kernel_gate(CUfunction function, uint64_t blocks, uint64_t threads_per_block);
/* The same for a graph launch, at the cost of the graph's kernels. */
void vgpu_graph_gate(CUgraphExec exec);
/* Read an executable graph's kernels (after instantiation), and forget them (destruction). */
void vgpu_graph_instantiated(CUgraphExec exec, CUgraph graph);
void vgpu_graph_destroyed(CUgraphExec exec);
/* Start the watcher thread (once): it refills buckets, measures utilisation, reaps dead slots
 * and reconciles this process's memory with NVML's account of it. */
void vgpu_watcher_ensure(void);
/* Charge what NVML says this process holds beyond what libvgpu counted (vgpu_reconcile.c). */
void vgpu_reconcile(void);
/* After fork, in the child: no watcher thread, fresh buckets. */
void vgpu_limiter_forget(void);

#endif
