/* The fake driver: a bump allocator per device, per-thread current context, launch counters and
 * a version- and flag-aware cuGetProcAddress. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stub.h"

#define STUB_MAX_DEVICES 16
#define STUB_MAX_OBJECTS 65536

enum stub_kind { STUB_POINTER, STUB_HANDLE, STUB_ARRAY, STUB_MIPMAP };

struct stub_object {
    uint64_t key;
    uint64_t bytes;
    int physical;
    enum stub_kind kind;
};

static pthread_mutex_t stub_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct stub_object stub_objects[STUB_MAX_OBJECTS];
static int stub_object_count;
static uint64_t stub_next_address = 0x700000000000ull;
static uint64_t stub_used[STUB_MAX_DEVICES];
static int stub_contexts[STUB_MAX_DEVICES];
static unsigned long long stub_frees, stub_launch_count, stub_block_count, stub_ptsz_count;
static __thread int stub_current = -1; /* CUDA ordinal of the current context */
static struct stub_ledger *stub_shared_ledger;
static int stub_ledger_index = -1;

static long stub_env(const char *name, long fallback)
{
    const char *text = getenv(name);
    return text && *text ? strtol(text, NULL, 0) : fallback;
}

int stub_device_count(void) { return (int)stub_env("STUB_DEVICE_COUNT", 2); }
unsigned long long stub_device_total(void)
{
    const char *text = getenv("STUB_DEVICE_MEM");
    return text && *text ? strtoull(text, NULL, 0) : 16ull << 30;
}
int stub_pid_offset(void) { return (int)stub_env("STUB_PID_OFFSET", 0); }
unsigned long long stub_free_calls(void) { return stub_frees; }
unsigned long long stub_launches(void) { return stub_launch_count; }
unsigned long long stub_launched_blocks(void) { return stub_block_count; }
unsigned long long stub_ptsz_launches(void) { return stub_ptsz_count; }
int stub_has_context(int physical) { return stub_contexts[physical] > 0; }

unsigned long long stub_device_used(int physical)
{
    return stub_used[physical] + (stub_has_context(physical) ? stub_env("STUB_CONTEXT_BYTES", 0) : 0);
}

int stub_utilisation(void)
{
    const char *path = getenv("STUB_UTIL_FILE");
    FILE *file = path ? fopen(path, "r") : NULL;
    int percent = 0;
    if (file) {
        if (fscanf(file, "%d", &percent) != 1)
            percent = 0;
        fclose(file);
    }
    return percent;
}

/* STUB_UUIDS (comma-separated GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as a container runtime
 * would expose the cards it was given) names device `physical`; the 32 hex digits of its entry
 * are the bytes. Without it, or for a malformed entry: byte i is 0x10 * i + physical. */
static int stub_named_uuid(int physical, unsigned char bytes[16])
{
    const char *text = getenv("STUB_UUIDS");
    for (int skip = physical; text && skip > 0; skip--) {
        text = strchr(text, ',');
        text = text ? text + 1 : NULL;
    }
    if (!text || strncmp(text, "GPU-", 4) != 0)
        return 0;
    int digits = 0;
    for (const char *c = text + 4; *c && *c != ',' && digits < 32; c++) {
        if (*c == '-')
            continue;
        char pair[2] = {*c, 0};
        char *end;
        long nibble = strtol(pair, &end, 16);
        if (*end)
            return 0;
        bytes[digits / 2] = (unsigned char)(digits % 2 ? bytes[digits / 2] | nibble : nibble << 4);
        digits++;
    }
    return digits == 32;
}

void stub_uuid(int physical, unsigned char bytes[16])
{
    if (stub_named_uuid(physical, bytes))
        return;
    for (int i = 0; i < 16; i++)
        bytes[i] = (unsigned char)(0x10 * (i % 16) + physical);
}

