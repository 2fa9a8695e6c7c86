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
#include <cooperative_groups.h>
#include <cuda_runtime.h>

__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}

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
    } else if (!strcmp(cmd, "spin") || !strcmp(cmd, "graph") || !strcmp(cmd, "coop")) {
        int seconds = argc > 2 ? atoi(argv[2]) : 20;
        int sms = 0, rate_khz = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&rate_khz, cudaDevAttrClockRate, 0);
        long long cycles = (long long)rate_khz * 10;  // ~10 ms per kernel
        cudaStream_t s;
        cudaStreamCreate(&s);
        cudaGraphExec_t exec = nullptr;
        if (!strcmp(cmd, "graph")) {
            cudaGraph_t graph;
            cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
            spin<<<sms * 4, 256, 0, s>>>(cycles);
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
                spin<<<sms * 4, 256, 0, s>>>(cycles);
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
nvcc -O2 -o probe probe.cu || { echo "FAIL nvcc probe"; exit 1; }
nvcc -O2 --default-stream per-thread -o probe_ptds probe.cu || { echo "FAIL nvcc ptds"; exit 1; }
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
for kind in spin graph coop; do
    got=$(utilisation sm force "$kind"); echo "SM limit 30 (force, $kind): ${got} %"
    check "SM limit 30 holds for $kind launches (${got} %)" test "$got" -ge 20 -a "$got" -le 40
done
got=$(utilisation sm disable spin)
check "DISABLE policy does not limit (${got} % vs ${full} %)" test "$got" -ge $((full - 15))

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
