#!/usr/bin/env bash
# libvgpu on a real GPU: one prepared run (a few minutes), printing PASS/FAIL per check.
#
#   bash native/libvgpu/gpu_check.sh            # needs nvcc, a driver and one free GPU
#   COMPILE_ONLY=1 bash native/libvgpu/gpu_check.sh   # build everything, run nothing
#
# Checks: the library builds against the real headers and exports only its hooks; cudaMalloc
# stops at a 1 GiB limit (within context overhead) with an OOM; cudaMemGetInfo and nvidia-smi
# show 1 GiB total; cudaMallocAsync loops neither leak nor bypass; a second process shares the
# limit; an SM limit of 30 gives 30 +- 10 % utilisation on a busy kernel (FORCE), DISABLE does
# not limit; graph and cooperative launches are limited too; a per-thread-default-stream build
# keeps working; PyTorch (if installed) sees the limit and raises OOM past it.
# The ways around the limit (each must now be refused under 1 GiB): VMM memory mapped after
# cuMemRelease, pool memory kept after cudaFreeAsync, a stream used without a current context,
# created contexts, pre-3.2 cuMemAlloc through cuGetProcAddress(2000), graph memory nodes, the
# device heap, a library loaded with RTLD_DEEPBIND (reconciled); the host pid libvgpu found is
# one nvidia-smi lists. SM: 30 % holds for short (50 us), long (10 ms), cooperative and graph
# kernels.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=1; }
check() { local name="$1"; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }

make -s -C "$HERE" lib || { echo "FAIL build"; exit 1; }
LIB="$HERE/build/libvgpu.so"
check "exports only hooks" bash -c "! nm -D --defined-only '$LIB' | awk '{print \$3}' | grep -vE '^(cu|nvml|dlsym$)'"
check "no link-time driver dependency" bash -c "! ldd '$LIB' | grep -qE 'libcuda|libnvidia-ml'"

cat > "$WORK/probe.cu" <<'EOF'
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <dlfcn.h>
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}

static const size_t MiB = 1 << 20;

