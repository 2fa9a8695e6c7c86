/* A small interpreter the pytest suite drives: each argument word is a command or its operand;
 * each command prints one line "name key=value ...". Linked against the stub driver; run with
 * and without LD_PRELOAD=libvgpu.so. */
#include <dlfcn.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stub.h"
#include "vgpu_nvml.h"

enum kind { K_POINTER, K_ASYNC, K_HANDLE, K_ARRAY, K_MIPMAP, K_MAPPING, K_LEGACY, K_CONTEXT,
             K_IPC, K_EXTERNAL };

static struct {
    enum kind kind;
    uint64_t key;
    uint64_t bytes;
} objects[100000];
static CUstream current_stream;  /* what `async` allocates on (`stream` sets it) */
static CUmemoryPool chosen_pool;  /* what `pool` allocates from (`mkpool`/`defaultpool` set it) */
static int object_count;
static int in_child;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    if (in_child)
        fputs("child ", stdout);
    vprintf(fmt, args);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(args);
}

static unsigned long long number(const char *text)
{
    char *end;
    unsigned long long value = strtoull(text, &end, 0);
    if (*end == 'k') value <<= 10;
    if (*end == 'm') value <<= 20;
    if (*end == 'g') value <<= 30;
    return value;
}

static int keep(enum kind kind, uint64_t key)
{
    objects[object_count].kind = kind;
    objects[object_count].key = key;
    objects[object_count].bytes = 0;
    return object_count++;
}

static CUmemoryPool pool_to_use(void)
{
    CUdevice device = 0;
    CUmemoryPool pool = chosen_pool;
    if (pool == NULL && cuCtxGetDevice(&device) == CUDA_SUCCESS)
        cuDeviceGetDefaultMemPool(&pool, device);
    return pool;
}

static void report_alloc(const char *name, CUresult rc, enum kind kind, uint64_t key)
{
    if (rc == CUDA_SUCCESS)
        say("%s rc=0 id=%d", name, keep(kind, key));
    else
        say("%s rc=%d", name, (int)rc);
}

/* An entry as a pre-3.2 program gets it: cuGetProcAddress with version 2000. */
static void *legacy(const char *name)
{
    void *address = NULL;
    cuGetProcAddress_v2(name, &address, 2000, 0, NULL);
    return address;
}

/* Opaque import data whose first 8 bytes the stub reads as the size of the memory. */
static void import_data(void *data, uint64_t bytes)
{
    memcpy(data, &bytes, sizeof bytes);
}

static CUresult release(int id)
{
    uint64_t key = objects[id].key;
    switch (objects[id].kind) {
    case K_POINTER: return cuMemFree_v2(key);
    case K_ASYNC: return cuMemFreeAsync(key, NULL);
    case K_HANDLE: return cuMemRelease(key);
    case K_ARRAY: return cuArrayDestroy((CUarray)(uintptr_t)key);
    case K_MIPMAP: return cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)key);
    case K_MAPPING: return cuMemUnmap(key, objects[id].bytes);
    case K_LEGACY: {
        CUresult (*legacy_free)(CUdeviceptr_v1) = (CUresult (*)(CUdeviceptr_v1))legacy("cuMemFree");
        return legacy_free((CUdeviceptr_v1)key);
    }
    case K_CONTEXT: return cuCtxDestroy_v2((CUcontext)(uintptr_t)key);
    case K_IPC: return cuIpcCloseMemHandle(key);
    case K_EXTERNAL: return cuDestroyExternalMemory((CUexternalMemory)(uintptr_t)key);
    }
    return CUDA_ERROR_UNKNOWN;
}

static double now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec * 1e3 + (double)now.tv_nsec / 1e6;
}

