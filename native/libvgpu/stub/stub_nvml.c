/* The fake NVML: per-device memory and a process table taken from the CUDA stub of this
 * process, utilisation from STUB_UTIL_FILE. */
#include <stdio.h>
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

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos)
{
    unsigned have = stub_has_context((int)device->index) ? 1 : 0;
    if (*count < have) {
        *count = have;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = have;
    if (have) {
        infos[0].pid = (unsigned)(getpid() + stub_pid_offset());
        infos[0].usedGpuMemory = stub_device_used((int)device->index);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long last_seen)
{
    (void)last_seen;
    if (!stub_has_context((int)device->index))
        return NVML_ERROR_NOT_FOUND;
    if (samples == NULL || *count < 1) {
        *count = 1;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    *count = 1;
    samples[0] = (nvmlProcessUtilizationSample_t){
        .pid = (unsigned)(getpid() + stub_pid_offset()),
        .timeStamp = (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000,
        .smUtil = (unsigned)stub_utilisation()};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    (void)device;
    utilization->gpu = (unsigned)stub_utilisation();
    utilization->memory = 0;
    return NVML_SUCCESS;
}
