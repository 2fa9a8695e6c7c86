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

enum kind { K_POINTER, K_ASYNC, K_HANDLE, K_ARRAY, K_MIPMAP, K_MAPPING };

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