static int fill(size_t chunk) {  // allocate until refused; print MiB granted
    size_t total = 0;
    void *p;
    while (cudaMalloc(&p, chunk) == cudaSuccess) total += chunk;
    cudaError_t last = cudaGetLastError();
    printf("granted_mib=%zu last_error=%d\n", total >> 20, (int)last);
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "";
    cudaFree(0);
    if (!strcmp(cmd, "meminfo")) {
        size_t free_b, total_b;
        cudaMemGetInfo(&free_b, &total_b);
        printf("free_mib=%zu total_mib=%zu\n", free_b >> 20, total_b >> 20);
    } else if (!strcmp(cmd, "fill")) {
        return fill((size_t)64 << 20);
    } else if (!strcmp(cmd, "hold")) {  // hold N MiB until the file argv[3] exists
        void *p;
        cudaError_t rc = cudaMalloc(&p, (size_t)atoi(argv[2]) << 20);
        printf("hold rc=%d\n", (int)rc);
        fflush(stdout);
        while (access(argv[3], F_OK) != 0) usleep(10000);
    } else if (!strcmp(cmd, "async")) {  // 200 rounds of 100 MiB async alloc/free, then fill
        cudaStream_t s;
        cudaStreamCreate(&s);
        int failures = 0;
        for (int i = 0; i < 200; i++) {
            void *p;
            if (cudaMallocAsync(&p, (size_t)100 << 20, s) != cudaSuccess) { failures++; continue; }
            cudaFreeAsync(p, s);
        }
        cudaStreamSynchronize(s);
        void *big;
        cudaError_t over = cudaMallocAsync(&big, (size_t)2 << 30, s);
        printf("async_failures=%d over_limit_rc=%d\n", failures, (int)over);
    } else if (!strcmp(cmd, "vmm")) {  // 4 x 512 MiB: create, map, release, keep the mapping
        CUdevice dev;
        cuCtxGetDevice(&dev);
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        int granted = 0;
        for (int i = 0; i < 4; i++) {
            CUmemGenericAllocationHandle h;
            CUdeviceptr va;
            if (cuMemCreate(&h, 512 * MiB, &prop, 0) != CUDA_SUCCESS) continue;
            cuMemAddressReserve(&va, 512 * MiB, 0, 0, 0);
            cuMemMap(va, 512 * MiB, 0, h, 0);
            cuMemRelease(h);
            granted++;
        }
        printf("vmm_granted=%d\n", granted);
    } else if (!strcmp(cmd, "pool")) {  // the pool keeps 768 MiB after cudaFreeAsync
        cudaMemPool_t pool;
        cudaDeviceGetDefaultMemPool(&pool, 0);
        unsigned long long keep = ~0ull;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        void *p, *q;
        cudaMallocAsync(&p, 768 * MiB, 0);
        cudaFreeAsync(p, 0);
        cudaDeviceSynchronize();
        printf("after_pool_rc=%d\n", (int)cudaMalloc(&q, 768 * MiB));
    } else if (!strcmp(cmd, "noctx")) {  // a stream's allocations with no current context
        CUstream s;
        cuStreamCreate(&s, 0);
        cuCtxSetCurrent(nullptr);
        int granted = 0;
        for (int i = 0; i < 4; i++) {
            CUdeviceptr p;
            granted += cuMemAllocAsync(&p, 512 * MiB, s) == CUDA_SUCCESS;
        }
        printf("noctx_granted=%d\n", granted);
    } else if (!strcmp(cmd, "contexts")) {  // created contexts, each with its own overhead
        CUdevice dev;
        cuCtxGetDevice(&dev);
        int created = 0;
        for (int i = 0; i < 32; i++) {
            CUcontext c;
#if CUDA_VERSION >= 13000
            if (cuCtxCreate(&c, nullptr, 0, dev) != CUDA_SUCCESS) break;
#else
            if (cuCtxCreate(&c, 0, dev) != CUDA_SUCCESS) break;
#endif
            created++;
        }
        printf("contexts_created=%d\n", created);
    } else if (!strcmp(cmd, "legacy")) {  // pre-3.2 cuMemAlloc with 32-bit sizes
        CUresult (*v1)(unsigned int *, unsigned int) = nullptr;
        cuGetProcAddress("cuMemAlloc", (void **)&v1, 2000, 0, nullptr);
        unsigned int a = 0, b = 0;
        int first = v1 ? (int)v1(&a, 600 * MiB) : -1, second = v1 ? (int)v1(&b, 600 * MiB) : -1;
        printf("legacy_first=%d legacy_second=%d\n", first, second);
    } else if (!strcmp(cmd, "graphmem")) {  // a captured cudaMallocAsync: a memory node
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        void *p, *q;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        cudaMallocAsync(&p, 768 * MiB, s);
        cudaStreamEndCapture(s, &graph);
        cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphLaunch(exec, s);
        cudaStreamSynchronize(s);
        printf("after_graph_rc=%d\n", (int)cudaMalloc(&q, 768 * MiB));
    } else if (!strcmp(cmd, "heap")) {
        printf("heap_rc=%d\n", (int)cudaDeviceSetLimit(cudaLimitMallocHeapSize, 2048 * MiB));
    } else if (!strcmp(cmd, "deepbind")) {  // argv[2]: a library with deepbind_alloc(bytes)
        void *lib = dlopen(argv[2], RTLD_NOW | RTLD_DEEPBIND);
        int (*alloc)(unsigned long long) =
            lib ? (int (*)(unsigned long long))dlsym(lib, "deepbind_alloc") : nullptr;
        int bypass = alloc ? alloc(600 * MiB) : -1;
        sleep(3);  // the watcher reconciles once a second
        void *q;
        printf("deepbind_rc=%d after_deepbind_rc=%d\n", bypass, (int)cudaMalloc(&q, 600 * MiB));
    } else if (!strcmp(cmd, "spin") || !strcmp(cmd, "graph") || !strcmp(cmd, "coop") ||
               !strcmp(cmd, "short")) {
        int seconds = argc > 2 ? atoi(argv[2]) : 20;
        int sms = 0, rate_khz = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&rate_khz, cudaDevAttrClockRate, 0);
        long long cycles = (long long)rate_khz * 10;  // ~10 ms per kernel
        int grid = sms * 4;
        if (!strcmp(cmd, "short")) {  // ~50 us kernels of 64 blocks
            cycles = (long long)rate_khz / 20;
            grid = 64;
        }
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaGraphExec_t exec = nullptr;
        if (!strcmp(cmd, "graph")) {
            cudaGraph_t graph;
            cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
            for (int k = 0; k < 10; k++)  // 10 kernels of ~1 ms
                spin<<<sms * 4, 256, 0, s>>>(cycles / 10);
            cudaStreamEndCapture(s, &graph);
            cudaGraphInstantiate(&exec, graph, 0);
        }
        time_t end = time(nullptr) + seconds;
        long launches = 0;
        while (time(nullptr) < end) {
            if (exec) {
                cudaGraphLaunch(exec, s);
            } else if (!strcmp(cmd, "coop")) {
                void *args[] = {&cycles};
                cudaLaunchCooperativeKernel((void *)spin, sms, 256, args, 0, s);
            } else {
                spin<<<grid, 256, 0, s>>>(cycles);
            }
            cudaStreamSynchronize(s);
            launches++;
        }
        printf("launches=%ld error=%d\n", launches, (int)cudaGetLastError());
    }
    return 0;
}
EOF

