/* SM limiting: a bounded token bucket per device, spent by kernel launches and refilled every
 * 100 ms by a watcher thread whose refill rate follows the container's measured utilisation. */
#ifndef VGPU_LIMITER_H
#define VGPU_LIMITER_H

#include <stdint.h>

/* Before every launch: honour the monitor's priority freeze, mark the container active
 * (recent_kernel, last_kernel_time) and wait for tokens when the device is SM-limited. */
void vgpu_kernel_gate(uint64_t blocks);
/* Start the watcher thread (once): it refills buckets, measures utilisation, reaps dead slots
 * and reconciles this process's memory with NVML's account of it. */
void vgpu_watcher_ensure(void);
/* Charge what NVML says this process holds beyond what libvgpu counted (vgpu_reconcile.c). */
void vgpu_reconcile(void);
/* After fork, in the child: no watcher thread, fresh buckets. */
void vgpu_limiter_forget(void);

#endif