static CUresult launch_once(const char *how, unsigned grid)
{
    if (strcmp(how, "kernel") == 0)
        return cuLaunchKernel(NULL, grid, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    if (strcmp(how, "ptsz") == 0)
        return cuLaunchKernel_ptsz(NULL, grid, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    if (strcmp(how, "coop") == 0)
        return cuLaunchCooperativeKernel(NULL, grid, 1, 1, 32, 1, 1, 0, NULL, NULL);
    if (strcmp(how, "graph") == 0)
        return cuGraphLaunch(NULL, NULL);
    CUlaunchConfig config = {.gridDimX = grid, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                             .blockDimY = 1, .blockDimZ = 1};
    return cuLaunchKernelEx(&config, NULL, NULL, NULL);
}

/* One launch of a kernel running `us` microseconds on the stub's simulated GPU (its CUfunction
 * is its duration), or of `graph`. */
static CUresult simulated_launch(const char *how, unsigned grid, uint64_t us, CUgraphExec graph)
{
    CUfunction kernel = (CUfunction)(uintptr_t)us;
    if (strcmp(how, "graph") == 0)
        return cuGraphLaunch(graph, NULL);
    if (strcmp(how, "coop") == 0)
        return cuLaunchCooperativeKernel(kernel, grid, 1, 1, 256, 1, 1, 0, NULL, NULL);
    return cuLaunchKernel(kernel, grid, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
}

/* An executable graph of `count` kernel nodes of `us` microseconds each. */
static CUgraphExec simulated_graph(int count, unsigned grid, uint64_t us)
{
    CUgraph graph;
    CUgraphExec exec = NULL;
    cuGraphCreate(&graph, 0);
    for (int k = 0; k < count; k++) {
        CUDA_KERNEL_NODE_PARAMS params = {.func = (CUfunction)(uintptr_t)us, .gridDimX = grid,
                                          .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                                          .blockDimY = 1, .blockDimZ = 1};
        CUgraphNode node;
        cuGraphAddKernelNode_v2(&node, graph, NULL, 0, &params);
    }
    cuGraphInstantiateWithFlags(&exec, graph, 0);
    return exec;
}

static void symbol_line(const char *what, CUresult rc, void *address, int status)
{
    Dl_info info;
    if (rc != CUDA_SUCCESS || address == NULL || !dladdr(address, &info) || !info.dli_sname) {
        say("%s rc=%d name=- lib=- status=%d", what, (int)rc, status);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", info.dli_fname);
    say("%s rc=%d name=%s lib=%s status=%d", what, (int)rc, info.dli_sname, basename(path), status);
}

struct filler {
    CUcontext context;
    unsigned long long chunk;
    unsigned long long got;
};

static void *fill_thread(void *data)  /* allocate until refused, then free it all */
{
    struct filler *filler = data;
    CUdeviceptr held[4096];
    cuCtxSetCurrent(filler->context);
    while (filler->got < 4096 && cuMemAlloc_v2(&held[filler->got], filler->chunk) == CUDA_SUCCESS)
        filler->got++;
    return NULL;
}

static nvmlDevice_t nvml_device(unsigned index)
{
    nvmlDevice_t device = NULL;
    nvmlInit_v2();
    nvmlDeviceGetHandleByIndex_v2(index, &device);
    return device;
}

int main(int argc, char **argv)
{
    cuInit(0);
    for (int i = 1; i < argc; i++) {
        const char *cmd = argv[i];
        if (strcmp(cmd, "ctx") == 0) {
            CUcontext context;
            CUresult rc = cuDevicePrimaryCtxRetain(&context, (CUdevice)number(argv[++i]));
            if (rc == CUDA_SUCCESS)
                cuCtxSetCurrent(context);
            say("ctx rc=%d", (int)rc);
        } else if (strcmp(cmd, "reset") == 0) {
            say("reset rc=%d", (int)cuDevicePrimaryCtxReset_v2((CUdevice)number(argv[++i])));
        } else if (strcmp(cmd, "release") == 0) {
            say("release rc=%d", (int)cuDevicePrimaryCtxRelease_v2((CUdevice)number(argv[++i])));
        } else if (strcmp(cmd, "alloc") == 0) {
            CUdeviceptr p;
            CUresult rc = cuMemAlloc_v2(&p, number(argv[++i]));
            report_alloc(cmd, rc, K_POINTER, p);
        } else if (strcmp(cmd, "managed") == 0) {
            CUdeviceptr p;
            CUresult rc = cuMemAllocManaged(&p, number(argv[++i]), 1);
            report_alloc(cmd, rc, K_POINTER, p);
        } else if (strcmp(cmd, "async") == 0 || strcmp(cmd, "asyncptsz") == 0) {
            CUdeviceptr p;
            size_t bytes = number(argv[++i]);
            CUresult rc = cmd[5] ? cuMemAllocAsync_ptsz(&p, bytes, current_stream)
                                 : cuMemAllocAsync(&p, bytes, current_stream);
            report_alloc(cmd, rc, K_ASYNC, p);
        } else if (strcmp(cmd, "pool") == 0) {
            CUdeviceptr p;
            CUresult rc = cuMemAllocFromPoolAsync(&p, number(argv[++i]), pool_to_use(),
                                                  current_stream);
            report_alloc(cmd, rc, K_ASYNC, p);
        } else if (strcmp(cmd, "mkpool") == 0) {
            CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE,
                                                 .id = (int)number(argv[++i])}};
            say("mkpool rc=%d", (int)cuMemPoolCreate(&chosen_pool, &props));
        } else if (strcmp(cmd, "defaultpool") == 0) {
            say("defaultpool rc=%d",
                (int)cuDeviceGetDefaultMemPool(&chosen_pool, (CUdevice)number(argv[++i])));
        } else if (strcmp(cmd, "threshold") == 0) {
            cuuint64_t keep_bytes = number(argv[++i]);
            say("threshold rc=%d", (int)cuMemPoolSetAttribute(
                pool_to_use(), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_bytes));
        } else if (strcmp(cmd, "trim") == 0) {
            say("trim rc=%d", (int)cuMemPoolTrimTo(pool_to_use(), number(argv[++i])));
        } else if (strcmp(cmd, "destroypool") == 0) {
            say("destroypool rc=%d", (int)cuMemPoolDestroy(pool_to_use()));
            chosen_pool = NULL;
        } else if (strcmp(cmd, "sync") == 0) {
            say("sync rc=%d", (int)cuCtxSynchronize());
        } else if (strcmp(cmd, "stream") == 0) {
            say("stream rc=%d", (int)cuStreamCreate(&current_stream, 0));
        } else if (strcmp(cmd, "noctx") == 0) {
            say("noctx rc=%d", (int)cuCtxSetCurrent(NULL));
        } else if (strcmp(cmd, "ctxcreate") == 0) {  /* ctxcreate DEVICE VERSION(1..4) */
            CUdevice device = (CUdevice)number(argv[i + 1]);
            int version = (int)number(argv[i + 2]);
            i += 2;
            CUcontext context = NULL;
            CUresult rc = version == 1   ? ((CUresult(*)(CUcontext *, unsigned, CUdevice))legacy(
                                               "cuCtxCreate"))(&context, 0, device)
                          : version == 3 ? cuCtxCreate_v3(&context, NULL, 0, 0, device)
                          : version == 4 ? cuCtxCreate_v4(&context, NULL, 0, device)
                                         : cuCtxCreate_v2(&context, 0, device);
            report_alloc(cmd, rc, K_CONTEXT, (uint64_t)(uintptr_t)context);
        } else if (strcmp(cmd, "v1alloc") == 0) {
            CUdeviceptr_v1 p = 0;
            CUresult rc = ((CUresult(*)(CUdeviceptr_v1 *, unsigned))legacy("cuMemAlloc"))(
                &p, (unsigned)number(argv[++i]));
            report_alloc(cmd, rc, K_LEGACY, p);
        } else if (strcmp(cmd, "v1pitch") == 0) {
            CUdeviceptr_v1 p = 0;
            unsigned pitch = 0;
            CUresult rc = ((CUresult(*)(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned,
                                        unsigned))legacy("cuMemAllocPitch"))(
                &p, &pitch, (unsigned)number(argv[i + 1]), (unsigned)number(argv[i + 2]), 4);
            i += 2;
            report_alloc(cmd, rc, K_LEGACY, p);
        } else if (strcmp(cmd, "v1array") == 0 || strcmp(cmd, "v1array3d") == 0) {
            int three = cmd[7] != '\0';
            CUDA_ARRAY3D_DESCRIPTOR_v1 desc = {.Width = (unsigned)number(argv[i + 1]),
                                               .Height = (unsigned)number(argv[i + 2]),
                                               .Depth = three ? (unsigned)number(argv[i + 3]) : 0,
                                               .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                               .NumChannels = 1};
            CUDA_ARRAY_DESCRIPTOR_v1 flat = {desc.Width, desc.Height, desc.Format, 1};
            i += three ? 3 : 2;
            CUarray array = NULL;
            CUresult rc = three ? ((CUresult(*)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *))
                                       legacy("cuArray3DCreate"))(&array, &desc)
                                : ((CUresult(*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *))
                                       legacy("cuArrayCreate"))(&array, &flat);
            report_alloc(cmd, rc, K_ARRAY, (uint64_t)(uintptr_t)array);
        } else if (strcmp(cmd, "ipc") == 0) {
            CUipcMemHandle handle;
            import_data(handle.reserved, number(argv[++i]));
            CUdeviceptr p = 0;
            CUresult rc = cuIpcOpenMemHandle_v2(&p, handle, 1);
            report_alloc(cmd, rc, K_IPC, p);
        } else if (strcmp(cmd, "poolimport") == 0) {
            CUmemPoolPtrExportData data;
            import_data(data.reserved, number(argv[++i]));
            CUdeviceptr p = 0;
            CUresult rc = cuMemPoolImportPointer(&p, pool_to_use(), &data);
            report_alloc(cmd, rc, K_POINTER, p);
        } else if (strcmp(cmd, "external") == 0) {
            CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = {
                .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD, .size = number(argv[++i])};
            CUexternalMemory memory = NULL;
            CUresult rc = cuImportExternalMemory(&memory, &desc);
            report_alloc(cmd, rc, K_EXTERNAL, (uint64_t)(uintptr_t)memory);
        } else if (strcmp(cmd, "vmmimport") == 0) {  /* an exported handle, mapped here */
            uint64_t size = number(argv[++i]);
            CUmemGenericAllocationHandle handle = 0;
            CUdeviceptr va = 0;
            CUresult rc = cuMemImportFromShareableHandle(&handle, (void *)(uintptr_t)3,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (rc == CUDA_SUCCESS) {
                cuMemAddressReserve(&va, size, 0, 0, 0);
                rc = cuMemMap(va, size, 0, handle, 0);
            }
            report_alloc(cmd, rc, K_MAPPING, va);
            if (rc == CUDA_SUCCESS)
                objects[object_count - 1].bytes = size;
        } else if (strcmp(cmd, "graphmem") == 0) {  /* a graph with one memory node, launched */
            CUDA_MEM_ALLOC_NODE_PARAMS params = {
                .poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE,
                                           .id = (int)number(argv[i + 1])}},
                .bytesize = number(argv[i + 2])};
            i += 2;
            CUgraph graph;
            CUgraphNode node;
            CUgraphExec exec;
            cuGraphCreate(&graph, 0);
            CUresult added = cuGraphAddMemAllocNode(&node, graph, NULL, 0, &params), launched = 0;
            if (added == CUDA_SUCCESS && cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS)
                launched = cuGraphLaunch(exec, current_stream);
            say("graphmem added=%d launched=%d", (int)added, (int)launched);
        } else if (strcmp(cmd, "graphtrim") == 0) {
            say("graphtrim rc=%d", (int)cuDeviceGraphMemTrim((CUdevice)number(argv[++i])));
        } else if (strcmp(cmd, "setlimit") == 0) {  /* setlimit heap|stack|fifo VALUE */
            const char *which = argv[i + 1];
            CUlimit limit = strcmp(which, "heap") == 0    ? CU_LIMIT_MALLOC_HEAP_SIZE
                            : strcmp(which, "stack") == 0 ? CU_LIMIT_STACK_SIZE
                                                          : CU_LIMIT_PRINTF_FIFO_SIZE;
            size_t value = number(argv[i + 2]);
            i += 2;
            say("setlimit rc=%d", (int)cuCtxSetLimit(limit, value));
        } else if (strcmp(cmd, "deepbind") == 0) {  /* allocate from a RTLD_DEEPBIND library */
            char path[4096];
            snprintf(path, sizeof path, "%s/libvgpu_deepbind.so", dirname(strdup(argv[0])));
            void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
            int (*alloc)(unsigned long long) =
                library ? (int (*)(unsigned long long))dlsym(library, "deepbind_alloc") : NULL;
            say("deepbind rc=%d", alloc ? alloc(number(argv[++i])) : -1);
        } else if (strcmp(cmd, "foreignalloc") == 0) {  /* straight to the driver, no hook */
            say("foreignalloc rc=%d", stub_untracked_alloc(number(argv[++i])) ? 0 : 2);
        } else if (strcmp(cmd, "waitfree") == 0) {  /* until free < BYTES, at most MS ms */
            unsigned long long below = number(argv[i + 1]);
            double until = now_ms() + (double)number(argv[i + 2]);
            i += 2;
            size_t free = 0, total = 0;
            do {
                cuMemGetInfo_v2(&free, &total);
                if (free < below)
                    break;
                usleep(20000);
            } while (now_ms() < until);
            say("waitfree free=%zu", free);
        } else if (strcmp(cmd, "held") == 0) {
            say("held bytes=%llu", stub_device_used((int)number(argv[++i])));
        } else if (strcmp(cmd, "map") == 0) {  /* map a whole handle at a fresh address */
            int id = (int)number(argv[++i]);
            CUdeviceptr va = 0;
            uint64_t size = objects[id].bytes;
            cuMemAddressReserve(&va, size, 0, 0, 0);
            CUresult rc = cuMemMap(va, size, 0, objects[id].key, 0);
            report_alloc(cmd, rc, K_MAPPING, va);
            if (rc == CUDA_SUCCESS)
                objects[object_count - 1].bytes = size;
        } else if (strcmp(cmd, "retain") == 0) {  /* the handle behind a mapping, once more */
            int id = (int)number(argv[++i]);
            CUmemGenericAllocationHandle handle = 0;
            CUresult rc = cuMemRetainAllocationHandle(&handle, (void *)(uintptr_t)objects[id].key);
            report_alloc(cmd, rc, K_HANDLE, handle);
        } else if (strcmp(cmd, "pitch") == 0) {
            CUdeviceptr p;
            size_t pitch = 0, width = number(argv[i + 1]), height = number(argv[i + 2]);
            i += 2;
            CUresult rc = cuMemAllocPitch_v2(&p, &pitch, width, height, 4);
            report_alloc(cmd, rc, K_POINTER, p);
            say("pitch_bytes value=%zu", pitch);
        } else if (strcmp(cmd, "vmm") == 0) {
            CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE,
                                                     .id = (int)number(argv[i + 1])}};
            CUmemGenericAllocationHandle handle = 0;
            uint64_t size = number(argv[i + 2]);
            CUresult rc = cuMemCreate(&handle, size, &prop, 0);
            i += 2;
            report_alloc(cmd, rc, K_HANDLE, handle);
            if (rc == CUDA_SUCCESS)
                objects[object_count - 1].bytes = size;
        } else if (strcmp(cmd, "array") == 0) {
            CUDA_ARRAY_DESCRIPTOR desc = {.Width = number(argv[i + 1]), .Height = number(argv[i + 2]),
                                          .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
            i += 2;
            CUarray array = NULL;
            CUresult rc = cuArrayCreate_v2(&array, &desc);
            report_alloc(cmd, rc, K_ARRAY, (uint64_t)(uintptr_t)array);
        } else if (strcmp(cmd, "array3d") == 0) {
            CUDA_ARRAY3D_DESCRIPTOR desc = {.Width = number(argv[i + 1]),
                                            .Height = number(argv[i + 2]),
                                            .Depth = number(argv[i + 3]),
                                            .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
            i += 3;
            CUarray array = NULL;
            CUresult rc = cuArray3DCreate_v2(&array, &desc);
            report_alloc(cmd, rc, K_ARRAY, (uint64_t)(uintptr_t)array);
        } else if (strcmp(cmd, "mipmap") == 0) {
            CUDA_ARRAY3D_DESCRIPTOR desc = {.Width = number(argv[i + 1]),
                                            .Height = number(argv[i + 2]),
                                            .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
            unsigned levels = (unsigned)number(argv[i + 3]);
            i += 3;
            CUmipmappedArray mipmap = NULL;
            CUresult rc = cuMipmappedArrayCreate(&mipmap, &desc, levels);
            report_alloc(cmd, rc, K_MIPMAP, (uint64_t)(uintptr_t)mipmap);
        } else if (strcmp(cmd, "free") == 0) {
            say("free rc=%d", (int)release((int)number(argv[++i])));
        } else if (strcmp(cmd, "freeall") == 0) {
            int failed = 0;
            for (int id = 0; id < object_count; id++)
                failed += objects[id].key != 0 && release(id) != CUDA_SUCCESS;
            object_count = 0;
            say("freeall failed=%d", failed);
        } else if (strcmp(cmd, "fill") == 0) {  /* allocate chunks until refused */
            unsigned long long chunk = number(argv[++i]), got = 0;
            CUdeviceptr p;
            while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS) {
                keep(K_POINTER, p);
                got++;
            }
            say("fill chunks=%llu", got);
        } else if (strcmp(cmd, "threads") == 0) {  /* N threads fill at once */
            int count = (int)number(argv[i + 1]);
            unsigned long long chunk = number(argv[i + 2]), got = 0;
            i += 2;
            struct filler fillers[64];
            pthread_t threads[64];
            for (int t = 0; t < count && t < 64; t++) {
                fillers[t] = (struct filler){.chunk = chunk};
                cuCtxGetCurrent(&fillers[t].context);
                pthread_create(&threads[t], NULL, fill_thread, &fillers[t]);
            }
            for (int t = 0; t < count && t < 64; t++) {
                pthread_join(threads[t], NULL);
                got += fillers[t].got;
            }
            say("threads chunks=%llu", got);
        } else if (strcmp(cmd, "churn") == 0) {  /* alloc/free forever: to be killed */
            unsigned long long bytes = number(argv[++i]);
            CUdeviceptr p;
            say("churn started=1");
            for (;;)
                if (cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS)
                    cuMemFree_v2(p);
        } else if (strcmp(cmd, "foreignfree") == 0) {
            CUdeviceptr p = stub_untracked_alloc(4096);
            unsigned long long before = stub_free_calls();
            CUresult rc = cuMemFree_v2(p);
            say("foreignfree rc=%d forwarded=%llu still_allocated=%d", (int)rc,
                stub_free_calls() - before, stub_owns(p));
        } else if (strcmp(cmd, "meminfo") == 0) {
            size_t free = 0, total = 0;
            CUresult rc = cuMemGetInfo_v2(&free, &total);
            say("meminfo rc=%d free=%zu total=%zu", (int)rc, free, total);
        } else if (strcmp(cmd, "totalmem") == 0) {
            size_t total = 0;
            CUresult rc = cuDeviceTotalMem_v2(&total, (CUdevice)number(argv[++i]));
            say("totalmem rc=%d total=%zu", (int)rc, total);
        } else if (strcmp(cmd, "nvml") == 0) {
            nvmlMemory_t memory;
            nvmlReturn_t rc = nvmlDeviceGetMemoryInfo(nvml_device((unsigned)number(argv[++i])), &memory);
            say("nvml rc=%d total=%llu free=%llu used=%llu", (int)rc, memory.total, memory.free,
                memory.used);
        } else if (strcmp(cmd, "nvml2") == 0) {
            nvmlMemory_v2_t memory = {.version = nvmlMemory_v2};
            nvmlReturn_t rc = nvmlDeviceGetMemoryInfo_v2(nvml_device((unsigned)number(argv[++i])),
                                                         &memory);
            say("nvml2 rc=%d total=%llu free=%llu used=%llu reserved=%llu", (int)rc, memory.total,
                memory.free, memory.used, memory.reserved);
        } else if (strcmp(cmd, "launch") == 0) {
            const char *how = argv[i + 1];
            unsigned long long count = number(argv[i + 2]);
            unsigned grid = (unsigned)number(argv[i + 3]);
            i += 3;
            int failed = 0;
            for (unsigned long long n = 0; n < count; n++)
                failed += launch_once(how, grid) != CUDA_SUCCESS;
            say("launch failed=%d launches=%llu blocks=%llu ptsz=%llu", failed, stub_launches(),
                stub_launched_blocks(), stub_ptsz_launches());
        } else if (strcmp(cmd, "launchfor") == 0) {  /* launch for MS ms; blocks per 100 ms */
            const char *how = argv[i + 1];
            double until = now_ms() + (double)number(argv[i + 2]);
            unsigned grid = (unsigned)number(argv[i + 3]);
            i += 3;
            char series[8192] = "";
            size_t used = 0;
            double next = now_ms() + 100;
            while (now_ms() < until) {
                launch_once(how, grid);
                while (now_ms() >= next && used < sizeof series - 32) {
                    used += (size_t)snprintf(series + used, sizeof series - used, "%s%llu",
                                             used ? "," : "", stub_launched_blocks());
                    next += 100;
                }
            }
            say("launchfor blocks=%llu series=%s", stub_launched_blocks(), series[0] ? series : "0");
        } else if (strcmp(cmd, "simulate") == 0) {
            /* simulate HOW MS GRID KERNEL_US FROM_MS: launch for MS ms; print the share of
             * [FROM_MS, MS] the simulated GPU was busy, in percent. A graph is 10 kernels. */
            const char *how = argv[i + 1];
            double start = now_ms(), until = start + (double)number(argv[i + 2]);
            unsigned grid = (unsigned)number(argv[i + 3]);
            uint64_t us = number(argv[i + 4]);
            double from = start + (double)number(argv[i + 5]);
            i += 5;
            CUdevice device = 0;
            cuCtxGetDevice(&device);
            CUgraphExec graph = strcmp(how, "graph") == 0 ? simulated_graph(10, grid, us / 10) : NULL;
            unsigned long long launches = 0, began = 0;
            while (now_ms() < until) {
                if (began == 0 && now_ms() >= from)
                    began = stub_now_us();
                simulated_launch(how, grid, us, graph);
                launches++;
            }
            unsigned long long ended = stub_now_us();
            if (began == 0)
                began = ended;
            int physical = stub_physical_of(device);
            double busy = (double)stub_busy_us(physical, began, ended);
            char series[4096] = "";  /* percent busy in each 250 ms of the whole run */
            size_t used = 0;
            unsigned long long first = ended - (unsigned long long)((until - start) * 1000.0);
            for (unsigned long long at = first; at + 250000 <= ended && used < sizeof series - 8;
                 at += 250000)
                used += (size_t)snprintf(series + used, sizeof series - used, "%s%llu",
                                         used ? "," : "",
                                         (unsigned long long)(stub_busy_us(physical, at, at + 250000) / 2500));
            say("simulate util=%.1f launches=%llu series=%s",
                ended > began ? 100.0 * busy / (double)(ended - began) : 0.0, launches, series);
        } else if (strcmp(cmd, "gpa") == 0 || strcmp(cmd, "gpa1") == 0) {
            const char *name = argv[i + 1];
            int version = (int)number(argv[i + 2]);
            cuuint64_t flags = number(argv[i + 3]);
            i += 3;
            void *address = NULL;
            CUdriverProcAddressQueryResult status = 0;
            CUresult rc = cmd[3] ? cuGetProcAddress(name, &address, version, flags)
                                 : cuGetProcAddress_v2(name, &address, version, flags, &status);
            symbol_line(cmd, rc, address, (int)status);
        } else if (strcmp(cmd, "dlsym") == 0) {
            const char *library = argv[i + 1], *name = argv[i + 2];
            i += 2;
            void *handle = strcmp(library, "default") == 0 ? RTLD_DEFAULT
                           : strcmp(library, "next") == 0  ? RTLD_NEXT
                                                           : dlopen(library, RTLD_NOW);
            symbol_line(cmd, CUDA_SUCCESS, dlsym(handle, name), 0);
        } else if (strcmp(cmd, "touch") == 0) {
            close(open(argv[++i], O_CREAT | O_WRONLY, 0644));
            say("touch rc=0");
        } else if (strcmp(cmd, "waitfile") == 0) {
            struct stat st;
            while (stat(argv[i + 1], &st) != 0)
                usleep(2000);
            i++;
            say("waitfile rc=0");
        } else if (strcmp(cmd, "sleep") == 0) {
            usleep((useconds_t)number(argv[++i]) * 1000);
        } else if (strcmp(cmd, "fork") == 0) {
            pid_t child = fork();
            if (child == 0) {
                in_child = 1;
                continue;
            }
            while (i < argc && strcmp(argv[i], "endfork") != 0)
                i++;
            int status = 0;
            waitpid(child, &status, 0);
            say("fork exit=%d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        } else if (strcmp(cmd, "endfork") == 0) {
            if (in_child)
                exit(0);
        } else if (strcmp(cmd, "pid") == 0) {
            say("pid value=%d", (int)getpid());
        } else {
            fprintf(stderr, "vgpu_drive: unknown command %s\n", cmd);
            return 2;
        }
    }
    return 0;
}
