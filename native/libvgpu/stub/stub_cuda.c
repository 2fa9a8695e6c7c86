/* The fake driver: a bump allocator per device, per-thread current context, launch counters and
 * a version- and flag-aware cuGetProcAddress. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stub.h"

#define STUB_MAX_DEVICES 16
#define STUB_MAX_OBJECTS 65536

/* STUB_POOLED: a stream-ordered allocation, carved from its pool's reservation (the pool, not
 * the pointer, holds device memory). STUB_MAPPING: a VMM mapping, holding a reference on its
 * handle. STUB_HANDLE: physical VMM memory, freed when the last reference goes. */
enum stub_kind { STUB_POINTER, STUB_HANDLE, STUB_ARRAY, STUB_MIPMAP, STUB_POOLED, STUB_MAPPING };

struct stub_object {
    uint64_t key;
    uint64_t bytes;
    int physical;
    enum stub_kind kind;
    int refs;      /* STUB_HANDLE: creation + mappings + retains */
    uint64_t link; /* STUB_POOLED: pool index; STUB_MAPPING: handle key */
};

/* A stream-ordered memory pool: `reserved` is device memory the pool holds, `in_use` what is
 * handed out. Frees return memory to the pool; synchronisation trims the pool down to its
 * release threshold, cuMemPoolTrimTo to what the caller asks. */
#define STUB_MAX_POOLS 64
#define STUB_POOL_GRANULE (2ull << 20)

struct stub_pool {
    int live;
    int physical;
    uint64_t reserved;
    uint64_t in_use;
    uint64_t threshold;
};

static pthread_mutex_t stub_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct stub_object stub_objects[STUB_MAX_OBJECTS];
static int stub_object_count;
static uint64_t stub_next_address = 0x700000000000ull;
static uint64_t stub_used[STUB_MAX_DEVICES];
static int stub_contexts[STUB_MAX_DEVICES];     /* primary context retains */
static int stub_created[STUB_MAX_DEVICES];      /* contexts from cuCtxCreate, each its own cost */
static unsigned stub_context_serial;
static uint64_t stub_graph_reserved[STUB_MAX_DEVICES]; /* graph memory nodes' pool */
static unsigned long long stub_frees, stub_launch_count, stub_block_count, stub_ptsz_count;
static __thread int stub_current = -1; /* CUDA ordinal of the current context */
static struct stub_pool stub_pools[STUB_MAX_POOLS]; /* [0..15]: each device's default pool */
static int stub_current_pool[STUB_MAX_DEVICES];      /* per physical device; -1: the default */
static uint64_t stub_next_va = 0x7f0000000000ull;
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
int stub_has_context(int physical) { return stub_contexts[physical] > 0 || stub_created[physical] > 0; }