cd "$WORK" || exit 1
nvcc -O2 -o probe probe.cu -lcuda -ldl || { echo "FAIL nvcc probe"; exit 1; }
nvcc -O2 --default-stream per-thread -o probe_ptds probe.cu -lcuda -ldl || { echo "FAIL nvcc ptds"; exit 1; }
printf '%s\n' '#include <cuda.h>' \
    'extern "C" int deepbind_alloc(unsigned long long n) { CUdeviceptr p; return (int)cuMemAlloc(&p, n); }' \
    > deepbind.cu
nvcc -shared -Xcompiler -fPIC -o libdeepbind.so deepbind.cu -lcuda || { echo "FAIL nvcc deepbind"; exit 1; }
[ -n "${COMPILE_ONLY:-}" ] && { echo "compiled into $WORK"; exit 0; }

nvidia-smi -L || { echo "FAIL no GPU visible"; exit 1; }
region() { echo "$WORK/$1.cache"; }
limited() {  # limited NAME CMD... : run under a 1 GiB limit sharing region NAME
    local name="$1"; shift
    env LD_PRELOAD="$LIB" CUDA_DEVICE_MEMORY_LIMIT=1g \
        CUDA_DEVICE_MEMORY_SHARED_CACHE="$(region "$name")" "$@"
}
field() { sed -n "s/.*$1=\([-0-9]*\).*/\1/p" | head -1; }

out=$(./probe fill); echo "without library: $out"
out=$(limited fill ./probe fill); echo "with 1 GiB limit: $out"
granted=$(echo "$out" | field granted_mib)
# The context (a few hundred MiB on big GPUs) is charged too.
check "cudaMalloc stops at the limit (granted ${granted} MiB of 1024, context included)" \
    test "${granted:-0}" -ge 256 -a "${granted:-9999}" -le 1024
check "the refusal is an OOM (cudaErrorMemoryAllocation=2)" test "$(echo "$out" | field last_error)" = 2