/* CUDA ordinal -> physical device (NVML index), from STUB_CUDA_ORDER. */
static int stub_physical(int ordinal)
{
    const char *order = getenv("STUB_CUDA_ORDER");
    if (order == NULL || *order == '\0')
        return ordinal;
    for (int k = 0; *order; k++) {
        int value = (int)strtol(order, (char **)&order, 10);
        if (k == ordinal)
            return value;
        if (*order == ',')
            order++;
    }
    return ordinal;
}

static int stub_valid_device(CUdevice device) { return device >= 0 && device < stub_device_count(); }

/* --- the cross-process ledger ------------------------------------------------------------ */

static uint64_t stub_start_time(int pid, int *alive)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    *alive = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0)
        return 0;
    text[len] = '\0';
    char *field = strrchr(text, ')') + 2;
    *alive = field[0] != 'Z' && field[0] != 'X';
    for (int skip = 0; skip < 19 && field; skip++)
        field = strchr(field, ' ') ? strchr(field, ' ') + 1 : NULL;
    return field ? strtoull(field, NULL, 10) : 0;
}

static void stub_ledger_account(int physical, int64_t delta)
{
    const char *path = getenv("STUB_LEDGER");
    if (physical != 0 || path == NULL)
        return;
    if (stub_shared_ledger == NULL) {
        int fd = open(path, O_RDWR | O_CREAT, 0666);
        if (fd < 0 || ftruncate(fd, sizeof(struct stub_ledger)) != 0)
            abort();
        stub_shared_ledger = mmap(NULL, sizeof(struct stub_ledger), PROT_READ | PROT_WRITE,
                                  MAP_SHARED, fd, 0);
        close(fd);
    }
    struct stub_ledger *ledger = stub_shared_ledger;
    if (stub_ledger_index < 0 || ledger->procs[stub_ledger_index].pid != getpid()) {
        int alive;
        for (int i = 0; i < STUB_LEDGER_SLOTS; i++) {
            int32_t expected = 0;
            if (__atomic_compare_exchange_n(&ledger->procs[i].pid, &expected, getpid(), 0,
                                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                ledger->procs[i].start_time = stub_start_time(getpid(), &alive);
                ledger->procs[i].used = 0;
                stub_ledger_index = i;
                break;
            }
        }
        if (stub_ledger_index < 0)
            abort();
    }
    __atomic_add_fetch(&ledger->procs[stub_ledger_index].used, (uint64_t)delta, __ATOMIC_SEQ_CST);
    if (delta <= 0)
        return;
    uint64_t live = 0;
    for (int i = 0; i < STUB_LEDGER_SLOTS; i++) {
        int pid = __atomic_load_n(&ledger->procs[i].pid, __ATOMIC_SEQ_CST), alive;
        if (pid == 0)
            continue;
        uint64_t start = stub_start_time(pid, &alive);
        if (alive && start == ledger->procs[i].start_time)
            live += __atomic_load_n(&ledger->procs[i].used, __ATOMIC_SEQ_CST);
    }
    uint64_t limit = strtoull(getenv("STUB_LEDGER_LIMIT") ? getenv("STUB_LEDGER_LIMIT") : "0",
                              NULL, 0);
    uint64_t peak = __atomic_load_n(&ledger->peak, __ATOMIC_SEQ_CST);
    while (live > peak && !__atomic_compare_exchange_n(&ledger->peak, &peak, live, 0,
                                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    if (limit != 0 && live > limit)
        __atomic_add_fetch(&ledger->violations, 1, __ATOMIC_SEQ_CST);
}

/* --- objects ----------------------------------------------------------------------------- */

static CUresult stub_create(enum stub_kind kind, int physical, uint64_t bytes, uint64_t *key)
{
    pthread_mutex_lock(&stub_mutex);
    if (stub_device_used(physical) + bytes > stub_device_total() ||
        stub_object_count == STUB_MAX_OBJECTS) {
        pthread_mutex_unlock(&stub_mutex);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *key = stub_next_address;
    stub_next_address += ((bytes + 511) & ~511ull) + 512;
    stub_objects[stub_object_count++] = (struct stub_object){*key, bytes, physical, kind};
    stub_used[physical] += bytes;
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, (int64_t)bytes);
    return CUDA_SUCCESS;
}

static CUresult stub_destroy(enum stub_kind kind, uint64_t key)
{
    pthread_mutex_lock(&stub_mutex);
    stub_frees++;
    for (int i = stub_object_count - 1; i >= 0; i--) {
        if (stub_objects[i].key == key && stub_objects[i].kind == kind) {
            struct stub_object gone = stub_objects[i];
            stub_objects[i] = stub_objects[--stub_object_count];
            stub_used[gone.physical] -= gone.bytes;
            pthread_mutex_unlock(&stub_mutex);
            stub_ledger_account(gone.physical, -(int64_t)gone.bytes);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_ERROR_INVALID_VALUE;
}

int stub_owns(CUdeviceptr pointer)
{
    pthread_mutex_lock(&stub_mutex);
    int found = 0;
    for (int i = 0; i < stub_object_count && !found; i++)
        found = stub_objects[i].key == pointer && stub_objects[i].kind == STUB_POINTER;
    pthread_mutex_unlock(&stub_mutex);
    return found;
}

static CUresult stub_alloc_current(CUdeviceptr *pointer, uint64_t bytes)
{
    if (pointer == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t key;
    CUresult rc = stub_create(STUB_POINTER, stub_physical(stub_current), bytes, &key);
    if (rc == CUDA_SUCCESS)
        *pointer = key;
    return rc;
}

CUdeviceptr stub_untracked_alloc(size_t bytes)
{
    CUdeviceptr pointer = 0;
    stub_alloc_current(&pointer, bytes);
    return pointer;
}

/* --- the driver API ---------------------------------------------------------------------- */

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = stub_device_count(); return CUDA_SUCCESS; }

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!stub_valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        *value = (int)stub_env("STUB_SM_COUNT", 10);
    else if (attribute == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
        *value = 2048;
    else
        *value = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    stub_uuid(stub_physical(device), (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = stub_device_total();
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&stub_mutex);
    stub_contexts[stub_physical(device)]++;
    pthread_mutex_unlock(&stub_mutex);
    *context = (CUcontext)(uintptr_t)(0x1000 + device);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    if (!stub_valid_device(device) || stub_contexts[stub_physical(device)] == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&stub_mutex);
    stub_contexts[stub_physical(device)]--;
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    int physical = stub_physical(device);
    pthread_mutex_lock(&stub_mutex);
    for (int i = stub_object_count - 1; i >= 0; i--) {
        if (stub_objects[i].physical == physical && stub_objects[i].kind != STUB_HANDLE) {
            stub_used[physical] -= stub_objects[i].bytes;
            stub_objects[i] = stub_objects[--stub_object_count];
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext context)
{
    stub_current = context ? (int)((uintptr_t)context - 0x1000) : -1;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *context)
{
    *context = stub_current < 0 ? NULL : (CUcontext)(uintptr_t)(0x1000 + stub_current);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = stub_current;
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *total = stub_device_total();
    *free = *total - stub_device_used(stub_physical(stub_current));
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes) { return stub_alloc_current(pointer, bytes); }

CUresult cuMemAllocManaged(CUdeviceptr *pointer, size_t bytes, unsigned int flags)
{
    (void)flags;
    return stub_alloc_current(pointer, bytes);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *pointer, size_t *pitch, size_t width, size_t height,
                            unsigned int element_bytes)
{
    if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (width + 511) & ~(size_t)511;
    return stub_alloc_current(pointer, (uint64_t)*pitch * height);
}

CUresult cuMemFree_v2(CUdeviceptr pointer)
{
    return pointer == 0 ? CUDA_SUCCESS : stub_destroy(STUB_POINTER, pointer);
}

CUresult cuMemAllocAsync(CUdeviceptr *pointer, size_t bytes, CUstream stream)
{
    (void)stream;
    return stub_alloc_current(pointer, bytes);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *pointer, size_t bytes, CUstream stream)
{
    stub_ptsz_count++;
    return cuMemAllocAsync(pointer, bytes, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *pointer, size_t bytes, CUmemoryPool pool,
                                 CUstream stream)
{
    (void)pool;
    return cuMemAllocAsync(pointer, bytes, stream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *pointer, size_t bytes, CUmemoryPool pool,
                                      CUstream stream)
{
    stub_ptsz_count++;
    return cuMemAllocFromPoolAsync(pointer, bytes, pool, stream);
}

CUresult cuMemFreeAsync(CUdeviceptr pointer, CUstream stream)
{
    (void)stream;
    return cuMemFree_v2(pointer);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr pointer, CUstream stream)
{
    stub_ptsz_count++;
    return cuMemFreeAsync(pointer, stream);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !stub_valid_device(prop->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult rc = stub_create(STUB_HANDLE, stub_physical(prop->location.id), bytes, &key);
    if (rc == CUDA_SUCCESS)
        *handle = key;
    return rc;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return stub_destroy(STUB_HANDLE, handle); }

static CUresult stub_array(enum stub_kind kind, uint64_t bytes, uint64_t *key)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    return stub_create(kind, stub_physical(stub_current), bytes, key);
}

CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    uint64_t key;
    CUresult rc = stub_array(STUB_ARRAY, (uint64_t)desc->Width * (desc->Height ? desc->Height : 1) *
                                             desc->NumChannels, &key);
    if (rc == CUDA_SUCCESS)
        *array = (CUarray)(uintptr_t)key;
    return rc;
}

CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    uint64_t key;
    CUresult rc = stub_array(STUB_ARRAY, (uint64_t)desc->Width * (desc->Height ? desc->Height : 1) *
                                             (desc->Depth ? desc->Depth : 1) * desc->NumChannels,
                             &key);
    if (rc == CUDA_SUCCESS)
        *array = (CUarray)(uintptr_t)key;
    return rc;
}

CUresult cuArrayDestroy(CUarray array) { return stub_destroy(STUB_ARRAY, (uint64_t)(uintptr_t)array); }

CUresult cuMipmappedArrayCreate(CUmipmappedArray *mipmap, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                unsigned int levels)
{
    uint64_t key;
    CUresult rc = stub_array(STUB_MIPMAP, (uint64_t)desc->Width * (desc->Height ? desc->Height : 1) *
                                              desc->NumChannels * levels, &key);
    if (rc == CUDA_SUCCESS)
        *mipmap = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap)
{
    return stub_destroy(STUB_MIPMAP, (uint64_t)(uintptr_t)mipmap);
}

static CUresult stub_launch(uint64_t blocks)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    __atomic_add_fetch(&stub_launch_count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&stub_block_count, blocks, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void **params, void **extra)
{
    (void)f, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params, (void)extra;
    return stub_launch((uint64_t)gx * gy * gz);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream stream, void **params, void **extra)
{
    stub_ptsz_count++;
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    (void)f, (void)params, (void)extra;
    return stub_launch((uint64_t)config->gridDimX * config->gridDimY * config->gridDimZ);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra)
{
    stub_ptsz_count++;
    return cuLaunchKernelEx(config, f, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void **params)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, NULL);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void **params)
{
    stub_ptsz_count++;
    return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params);
}

CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream)
{
    (void)graph, (void)stream;
    return stub_launch(1);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream)
{
    stub_ptsz_count++;
    return cuGraphLaunch(graph, stream);
}

/* Two ABIs under one base name, as in the real driver. */
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s)
{
    (void)p, (void)n, (void)d, (void)s;
    return CUDA_SUCCESS;
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned int f, CUstream s)
{
    (void)p, (void)n, (void)l, (void)f, (void)s;
    return CUDA_SUCCESS;
}

CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise a, CUdevice d)
{
    (void)p, (void)n, (void)a, (void)d;
    return CUDA_SUCCESS;
}

CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise a, CUmemLocation l)
{
    (void)p, (void)n, (void)a, (void)l;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);

struct stub_entry {
    const char *name;
    int since;
    void *legacy;
    void *per_thread;
};

#define STUB_ENTRY(name, since, legacy, per_thread) {name, since, (void *)(legacy), (void *)(per_thread)}

static const struct stub_entry stub_table[] = {
    STUB_ENTRY("cuInit", 2000, cuInit, NULL),
    STUB_ENTRY("cuDriverGetVersion", 2020, cuDriverGetVersion, NULL),
    STUB_ENTRY("cuGetProcAddress", 11030, cuGetProcAddress, NULL),
    STUB_ENTRY("cuGetProcAddress", 12000, cuGetProcAddress_v2, NULL),
    STUB_ENTRY("cuDeviceGet", 2000, cuDeviceGet, NULL),
    STUB_ENTRY("cuDeviceGetCount", 2000, cuDeviceGetCount, NULL),
    STUB_ENTRY("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute, NULL),
    STUB_ENTRY("cuDeviceGetUuid", 9020, cuDeviceGetUuid, NULL),
    STUB_ENTRY("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2, NULL),
    STUB_ENTRY("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2, NULL),
    STUB_ENTRY("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain, NULL),
    STUB_ENTRY("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2, NULL),
    STUB_ENTRY("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2, NULL),
    STUB_ENTRY("cuCtxSetCurrent", 4000, cuCtxSetCurrent, NULL),
    STUB_ENTRY("cuCtxGetDevice", 2000, cuCtxGetDevice, NULL),
    STUB_ENTRY("cuMemGetInfo", 3020, cuMemGetInfo_v2, NULL),
    STUB_ENTRY("cuMemAlloc", 3020, cuMemAlloc_v2, NULL),
    STUB_ENTRY("cuMemAllocPitch", 3020, cuMemAllocPitch_v2, NULL),
    STUB_ENTRY("cuMemAllocManaged", 6000, cuMemAllocManaged, NULL),
    STUB_ENTRY("cuMemFree", 3020, cuMemFree_v2, NULL),
    STUB_ENTRY("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    STUB_ENTRY("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync,
               cuMemAllocFromPoolAsync_ptsz),
    STUB_ENTRY("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    STUB_ENTRY("cuMemCreate", 10020, cuMemCreate, NULL),
    STUB_ENTRY("cuMemRelease", 10020, cuMemRelease, NULL),
    STUB_ENTRY("cuArrayCreate", 3020, cuArrayCreate_v2, NULL),
    STUB_ENTRY("cuArray3DCreate", 3020, cuArray3DCreate_v2, NULL),
    STUB_ENTRY("cuArrayDestroy", 2000, cuArrayDestroy, NULL),
    STUB_ENTRY("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate, NULL),
    STUB_ENTRY("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy, NULL),
    STUB_ENTRY("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    STUB_ENTRY("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    STUB_ENTRY("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel,
               cuLaunchCooperativeKernel_ptsz),
    STUB_ENTRY("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    STUB_ENTRY("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync, NULL),
    STUB_ENTRY("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, NULL),
    STUB_ENTRY("cuMemAdvise", 8000, cuMemAdvise, NULL),
    STUB_ENTRY("cuMemAdvise", 12020, cuMemAdvise_v2, NULL),
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    const struct stub_entry *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof stub_table / sizeof stub_table[0]; i++) {
        if (strcmp(stub_table[i].name, symbol) != 0)
            continue;
        known = 1;
        if (stub_table[i].since <= version && (best == NULL || stub_table[i].since > best->since))
            best = &stub_table[i];
    }
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                               : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (best == NULL) {
        *pfn = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->per_thread;
    *pfn = per_thread ? best->per_thread : best->legacy;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
