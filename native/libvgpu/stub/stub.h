/* Test-only fake CUDA driver and NVML (never shipped). Behaviour is set by environment:
 *   STUB_DEVICE_COUNT (2)  STUB_DEVICE_MEM bytes (16 GiB)  STUB_CUDA_ORDER "1,0" (identity)
 *   STUB_CONTEXT_BYTES (0) memory a primary context takes   STUB_PID_OFFSET (0) NVML pid - pid
 *   STUB_UTIL_FILE         file holding the SM percent NVML reports, re-read on every query
 *                          (without it, NVML reports what the simulated GPU ran)
 *   STUB_NVML_PERIOD_MS (167) NVML's utilisation sample period
 *   STUB_FOREIGN "pid:MiB:from,..."  other containers' processes in NVML's process list
 *   STUB_OWN_FROM (1)      the query of NVML's process list from which our process shows
 *   STUB_GPU_FILE          a file in which processes share the simulated GPUs
 *   STUB_SM_COUNT (10)     multiprocessors per device
 *   STUB_LEDGER, STUB_LEDGER_LIMIT  a file shared by all processes recording the device-0
 *                          memory really allocated by live processes, and every moment it
 *                          exceeded the limit (the invariant libvgpu must keep). */
#ifndef STUB_H
#define STUB_H

#include <stdint.h>

#include "vgpu_cuda.h"

#define STUB_LEDGER_SLOTS 512

struct stub_ledger {
    uint64_t violations;
    uint64_t peak;
    struct {
        int32_t pid;
        int32_t padding;
        uint64_t start_time;
        uint64_t used;
    } procs[STUB_LEDGER_SLOTS];
};

/* Back doors for the test programs and the NVML stub. */
CUdeviceptr stub_untracked_alloc(size_t bytes);
int stub_owns(CUdeviceptr pointer);
unsigned long long stub_free_calls(void);
unsigned long long stub_launches(void);
unsigned long long stub_launched_blocks(void);
unsigned long long stub_ptsz_launches(void);
int stub_device_count(void);
unsigned long long stub_device_total(void);
unsigned long long stub_device_used(int physical);
int stub_has_context(int physical);
int stub_pid_offset(void);
void stub_uuid(int physical, unsigned char bytes[16]);
int stub_utilisation(void);
/* The simulated GPU: the real clock (CLOCK_REALTIME microseconds), and how long `physical` was
 * busy running kernels within [from, to). */
uint64_t stub_now_us(void);
uint64_t stub_busy_us(int physical, uint64_t from, uint64_t to);
/* The same for one process (its NVML pid), and the NVML pids that ran kernels since `from`. */
uint64_t stub_busy_pid_us(int physical, unsigned pid, uint64_t from, uint64_t to);
unsigned stub_busy_pids(int physical, uint64_t from, unsigned *pids, unsigned room);
int stub_physical_of(int ordinal);

#endif
