/* The fake NVML: per-device memory and a process table taken from the CUDA stub of this
 * process, utilisation from STUB_UTIL_FILE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stub.h"
#include "vgpu_nvml.h"

struct nvmlDevice_st {
    unsigned index;
};

static struct nvmlDevice_st stub_devices[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7},
                                                {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t result) { return result ? "stub error" : "success"; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = (unsigned)stub_device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (index >= (unsigned)stub_device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &stub_devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    unsigned char b[16];
    stub_uuid((int)device->index, b);
    snprintf(uuid, length,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    memory->total = stub_device_total();
    memory->used = stub_device_used((int)device->index);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = stub_device_total();
    memory->reserved = 1u << 20;
    memory->used = stub_device_used((int)device->index);
    memory->free = memory->total - memory->used - memory->reserved;
    return NVML_SUCCESS;
}

/* Other containers' processes on the card: STUB_FOREIGN="pid:MiB:from,...", each listed from
 * this process's `from`-th query of the process list on. Our own process is listed (with its
 * context) from the STUB_OWN_FROM-th query on (1): NVML may show a new context late. */
static unsigned stub_process_queries;

static long stub_number(const char *name, long fallback)
{
    const char *text = getenv(name);
    return text && *text ? strtol(text, NULL, 0) : fallback;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos)
{
    nvmlProcessInfo_v1_t found[16];
    unsigned have = 0, query = __atomic_add_fetch(&stub_process_queries, 1, __ATOMIC_RELAXED);
    if (stub_has_context((int)device->index) && query >= (unsigned)stub_number("STUB_OWN_FROM", 1))
        found[have++] = (nvmlProcessInfo_v1_t){(unsigned)(getpid() + stub_pid_offset()),
                                               stub_device_used((int)device->index)};
    const char *foreign = getenv("STUB_FOREIGN");
    while (foreign && *foreign && have < 16) {
        unsigned long pid = strtoul(foreign, (char **)&foreign, 10), mib = 0, from = 1;
        if (*foreign == ':')
            mib = strtoul(foreign + 1, (char **)&foreign, 10);
        if (*foreign == ':')
            from = strtoul(foreign + 1, (char **)&foreign, 10);
        if (query >= from)
            found[have++] = (nvmlProcessInfo_v1_t){(unsigned)pid, (unsigned long long)mib << 20};
        if (*foreign == ',')
            foreign++;
    }
    if (*count < have) {
        *count = have;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = have;
    memcpy(infos, found, have * sizeof *found);
    return NVML_SUCCESS;
}

/* Sample periods end at multiples of the period on the real clock. A sample's utilisation is
 * the busy share of the period that ends at its timestamp (STUB_UTIL_FILE overrides it). */
static uint64_t stub_period_us(void)
{
    return (uint64_t)stub_number("STUB_NVML_PERIOD_MS", 167) * 1000u;
}

static unsigned stub_sample(int physical, unsigned pid, uint64_t end)
{
    if (getenv("STUB_UTIL_FILE") != NULL)
        return (unsigned)stub_utilisation();
    uint64_t period = stub_period_us();
    return (unsigned)((stub_busy_pid_us(physical, pid, end - period, end) * 100 + period / 2) /
                      period);
}

/* A sample per period and process that ran kernels on the device (ours always). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long last_seen)
{
    int physical = (int)device->index;
    if (!stub_has_context(physical))
        return NVML_ERROR_NOT_FOUND;
    uint64_t period = stub_period_us(), last = stub_now_us() / period * period;
    unsigned periods = 0;  /* NVML keeps a short history */
    for (uint64_t end = last; end > last_seen && periods < 8 && end > period; end -= period)
        periods++;
    unsigned pids[16] = {(unsigned)(getpid() + stub_pid_offset())}, others[16];
    unsigned processes = 1, found = stub_busy_pids(physical, last - periods * period, others, 16);
    for (unsigned i = 0; i < found && processes < 16; i++)
        if (others[i] != pids[0])
            pids[processes++] = others[i];
    unsigned have = periods * processes;
    if (have == 0)
        return NVML_ERROR_NOT_FOUND;
    if (samples == NULL || *count < have) {
        *count = have;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < periods; i++) {
        uint64_t end = last - (uint64_t)i * period;
        for (unsigned p = 0; p < processes; p++)
            samples[i * processes + p] = (nvmlProcessUtilizationSample_t){
                .pid = pids[p], .timeStamp = end, .smUtil = stub_sample(physical, pids[p], end)};
    }
    *count = have;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    uint64_t period = stub_period_us();
    utilization->gpu = stub_sample((int)device->index, 0, stub_now_us() / period * period);
    utilization->memory = 0;
    return NVML_SUCCESS;
}
