/* The workload benchmarks/libvgpu_overhead.py counts under callgrind: N cuMemAlloc/cuMemFree
 * pairs, or N cuLaunchKernel calls, after one warm-up of each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stub.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: vgpu_bench alloc|launch COUNT\n");
        return 2;
    }
    long count = strtol(argv[2], NULL, 10);
    CUcontext context;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&context, 0);
    cuCtxSetCurrent(context);
    CUdeviceptr p;
    int alloc = strcmp(argv[1], "alloc") == 0;
    for (long i = 0; i <= count; i++) {  /* iteration 0 warms up: lazy init, first slot */
        if (alloc) {
            if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
                return 1;
        } else if (cuLaunchKernel(NULL, 64, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) {
            return 1;
        }
    }
    return 0;
}