unsigned long long stub_device_used(int physical)
{
    unsigned long long contexts = (stub_contexts[physical] > 0) + (unsigned)stub_created[physical];
    return stub_used[physical] + stub_graph_reserved[physical] +
           contexts * (unsigned long long)stub_env("STUB_CONTEXT_BYTES", 0);
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

/* Device memory really taken (or given back) on `physical`; caller holds stub_mutex. */
static int stub_take_memory(int physical, uint64_t bytes)
{
    if (stub_device_used(physical) + bytes > stub_device_total())
        return -1;
    stub_used[physical] += bytes;
    return 0;
}

static int stub_add_object(struct stub_object object)
{
    if (stub_object_count == STUB_MAX_OBJECTS)
        return -1;
    stub_objects[stub_object_count++] = object;
    return 0;
}

static uint64_t stub_new_address(uint64_t bytes)
{
    uint64_t key = stub_next_address;
    stub_next_address += ((bytes + 511) & ~511ull) + 512;
    return key;
}

static CUresult stub_create(enum stub_kind kind, int physical, uint64_t bytes, uint64_t *key)
{
    pthread_mutex_lock(&stub_mutex);
    if (stub_object_count == STUB_MAX_OBJECTS || stub_take_memory(physical, bytes) != 0) {
        pthread_mutex_unlock(&stub_mutex);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *key = stub_new_address(bytes);
    stub_add_object((struct stub_object){*key, bytes, physical, kind, 1, 0});
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, (int64_t)bytes);
    return CUDA_SUCCESS;
}

static int stub_find(enum stub_kind kind, uint64_t key)
{
    for (int i = stub_object_count - 1; i >= 0; i--)
        if (stub_objects[i].key == key && stub_objects[i].kind == kind)
            return i;
    return -1;
}

/* Drop one reference of object `i`; at the last, free it. Caller holds stub_mutex. Returns the
 * device bytes freed (the caller accounts them in the ledger after unlocking). */
static uint64_t stub_unref(int i, int *physical)
{
    *physical = stub_objects[i].physical;
    if (--stub_objects[i].refs > 0)
        return 0;
    struct stub_object gone = stub_objects[i];
    stub_objects[i] = stub_objects[--stub_object_count];
    if (gone.kind == STUB_POOLED) {
        stub_pools[gone.link].in_use -= gone.bytes;  /* back to the pool, still reserved */
        return 0;
    }
    if (gone.kind == STUB_MAPPING)
        return 0;
    stub_used[gone.physical] -= gone.bytes;
    return gone.bytes;
}

static CUresult stub_destroy(enum stub_kind kind, uint64_t key)
{
    pthread_mutex_lock(&stub_mutex);
    stub_frees++;
    int i = stub_find(kind, key), physical = 0;
    uint64_t freed = i >= 0 ? stub_unref(i, &physical) : 0;
    pthread_mutex_unlock(&stub_mutex);
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    stub_ledger_account(physical, -(int64_t)freed);
    return CUDA_SUCCESS;
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

static uint64_t stub_pool_trim(struct stub_pool *pool, uint64_t keep);

/* A fork child holds no device memory and no context of its parent's (as with the real
 * driver, where the child cannot use them at all). */
static void stub_forget_parent(void)
{
    pthread_mutex_init(&stub_mutex, NULL);
    stub_object_count = 0;
    stub_ledger_index = -1;
    for (int i = 0; i < STUB_MAX_DEVICES; i++) {
        stub_used[i] = 0;
        stub_contexts[i] = 0;
        stub_created[i] = 0;
        stub_graph_reserved[i] = 0;
        stub_current_pool[i] = 0;
    }
    for (int i = 0; i < STUB_MAX_POOLS; i++)
        stub_pools[i] = (struct stub_pool){0};
}

__attribute__((constructor)) static void stub_start(void)
{
    pthread_atfork(NULL, NULL, stub_forget_parent);
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
    int64_t freed = 0;
    pthread_mutex_lock(&stub_mutex);
    /* VMM handles and their mappings outlive the context; everything else goes. */
    for (int i = stub_object_count - 1; i >= 0; i--) {
        enum stub_kind kind = stub_objects[i].kind;
        if (stub_objects[i].physical != physical || kind == STUB_HANDLE || kind == STUB_MAPPING)
            continue;
        if (kind != STUB_POOLED)
            freed += (int64_t)stub_objects[i].bytes;
        if (kind != STUB_POOLED)
            stub_used[physical] -= stub_objects[i].bytes;
        stub_objects[i] = stub_objects[--stub_object_count];
    }
    for (int i = 0; i < STUB_MAX_POOLS; i++) {
        if (stub_pools[i].live && stub_pools[i].physical == physical) {
            stub_pools[i].in_use = 0;
            freed += (int64_t)stub_pool_trim(&stub_pools[i], 0);
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, -freed);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *context);

CUresult cuCtxSetCurrent(CUcontext context)
{
    stub_current = context ? (int)(((uintptr_t)context - 0x1000) & 0xff) : -1;
    return CUDA_SUCCESS;
}

/* Contexts of our own: 0x1000 + ordinal + 0x100 * serial (primary ones have serial 0). */
CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device)
{
    (void)flags;
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    int physical = stub_physical(device);
    pthread_mutex_lock(&stub_mutex);
    unsigned long long cost = (unsigned long long)stub_env("STUB_CONTEXT_BYTES", 0);
    if (stub_device_used(physical) + cost > stub_device_total()) {
        pthread_mutex_unlock(&stub_mutex);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    stub_created[physical]++;
    unsigned serial = ++stub_context_serial;
    pthread_mutex_unlock(&stub_mutex);
    *context = (CUcontext)(uintptr_t)(0x1000 + (unsigned)device + 0x100 * serial);
    stub_current = device;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext *context, unsigned int flags, CUdevice device)
{
    return cuCtxCreate_v2(context, flags, device);
}

CUresult cuCtxCreate_v3(CUcontext *context, CUexecAffinityParam *params, int count,
                        unsigned int flags, CUdevice device)
{
    (void)params, (void)count;
    return cuCtxCreate_v2(context, flags, device);
}

CUresult cuCtxCreate_v4(CUcontext *context, CUctxCreateParams *params, unsigned int flags,
                        CUdevice device)
{
    (void)params;
    return cuCtxCreate_v2(context, flags, device);
}

CUresult cuCtxDestroy_v2(CUcontext context)
{
    uintptr_t value = (uintptr_t)context;
    if (value < 0x1100)
        return CUDA_ERROR_INVALID_CONTEXT;
    int ordinal = (int)((value - 0x1000) & 0xff);
    pthread_mutex_lock(&stub_mutex);
    stub_created[stub_physical(ordinal)]--;
    pthread_mutex_unlock(&stub_mutex);
    if (stub_current == ordinal)
        stub_current = -1;
    return CUDA_SUCCESS;
}

/* Per-context limits that reserve device memory: heap and printf FIFO bytes, stack bytes per
 * thread for every resident thread (threads per SM x SMs). */
static size_t stub_limits[3] = {1024, 1u << 20, 8u << 20};

static uint64_t stub_limit_bytes(CUlimit limit, size_t value)
{
    if (limit == CU_LIMIT_STACK_SIZE)
        return (uint64_t)value * 2048 * (uint64_t)stub_env("STUB_SM_COUNT", 10);
    return value;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((int)limit < 0 || (int)limit > 2)
        return CUDA_SUCCESS;
    int physical = stub_physical(stub_current);
    int64_t delta = (int64_t)stub_limit_bytes(limit, value) -
                    (int64_t)stub_limit_bytes(limit, stub_limits[limit]);
    pthread_mutex_lock(&stub_mutex);
    if (delta > 0 && stub_take_memory(physical, (uint64_t)delta) != 0) {
        pthread_mutex_unlock(&stub_mutex);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (delta < 0)
        stub_used[physical] -= (uint64_t)-delta;
    stub_limits[limit] = value;
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, delta);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *value = (int)limit >= 0 && (int)limit <= 2 ? stub_limits[limit] : 0;
    return CUDA_SUCCESS;
}

static __thread int stub_pushed[8], stub_push_depth;

CUresult cuCtxPushCurrent_v2(CUcontext context)
{
    if (stub_push_depth == 8)
        return CUDA_ERROR_INVALID_VALUE;
    stub_pushed[stub_push_depth++] = stub_current;
    return cuCtxSetCurrent(context);
}

CUresult cuCtxPopCurrent_v2(CUcontext *context)
{
    if (stub_push_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    cuCtxGetCurrent(context);
    stub_current = stub_pushed[--stub_push_depth];
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
    if (pointer == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&stub_mutex);
    /* Stream-ordered allocations, and pointers imported from another process's pool, are
     * freed like any pointer. */
    enum stub_kind kind = stub_find(STUB_POOLED, pointer) >= 0    ? STUB_POOLED
                          : stub_find(STUB_MAPPING, pointer) >= 0 ? STUB_MAPPING
                                                                  : STUB_POINTER;
    pthread_mutex_unlock(&stub_mutex);
    return stub_destroy(kind, pointer);
}

/* --- streams and stream-ordered pools ----------------------------------------------------- */

#define STUB_STREAM_BASE 0x3000u

/* The CUDA ordinal a stream belongs to: its creator's context, or for the default streams the
 * current context. */
static CUresult stub_stream_ordinal(CUstream stream, int *ordinal)
{
    uintptr_t value = (uintptr_t)stream;
    if (value == 0 || value == (uintptr_t)CU_STREAM_LEGACY || value == (uintptr_t)CU_STREAM_PER_THREAD) {
        if (stub_current < 0)
            return CUDA_ERROR_INVALID_CONTEXT;
        *ordinal = stub_current;
        return CUDA_SUCCESS;
    }
    if (value < STUB_STREAM_BASE || !stub_valid_device((CUdevice)(value - STUB_STREAM_BASE)))
        return CUDA_ERROR_INVALID_HANDLE;
    *ordinal = (int)(value - STUB_STREAM_BASE);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    (void)flags;
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *stream = (CUstream)(uintptr_t)(STUB_STREAM_BASE + (unsigned)stub_current);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) { (void)stream; return CUDA_SUCCESS; }

CUresult cuStreamGetDevice(CUstream stream, CUdevice *device)
{
    int ordinal;
    CUresult rc = stub_stream_ordinal(stream, &ordinal);
    if (rc == CUDA_SUCCESS)
        *device = ordinal;
    return rc;
}

CUresult cuStreamGetCtx(CUstream stream, CUcontext *context)
{
    int ordinal;
    CUresult rc = stub_stream_ordinal(stream, &ordinal);
    if (rc == CUDA_SUCCESS)
        *context = (CUcontext)(uintptr_t)(0x1000 + ordinal);
    return rc;
}

static int stub_pool_index(CUmemoryPool pool)
{
    uintptr_t at = (uintptr_t)pool, base = (uintptr_t)stub_pools;
    if (at < base || at >= base + sizeof stub_pools || (at - base) % sizeof stub_pools[0] != 0)
        return -1;
    int index = (int)((at - base) / sizeof stub_pools[0]);
    return stub_pools[index].live ? index : -1;
}

static struct stub_pool *stub_default_pool(int physical)
{
    struct stub_pool *pool = &stub_pools[physical];
    if (!pool->live)
        *pool = (struct stub_pool){.live = 1, .physical = physical};
    return pool;
}

/* Give back what the pool holds beyond max(in use, keep); caller holds stub_mutex. */
static uint64_t stub_pool_trim(struct stub_pool *pool, uint64_t keep)
{
    uint64_t least = (pool->in_use + STUB_POOL_GRANULE - 1) / STUB_POOL_GRANULE * STUB_POOL_GRANULE;
    uint64_t target = keep > least ? keep : least;
    if (pool->reserved <= target)
        return 0;
    uint64_t freed = pool->reserved - target;
    pool->reserved = target;
    stub_used[pool->physical] -= freed;
    return freed;
}

/* Carve `bytes` out of the pool, growing its reservation by whole granules when it lacks room. */
static CUresult stub_pool_alloc(struct stub_pool *pool, CUdeviceptr *pointer, uint64_t bytes)
{
    if (pointer == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    uint64_t cached = pool->reserved - pool->in_use, grow = 0;
    if (cached < bytes)
        grow = (bytes - cached + STUB_POOL_GRANULE - 1) / STUB_POOL_GRANULE * STUB_POOL_GRANULE;
    if (stub_object_count == STUB_MAX_OBJECTS || stub_take_memory(pool->physical, grow) != 0) {
        pthread_mutex_unlock(&stub_mutex);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->reserved += grow;
    pool->in_use += bytes;
    *pointer = stub_new_address(bytes);
    stub_add_object((struct stub_object){*pointer, bytes, pool->physical, STUB_POOLED, 1,
                                         (uint64_t)(pool - stub_pools)});
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(pool->physical, (int64_t)grow);
    return CUDA_SUCCESS;
}

static struct stub_pool *stub_current_pool_of(int physical)
{
    int chosen = stub_current_pool[physical];
    return chosen > 0 ? &stub_pools[chosen] : stub_default_pool(physical);
}

CUresult cuMemAllocAsync(CUdeviceptr *pointer, size_t bytes, CUstream stream)
{
    int ordinal;
    CUresult rc = stub_stream_ordinal(stream, &ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    return stub_pool_alloc(stub_current_pool_of(stub_physical(ordinal)), pointer, bytes);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *pointer, size_t bytes, CUstream stream)
{
    stub_ptsz_count++;
    return cuMemAllocAsync(pointer, bytes, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *pointer, size_t bytes, CUmemoryPool pool,
                                 CUstream stream)
{
    int ordinal, index = stub_pool_index(pool);
    CUresult rc = stub_stream_ordinal(stream, &ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (index < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return stub_pool_alloc(&stub_pools[index], pointer, bytes);
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

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&stub_mutex);
    *pool = (CUmemoryPool)stub_default_pool(stub_physical(device));
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&stub_mutex);
    *pool = (CUmemoryPool)stub_current_pool_of(stub_physical(device));
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool)
{
    int index = stub_pool_index(pool);
    if (!stub_valid_device(device) || index < 0 ||
        stub_pools[index].physical != stub_physical(device))
        return CUDA_ERROR_INVALID_VALUE;
    stub_current_pool[stub_physical(device)] = index;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (props == NULL || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !stub_valid_device(props->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    for (int i = STUB_MAX_DEVICES; i < STUB_MAX_POOLS; i++) {
        if (!stub_pools[i].live) {
            stub_pools[i] = (struct stub_pool){.live = 1, .physical = stub_physical(props->location.id)};
            *pool = (CUmemoryPool)&stub_pools[i];
            pthread_mutex_unlock(&stub_mutex);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    int index = stub_pool_index(pool);
    if (index < STUB_MAX_DEVICES)  /* default pools cannot be destroyed */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    struct stub_pool *gone = &stub_pools[index];
    uint64_t freed = gone->reserved;
    stub_used[gone->physical] -= freed;
    for (int i = stub_object_count - 1; i >= 0; i--)
        if (stub_objects[i].kind == STUB_POOLED && stub_objects[i].link == (uint64_t)index)
            stub_objects[i] = stub_objects[--stub_object_count];
    if (stub_current_pool[gone->physical] == index)
        stub_current_pool[gone->physical] = 0;
    int physical = gone->physical;
    *gone = (struct stub_pool){0};
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, -(int64_t)freed);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    int index = stub_pool_index(pool);
    if (index < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    uint64_t freed = stub_pool_trim(&stub_pools[index], keep);
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(stub_pools[index].physical, -(int64_t)freed);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void *value)
{
    int index = stub_pool_index(pool);
    if (index < 0 || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (attribute != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        return CUDA_SUCCESS;
    stub_pools[index].threshold = *(cuuint64_t *)value;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void *value)
{
    int index = stub_pool_index(pool);
    if (index < 0 || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    struct stub_pool *chosen = &stub_pools[index];
    cuuint64_t answer = attribute == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD       ? chosen->threshold
                        : attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? chosen->reserved
                        : attribute == CU_MEMPOOL_ATTR_USED_MEM_CURRENT     ? chosen->in_use
                                                                            : 0;
    pthread_mutex_unlock(&stub_mutex);
    *(cuuint64_t *)value = answer;
    return CUDA_SUCCESS;
}

/* Synchronisation: every pool of the device gives back what it holds beyond its threshold. */
static void stub_trim_device(int physical)
{
    uint64_t freed = 0;
    pthread_mutex_lock(&stub_mutex);
    for (int i = 0; i < STUB_MAX_POOLS; i++)
        if (stub_pools[i].live && stub_pools[i].physical == physical)
            freed += stub_pool_trim(&stub_pools[i], stub_pools[i].threshold);
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, -(int64_t)freed);
}

CUresult cuCtxSynchronize(void)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub_trim_device(stub_physical(stub_current));
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream)
{
    int ordinal;
    CUresult rc = stub_stream_ordinal(stream, &ordinal);
    if (rc == CUDA_SUCCESS)
        stub_trim_device(stub_physical(ordinal));
    return rc;
}

/* --- virtual memory management: physical handles live while referenced ------------------- */

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

CUresult cuMemAddressReserve(CUdeviceptr *pointer, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    (void)alignment, (void)addr, (void)flags;
    pthread_mutex_lock(&stub_mutex);
    *pointer = stub_next_va;
    stub_next_va += (size + STUB_POOL_GRANULE - 1) / STUB_POOL_GRANULE * STUB_POOL_GRANULE;
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr pointer, size_t size)
{
    (void)pointer, (void)size;
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr pointer, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    (void)offset, (void)flags;
    pthread_mutex_lock(&stub_mutex);
    int i = stub_find(STUB_HANDLE, handle);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && stub_add_object((struct stub_object){pointer, size, stub_objects[i].physical,
                                                       STUB_MAPPING, 1, handle}) == 0) {
        stub_objects[i].refs++;
        rc = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&stub_mutex);
    return rc;
}

/* Every mapping starting inside [pointer, pointer + size) goes, and with it one reference of
 * its handle; a handle with no reference left frees its memory. */
CUresult cuMemUnmap(CUdeviceptr pointer, size_t size)
{
    int64_t freed[STUB_MAX_DEVICES] = {0};
    int found = 0;
    pthread_mutex_lock(&stub_mutex);
    for (int i = stub_object_count - 1; i >= 0; i--) {
        struct stub_object mapping = stub_objects[i];
        if (mapping.kind != STUB_MAPPING || mapping.key < pointer || mapping.key >= pointer + size)
            continue;
        found = 1;
        int physical;
        stub_unref(i, &physical);
        int handle = stub_find(STUB_HANDLE, mapping.link);
        if (handle >= 0)
            freed[physical] += (int64_t)stub_unref(handle, &physical);
        i = stub_object_count;  /* the table moved under us: look again from the end */
    }
    pthread_mutex_unlock(&stub_mutex);
    for (int d = 0; d < STUB_MAX_DEVICES; d++)
        if (freed[d])
            stub_ledger_account(d, -freed[d]);
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *address)
{
    uint64_t at = (uint64_t)(uintptr_t)address;
    pthread_mutex_lock(&stub_mutex);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < stub_object_count; i++) {
        struct stub_object *mapping = &stub_objects[i];
        if (mapping->kind == STUB_MAPPING && at >= mapping->key && at < mapping->key + mapping->bytes) {
            int owner = stub_find(STUB_HANDLE, mapping->link);
            if (owner >= 0) {
                stub_objects[owner].refs++;
                *handle = mapping->link;
                rc = CUDA_SUCCESS;
            }
            break;
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    return rc;
}

CUresult cuMemSetAccess(CUdeviceptr pointer, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    (void)pointer, (void)size, (void)desc, (void)count;
    return CUDA_SUCCESS;
}

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
    uint64_t key, bytes = 0;  /* each level halves every dimension, down to 1 */
    for (unsigned level = 0; level < levels; level++) {
        uint64_t width = desc->Width >> level, height = desc->Height >> level;
        bytes += (width ? width : 1) * (height ? height : 1) * desc->NumChannels;
    }
    CUresult rc = stub_array(STUB_MIPMAP, bytes, &key);
    if (rc == CUDA_SUCCESS)
        *mipmap = (CUmipmappedArray)(uintptr_t)key;
    return rc;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap)
{
    return stub_destroy(STUB_MIPMAP, (uint64_t)(uintptr_t)mipmap);
}

/* --- pre-3.2 entry points: 32-bit sizes and pointers, reached through cuGetProcAddress with a
 * version below 3020 ------------------------------------------------------------------------- */

static uint64_t stub_next_low = 0x10000000ull;

static CUresult stub_alloc_low(unsigned int *pointer, uint64_t bytes)
{
    CUdeviceptr key;
    CUresult rc = stub_alloc_current(&key, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&stub_mutex);
    stub_objects[stub_find(STUB_POINTER, key)].key = stub_next_low;  /* a 32-bit address */
    *pointer = (unsigned int)stub_next_low;
    stub_next_low += ((bytes + 511) & ~511ull) + 512;
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr_v1 *pointer, unsigned int bytes)
{
    return stub_alloc_low(pointer, bytes);
}

CUresult cuMemAllocPitch(CUdeviceptr_v1 *pointer, unsigned int *pitch, unsigned int width,
                         unsigned int height, unsigned int element_bytes)
{
    if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (width + 511) & ~511u;
    return stub_alloc_low(pointer, (uint64_t)*pitch * height);
}

CUresult cuMemFree(CUdeviceptr_v1 pointer) { return cuMemFree_v2(pointer); }

CUresult cuArrayCreate(CUarray *array, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    CUDA_ARRAY_DESCRIPTOR wide = {desc->Width, desc->Height, desc->Format, desc->NumChannels};
    return cuArrayCreate_v2(array, &wide);
}

CUresult cuArray3DCreate(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    CUDA_ARRAY3D_DESCRIPTOR wide = {desc->Width, desc->Height, desc->Depth, desc->Format,
                                    desc->NumChannels, desc->Flags};
    return cuArray3DCreate_v2(array, &wide);
}

/* --- imports: memory another process allocated. The stub reads the size from the first 8
 * bytes of the opaque handle data (its "exporter" put it there). -------------------------- */

static CUresult stub_import(const void *data, CUdeviceptr *pointer)
{
    uint64_t bytes;
    memcpy(&bytes, data, sizeof bytes);
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&stub_mutex);
    *pointer = stub_new_address(bytes);
    int rc = stub_add_object((struct stub_object){*pointer, bytes, stub_physical(stub_current),
                                                  STUB_MAPPING, 1, 0});
    pthread_mutex_unlock(&stub_mutex);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pointer, CUipcMemHandle handle, unsigned int flags)
{
    (void)flags;
    return stub_import(handle.reserved, pointer);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr pointer) { return stub_destroy(STUB_MAPPING, pointer); }

CUresult cuMemPoolImportPointer(CUdeviceptr *pointer, CUmemoryPool pool,
                                CUmemPoolPtrExportData *data)
{
    (void)pool;
    return stub_import(data->reserved, pointer);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr pointer)
{
    pthread_mutex_lock(&stub_mutex);
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    for (int i = 0; i < stub_object_count; i++) {
        struct stub_object *object = &stub_objects[i];
        if (pointer >= object->key && pointer < object->key + (object->bytes ? object->bytes : 1) &&
            object->kind != STUB_HANDLE && object->kind != STUB_ARRAY && object->kind != STUB_MIPMAP) {
            if (base)
                *base = object->key;
            if (size)
                *size = object->bytes;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&stub_mutex);
    return rc;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr pointer)
{
    if (attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&stub_mutex);
    int found = -1;
    for (int i = 0; i < stub_object_count && found < 0; i++)
        if (pointer >= stub_objects[i].key && pointer < stub_objects[i].key + stub_objects[i].bytes)
            found = stub_objects[i].physical;
    pthread_mutex_unlock(&stub_mutex);
    if (found < 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (int ordinal = 0; ordinal < stub_device_count(); ordinal++)
        if (stub_physical(ordinal) == found)
            *(int *)data = ordinal;
    return CUDA_SUCCESS;
}

/* A handle imported from another process: no memory of ours; its size is its mapping's. */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type)
{
    (void)os_handle, (void)type;
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&stub_mutex);
    *handle = stub_new_address(0);
    int rc = stub_add_object((struct stub_object){*handle, 0, stub_physical(stub_current),
                                                  STUB_HANDLE, 1, 0});
    pthread_mutex_unlock(&stub_mutex);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&stub_mutex);
    int i = stub_find(STUB_HANDLE, handle);
    int physical = i >= 0 ? stub_objects[i].physical : -1;
    pthread_mutex_unlock(&stub_mutex);
    if (physical < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *prop = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                  .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    for (int ordinal = 0; ordinal < stub_device_count(); ordinal++)
        if (stub_physical(ordinal) == physical)
            prop->location.id = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuImportExternalMemory(CUexternalMemory *memory, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    CUdeviceptr key;
    uint64_t bytes = desc->size;
    CUresult rc = stub_import(&bytes, &key);
    if (rc == CUDA_SUCCESS)
        *memory = (CUexternalMemory)(uintptr_t)key;
    return rc;
}

CUresult cuDestroyExternalMemory(CUexternalMemory memory)
{
    return stub_destroy(STUB_MAPPING, (uint64_t)(uintptr_t)memory);
}

/* --- graphs: kernel nodes and memory-allocation nodes. Graph memory is held by a per-device
 * pool that grows at launch to what the graph allocates and shrinks at cuDeviceGraphMemTrim. */

#define STUB_MAX_GRAPHS 256
#define STUB_MAX_NODES 64

/* A graph node: a kernel (its launch parameters) or a memory allocation. */
struct stub_node {
    CUgraphNodeType type;
    CUDA_KERNEL_NODE_PARAMS kernel;
};

struct stub_graph {
    int live;
    int physical;
    uint64_t alloc_bytes;
    int nodes;
    struct stub_node node[STUB_MAX_NODES];
};

static struct stub_graph stub_graphs[STUB_MAX_GRAPHS]; /* graphs and executable graphs alike */

static struct stub_graph *stub_graph_new(void)
{
    for (int i = 0; i < STUB_MAX_GRAPHS; i++)
        if (!stub_graphs[i].live) {
            stub_graphs[i] = (struct stub_graph){.live = 1, .physical = -1};
            return &stub_graphs[i];
        }
    return NULL;
}

CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&stub_mutex);
    struct stub_graph *made = stub_graph_new();
    pthread_mutex_unlock(&stub_mutex);
    *graph = (CUgraph)made;
    return made ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuGraphDestroy(CUgraph graph)
{
    ((struct stub_graph *)graph)->live = 0;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                 size_t count, const CUDA_KERNEL_NODE_PARAMS *params)
{
    (void)deps, (void)count;
    struct stub_graph *target = (struct stub_graph *)graph;
    if (target->nodes == STUB_MAX_NODES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    target->node[target->nodes] = (struct stub_node){CU_GRAPH_NODE_TYPE_KERNEL, *params};
    *node = (CUgraphNode)&target->node[target->nodes++];
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
                                size_t count, CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    (void)deps, (void)count;
    struct stub_graph *target = (struct stub_graph *)graph;
    if (!stub_valid_device(params->poolProps.location.id) || target->nodes == STUB_MAX_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    target->node[target->nodes].type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    *node = (CUgraphNode)&target->node[target->nodes++];
    target->physical = stub_physical(params->poolProps.location.id);
    target->alloc_bytes += params->bytesize;
    pthread_mutex_lock(&stub_mutex);
    params->dptr = stub_new_address(params->bytesize);
    pthread_mutex_unlock(&stub_mutex);
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count)
{
    struct stub_graph *target = (struct stub_graph *)graph;
    if (nodes != NULL)
        for (size_t i = 0; i < *count && i < (size_t)target->nodes; i++)
            nodes[i] = (CUgraphNode)&target->node[i];
    *count = (size_t)target->nodes;
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    *type = ((struct stub_node *)node)->type;
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *params)
{
    const struct stub_node *kernel = (const struct stub_node *)node;
    if (kernel->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    *params = kernel->kernel;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    (void)flags;
    pthread_mutex_lock(&stub_mutex);
    struct stub_graph *made = stub_graph_new();
    if (made)
        *made = *(struct stub_graph *)graph;
    pthread_mutex_unlock(&stub_mutex);
    *exec = (CUgraphExec)made;
    return made ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    ((struct stub_graph *)exec)->live = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    int physical = stub_physical(device);
    pthread_mutex_lock(&stub_mutex);
    uint64_t freed = stub_graph_reserved[physical];
    stub_graph_reserved[physical] = 0;
    pthread_mutex_unlock(&stub_mutex);
    stub_ledger_account(physical, -(int64_t)freed);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attribute, void *value)
{
    if (!stub_valid_device(device))
        return CUDA_ERROR_INVALID_DEVICE;
    (void)attribute;
    *(cuuint64_t *)value = stub_graph_reserved[stub_physical(device)];
    return CUDA_SUCCESS;
}

/* Graph memory for a launch: the device's graph pool grows to what the graph allocates. */
static CUresult stub_graph_memory(const struct stub_graph *exec)
{
    if (exec->physical < 0 || stub_graph_reserved[exec->physical] >= exec->alloc_bytes)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&stub_mutex);
    uint64_t grow = exec->alloc_bytes - stub_graph_reserved[exec->physical];
    int fits = stub_device_used(exec->physical) + grow <= stub_device_total();
    if (fits)
        stub_graph_reserved[exec->physical] += grow;
    pthread_mutex_unlock(&stub_mutex);
    if (!fits)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stub_ledger_account(exec->physical, (int64_t)grow);
    return CUDA_SUCCESS;
}

/* --- the simulated GPU ---------------------------------------------------------------------
 * A kernel's duration is its CUfunction's value in microseconds (the test programs launch
 * "functions" 1..2^32; NULL runs in no time). Kernels of a device run one after another on
 * the real clock; with STUB_QUEUE launches pending the launching thread waits, as on the real
 * driver's queue. NVML reads utilisation from the busy intervals, per process, in sample
 * periods of STUB_NVML_PERIOD_MS (167, about NVML's own). With STUB_GPU_FILE the devices are
 * shared by every process that names the file, as one card is by a container's processes. */
#define STUB_QUEUE 1024
#define STUB_INTERVALS 16384
#define STUB_GPU_MAGIC 0x53475055u

struct stub_gpu {
    uint64_t busy_until;
    uint64_t ends[STUB_QUEUE]; /* end times of pending kernels, oldest first (a ring) */
    unsigned first_end, pending;
    struct {
        uint64_t start, end;
        unsigned pid; /* NVML's pid of the process whose kernel ran */
    } busy[STUB_INTERVALS]; /* merged busy intervals, a ring */
    unsigned first_busy, busy_count;
};

struct stub_gpus {
    uint32_t ready;
    pthread_mutex_t mutex;
    struct stub_gpu gpu[STUB_MAX_DEVICES];
};

static struct stub_gpus stub_private_gpus = {.mutex = PTHREAD_MUTEX_INITIALIZER};
static struct stub_gpus *stub_gpu_state;

static struct stub_gpus *stub_gpus(void)
{
    struct stub_gpus *state = __atomic_load_n(&stub_gpu_state, __ATOMIC_ACQUIRE);
    if (state != NULL)
        return state;
    const char *path = getenv("STUB_GPU_FILE");
    state = &stub_private_gpus;
    if (path != NULL && *path) {
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666), creator = fd >= 0;
        if (!creator)
            fd = open(path, O_RDWR);
        if (fd < 0 || (creator && ftruncate(fd, sizeof *state) != 0))
            abort();
        struct stat st;
        while (!creator && fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof *state)
            usleep(1000);
        state = mmap(NULL, sizeof *state, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (state == MAP_FAILED)
            abort();
        if (creator) {
            pthread_mutexattr_t attr;
            pthread_mutexattr_init(&attr);
            pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
            pthread_mutex_init(&state->mutex, &attr);
            __atomic_store_n(&state->ready, STUB_GPU_MAGIC, __ATOMIC_RELEASE);
        }
        while (__atomic_load_n(&state->ready, __ATOMIC_ACQUIRE) != STUB_GPU_MAGIC)
            usleep(1000);
    }
    __atomic_store_n(&stub_gpu_state, state, __ATOMIC_RELEASE);
    return state;
}

uint64_t stub_now_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

static uint64_t stub_kernel_us(CUfunction function)
{
    uintptr_t value = (uintptr_t)function;
    return value <= UINT32_MAX ? value : 0;
}

static void stub_retire(struct stub_gpu *gpu, uint64_t now)
{
    while (gpu->pending > 0 && gpu->ends[gpu->first_end] <= now) {
        gpu->first_end = (gpu->first_end + 1) % STUB_QUEUE;
        gpu->pending--;
    }
}

/* Queue a kernel of `us` microseconds on `physical`. */
static void stub_run(int physical, uint64_t us)
{
    if (us == 0)
        return;
    struct stub_gpus *state = stub_gpus();
    struct stub_gpu *gpu = &state->gpu[physical];
    unsigned pid = (unsigned)(getpid() + stub_pid_offset());
    pthread_mutex_lock(&state->mutex);
    stub_retire(gpu, stub_now_us());
    while (gpu->pending == STUB_QUEUE) {
        uint64_t wait = gpu->ends[gpu->first_end] - stub_now_us();
        pthread_mutex_unlock(&state->mutex);
        usleep((useconds_t)(wait < 1000000 ? wait : 1000000) + 1);
        pthread_mutex_lock(&state->mutex);
        stub_retire(gpu, stub_now_us());
    }
    uint64_t now = stub_now_us();
    uint64_t start = gpu->busy_until > now ? gpu->busy_until : now, end = start + us;
    gpu->busy_until = end;
    gpu->ends[(gpu->first_end + gpu->pending++) % STUB_QUEUE] = end;
    unsigned last = (gpu->first_busy + gpu->busy_count + STUB_INTERVALS - 1) % STUB_INTERVALS;
    if (gpu->busy_count > 0 && gpu->busy[last].end == start && gpu->busy[last].pid == pid) {
        gpu->busy[last].end = end;
    } else {
        if (gpu->busy_count == STUB_INTERVALS) {
            gpu->first_busy = (gpu->first_busy + 1) % STUB_INTERVALS;
            gpu->busy_count--;
        }
        unsigned next = (gpu->first_busy + gpu->busy_count++) % STUB_INTERVALS;
        gpu->busy[next].start = start;
        gpu->busy[next].end = end;
        gpu->busy[next].pid = pid;
    }
    pthread_mutex_unlock(&state->mutex);
}

uint64_t stub_busy_pid_us(int physical, unsigned pid, uint64_t from, uint64_t to)
{
    struct stub_gpus *state = stub_gpus();
    struct stub_gpu *gpu = &state->gpu[physical];
    uint64_t busy = 0;
    pthread_mutex_lock(&state->mutex);
    for (unsigned k = gpu->busy_count; k > 0; k--) {
        unsigned i = (gpu->first_busy + k - 1) % STUB_INTERVALS;
        uint64_t start = gpu->busy[i].start, end = gpu->busy[i].end;
        if (end <= from)
            break;
        if (pid != 0 && gpu->busy[i].pid != pid)
            continue;
        start = start > from ? start : from;
        end = end < to ? end : to;
        busy += end > start ? end - start : 0;
    }
    pthread_mutex_unlock(&state->mutex);
    return busy;
}

uint64_t stub_busy_us(int physical, uint64_t from, uint64_t to)
{
    return stub_busy_pid_us(physical, 0, from, to);
}

unsigned stub_busy_pids(int physical, uint64_t from, unsigned *pids, unsigned room)
{
    struct stub_gpus *state = stub_gpus();
    struct stub_gpu *gpu = &state->gpu[physical];
    unsigned found = 0;
    pthread_mutex_lock(&state->mutex);
    for (unsigned k = gpu->busy_count; k > 0; k--) {
        unsigned i = (gpu->first_busy + k - 1) % STUB_INTERVALS, seen = 0;
        if (gpu->busy[i].end <= from)
            break;
        for (unsigned j = 0; j < found; j++)
            seen |= pids[j] == gpu->busy[i].pid;
        if (!seen && found < room)
            pids[found++] = gpu->busy[i].pid;
    }
    pthread_mutex_unlock(&state->mutex);
    return found;
}

int stub_physical_of(int ordinal) { return stub_physical(ordinal); }

static CUresult stub_launch(CUfunction function, uint64_t blocks)
{
    if (stub_current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    __atomic_add_fetch(&stub_launch_count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&stub_block_count, blocks, __ATOMIC_RELAXED);
    stub_run(stub_physical(stub_current), stub_kernel_us(function));
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void **params, void **extra)
{
    (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params, (void)extra;
    return stub_launch(f, (uint64_t)gx * gy * gz);
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
    (void)params, (void)extra;
    return stub_launch(f, (uint64_t)config->gridDimX * config->gridDimY * config->gridDimZ);
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
    (void)stream;
    const struct stub_graph *exec = (const struct stub_graph *)graph;
    if (exec == NULL)
        return stub_launch(NULL, 1);  /* the drive's "graph" launches: an empty graph */
    CUresult rc = stub_graph_memory(exec);
    for (int k = 0; k < exec->nodes && rc == CUDA_SUCCESS; k++) {
        const CUDA_KERNEL_NODE_PARAMS *kernel = &exec->node[k].kernel;
        if (exec->node[k].type == CU_GRAPH_NODE_TYPE_KERNEL)
            rc = stub_launch(kernel->func, (uint64_t)kernel->gridDimX * kernel->gridDimY *
                                               kernel->gridDimZ);
    }
    return rc;
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
    STUB_ENTRY("cuMemAlloc", 2000, cuMemAlloc, NULL),
    STUB_ENTRY("cuMemAlloc", 3020, cuMemAlloc_v2, NULL),
    STUB_ENTRY("cuMemAllocPitch", 2000, cuMemAllocPitch, NULL),
    STUB_ENTRY("cuMemAllocPitch", 3020, cuMemAllocPitch_v2, NULL),
    STUB_ENTRY("cuMemFree", 2000, cuMemFree, NULL),
    STUB_ENTRY("cuArrayCreate", 2000, cuArrayCreate, NULL),
    STUB_ENTRY("cuArray3DCreate", 2000, cuArray3DCreate, NULL),
    STUB_ENTRY("cuCtxCreate", 2000, cuCtxCreate, NULL),
    STUB_ENTRY("cuCtxCreate", 3020, cuCtxCreate_v2, NULL),
    STUB_ENTRY("cuCtxCreate", 11040, cuCtxCreate_v3, NULL),
    STUB_ENTRY("cuCtxCreate", 12050, cuCtxCreate_v4, NULL),
    STUB_ENTRY("cuCtxDestroy", 4000, cuCtxDestroy_v2, NULL),
    STUB_ENTRY("cuCtxSetLimit", 3010, cuCtxSetLimit, NULL),
    STUB_ENTRY("cuCtxGetLimit", 3010, cuCtxGetLimit, NULL),
    STUB_ENTRY("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2, NULL),
    STUB_ENTRY("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle, NULL),
    STUB_ENTRY("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle, NULL),
    STUB_ENTRY("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer, NULL),
    STUB_ENTRY("cuImportExternalMemory", 10000, cuImportExternalMemory, NULL),
    STUB_ENTRY("cuDestroyExternalMemory", 10000, cuDestroyExternalMemory, NULL),
    STUB_ENTRY("cuGraphCreate", 10000, cuGraphCreate, NULL),
    STUB_ENTRY("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2, NULL),
    STUB_ENTRY("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode, NULL),
    STUB_ENTRY("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags, NULL),
    STUB_ENTRY("cuGraphGetNodes", 10000, cuGraphGetNodes, NULL),
    STUB_ENTRY("cuGraphExecDestroy", 10000, cuGraphExecDestroy, NULL),
    STUB_ENTRY("cuGraphDestroy", 10000, cuGraphDestroy, NULL),
    STUB_ENTRY("cuGraphNodeGetType", 10000, cuGraphNodeGetType, NULL),
    STUB_ENTRY("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2, NULL),
    STUB_ENTRY("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim, NULL),
    STUB_ENTRY("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute, NULL),
    STUB_ENTRY("cuMemAllocManaged", 6000, cuMemAllocManaged, NULL),
    STUB_ENTRY("cuMemFree", 3020, cuMemFree_v2, NULL),
    STUB_ENTRY("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    STUB_ENTRY("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync,
               cuMemAllocFromPoolAsync_ptsz),
    STUB_ENTRY("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    STUB_ENTRY("cuMemCreate", 10020, cuMemCreate, NULL),
    STUB_ENTRY("cuMemRelease", 10020, cuMemRelease, NULL),
    STUB_ENTRY("cuMemMap", 10020, cuMemMap, NULL),
    STUB_ENTRY("cuMemUnmap", 10020, cuMemUnmap, NULL),
    STUB_ENTRY("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle, NULL),
    STUB_ENTRY("cuMemAddressReserve", 10020, cuMemAddressReserve, NULL),
    STUB_ENTRY("cuMemAddressFree", 10020, cuMemAddressFree, NULL),
    STUB_ENTRY("cuMemSetAccess", 10020, cuMemSetAccess, NULL),
    STUB_ENTRY("cuMemPoolCreate", 11020, cuMemPoolCreate, NULL),
    STUB_ENTRY("cuMemPoolDestroy", 11020, cuMemPoolDestroy, NULL),
    STUB_ENTRY("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo, NULL),
    STUB_ENTRY("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute, NULL),
    STUB_ENTRY("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute, NULL),
    STUB_ENTRY("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool, NULL),
    STUB_ENTRY("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool, NULL),
    STUB_ENTRY("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool, NULL),
    STUB_ENTRY("cuStreamCreate", 2000, cuStreamCreate, NULL),
    STUB_ENTRY("cuStreamGetDevice", 12080, cuStreamGetDevice, NULL),
    STUB_ENTRY("cuStreamGetCtx", 9020, cuStreamGetCtx, NULL),
    STUB_ENTRY("cuStreamSynchronize", 2000, cuStreamSynchronize, NULL),
    STUB_ENTRY("cuCtxSynchronize", 2000, cuCtxSynchronize, NULL),
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
