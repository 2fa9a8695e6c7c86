/* Every launch path goes through the limiter gate, per-thread-stream variants included. */
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_limiter.h"
#include "vgpu_pool.h"

static uint64_t vgpu_blocks(unsigned x, unsigned y, unsigned z)
{
    return (uint64_t)x * y * z;
}

#define VGPU_LAUNCH(name)                                                                   \
    VGPU_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
                              unsigned int bx, unsigned int by, unsigned int bz,            \
                              unsigned int shared, CUstream stream, void **params,          \
                              void **extra)                                                 \
    {                                                                                       \
        VGPU_ENTER(name, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);         \
        vgpu_kernel_gate(vgpu_blocks(gx, gy, gz));                                          \
        return vgpu_real.name(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);    \
    }

VGPU_LAUNCH(cuLaunchKernel)
VGPU_LAUNCH(cuLaunchKernel_ptsz)

#define VGPU_LAUNCH_COOPERATIVE(name)                                                       \
    VGPU_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
                              unsigned int bx, unsigned int by, unsigned int bz,            \
                              unsigned int shared, CUstream stream, void **params)          \
    {                                                                                       \
        VGPU_ENTER(name, f, gx, gy, gz, bx, by, bz, shared, stream, params);                \
        vgpu_kernel_gate(vgpu_blocks(gx, gy, gz));                                          \
        return vgpu_real.name(f, gx, gy, gz, bx, by, bz, shared, stream, params);           \
    }

VGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
VGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define VGPU_LAUNCH_EX(name)                                                                 \
    VGPU_EXPORT CUresult name(const CUlaunchConfig *config, CUfunction f, void **params,     \
                              void **extra)                                                  \
    {                                                                                        \
        VGPU_ENTER(name, config, f, params, extra);                                          \
        vgpu_kernel_gate(config ? vgpu_blocks(config->gridDimX, config->gridDimY,            \
                                              config->gridDimZ)                              \
                                : 1);                                                        \
        return vgpu_real.name(config, f, params, extra);                                     \
    }

VGPU_LAUNCH_EX(cuLaunchKernelEx)
VGPU_LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* A graph's kernels are not visible here: it waits like any launch while the bucket is empty,
 * and costs one block. Its memory nodes may have grown the device's graph memory. */
#define VGPU_GRAPH_LAUNCH(name)                                         \
    VGPU_EXPORT CUresult name(CUgraphExec graph, CUstream stream)       \
    {                                                                   \
        VGPU_ENTER(name, graph, stream);                                \
        vgpu_kernel_gate(1);                                            \
        CUresult rc = vgpu_real.name(graph, stream);                    \
        vgpu_graph_memory_settle();                                     \
        return rc;                                                      \
    }

VGPU_GRAPH_LAUNCH(cuGraphLaunch)
VGPU_GRAPH_LAUNCH(cuGraphLaunch_ptsz)