out=$(limited meminfo ./probe meminfo); echo "$out"
check "cudaMemGetInfo total is the limit" test "$(echo "$out" | field total_mib)" = 1024
smi=$(limited smi nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
check "nvidia-smi total is the limit (${smi} MiB)" test "${smi// /}" = 1024

out=$(limited async ./probe async); echo "$out"
check "cudaMallocAsync loops do not leak" test "$(echo "$out" | field async_failures)" = 0
check "cudaMallocAsync past the limit is refused" test "$(echo "$out" | field over_limit_rc)" = 2

limited shared ./probe hold 300 "$WORK/go" > "$WORK/hold.out" &
holder=$!
for _ in $(seq 100); do grep -q 'hold rc=0' "$WORK/hold.out" 2>/dev/null && break; sleep 0.1; done
out=$(limited shared ./probe fill); echo "second process: $out"
touch "$WORK/go"; wait "$holder"
second=$(echo "$out" | field granted_mib)
check "a second process shares the limit (got ${second} MiB next to 300)" \
    test "${second:-9999}" -le 724 -a "$(grep -c 'hold rc=0' "$WORK/hold.out")" = 1

utilisation() {  # utilisation CMD... : mean GPU utilisation while CMD runs
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 > "$WORK/util" &
    local sampler=$!
    "$@" > /dev/null
    kill "$sampler"; wait "$sampler" 2>/dev/null
    tail -n +5 "$WORK/util" | awk '{s += $1; n++} END {printf "%d", n ? s / n : 0}'
}
sm() { env LD_PRELOAD="$LIB" CUDA_DEVICE_SM_LIMIT=30 GPU_CORE_UTILIZATION_POLICY="$1" \
         CUDA_DEVICE_MEMORY_SHARED_CACHE="$WORK/sm-$1-$2.cache" ./probe "$2" 20; }
full=$(utilisation ./probe spin 20); echo "unlimited spin: ${full} %"
for kind in short spin graph coop; do
    got=$(utilisation sm force "$kind"); echo "SM limit 30 (force, $kind): ${got} %"
    check "SM limit 30 holds for $kind launches (${got} %)" test "$got" -ge 25 -a "$got" -le 35
done
got=$(utilisation sm disable spin)
check "DISABLE policy does not limit (${got} % vs ${full} %)" test "$got" -ge $((full - 15))

# The ways around the limit: each is refused (or reconciled) under 1 GiB.
out=$(limited vmm ./probe vmm); echo "$out"
check "VMM memory mapped after cuMemRelease stays charged" test "$(echo "$out" | field vmm_granted)" -le 1
out=$(limited pool ./probe pool); echo "$out"
check "pool memory kept after cudaFreeAsync is charged" test "$(echo "$out" | field after_pool_rc)" = 2
out=$(limited noctx ./probe noctx); echo "$out"
check "a stream's allocations without a current context are charged" \
    test "$(echo "$out" | field noctx_granted)" -le 1
out=$(limited contexts ./probe contexts); echo "$out"
check "created contexts stop at the limit" test "$(echo "$out" | field contexts_created)" -lt 32
out=$(limited legacy ./probe legacy); echo "$out"
check "pre-3.2 cuMemAlloc is charged" test "$(echo "$out" | field legacy_second)" = 2
out=$(limited graphmem ./probe graphmem); echo "$out"
check "graph memory nodes are charged" test "$(echo "$out" | field after_graph_rc)" = 2
out=$(limited heap ./probe heap); echo "$out"
check "a device heap past the limit is refused" test "$(echo "$out" | field heap_rc)" = 2
out=$(limited deepbind ./probe deepbind "$WORK/libdeepbind.so"); echo "$out"
check "RTLD_DEEPBIND memory is reconciled" test "$(echo "$out" | field after_deepbind_rc)" = 2
limited hostpid ./probe hold 100 "$WORK/go-pid" > "$WORK/pid.out" &
holder=$!
for _ in $(seq 100); do grep -q 'hold rc=0' "$WORK/pid.out" 2>/dev/null && break; sleep 0.1; done
found=$(python3 -c 'import struct, sys; print(struct.unpack_from("<i", open(sys.argv[1], "rb").read(), 1860)[0])' "$(region hostpid)")
listed=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr -d ' ')
touch "$WORK/go-pid"; wait "$holder"
check "the host pid found (${found}) is one nvidia-smi lists" bash -c "grep -qx '$found' <<< '$listed'"

out=$(limited ptds ./probe_ptds fill); echo "per-thread default stream: $out"
check "a --default-stream per-thread build runs and is limited" \
    test "$(echo "$out" | field granted_mib)" -le 1024 -a "$(echo "$out" | field last_error)" = 2

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    out=$(limited torch python3 -c '
import torch
free, total = torch.cuda.mem_get_info()
print(f"total_mib={total >> 20}")
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("oom=0")
except torch.OutOfMemoryError:
    print("oom=1")
')
    echo "$out"
    check "torch.cuda.mem_get_info shows the limit" test "$(echo "$out" | field total_mib)" = 1024
    check "torch.empty past the limit raises OutOfMemoryError" test "$(echo "$out" | field oom)" = 1
else
    echo "SKIP PyTorch with CUDA is not installed"
fi

[ "$FAILED" = 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES above"
exit "$FAILED"
