/* Every launch path goes through the limiter gate, per-thread-stream variants included. A
 * launch is charged its kernel's estimated duration; a graph launch, its kernels' (read when
 * the graph is instantiated). */
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_limiter.h"
#include "vgpu_pool.h"

static uint64_t vgpu_count(unsigned x, unsigned y, unsigned z)
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
        vgpu_kernel_gate(f, vgpu_count(gx, gy, gz), vgpu_count(bx, by, bz));                \
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
        vgpu_kernel_gate(f, vgpu_count(gx, gy, gz), vgpu_count(bx, by, bz));                \
        return vgpu_real.name(f, gx, gy, gz, bx, by, bz, shared, stream, params);           \
    }

VGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
VGPU_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)

#define VGPU_LAUNCH_EX(name)                                                                 \
    VGPU_EXPORT CUresult name(const CUlaunchConfig *config, CUfunction f, void **params,     \
                              void **extra)                                                  \
    {                                                                                        \
        VGPU_ENTER(name, config, f, params, extra);                                          \
        if (config != NULL)                                                                  \
            vgpu_kernel_gate(f, vgpu_count(config->gridDimX, config->gridDimY,               \
                                           config->gridDimZ),                                \
                             vgpu_count(config->blockDimX, config->blockDimY,                \
                                        config->blockDimZ));                                 \
        return vgpu_real.name(config, f, params, extra);                                     \
    }

VGPU_LAUNCH_EX(cuLaunchKernelEx)
VGPU_LAUNCH_EX(cuLaunchKernelEx_ptsz)

/* A graph's memory nodes may also have grown the device's graph memory. */
#define VGPU_GRAPH_LAUNCH(name)                                         \
    VGPU_EXPORT CUresult name(CUgraphExec graph, CUstream stream)       \
    {                                                                   \
        VGPU_ENTER(name, graph, stream);                                \
        vgpu_graph_gate(graph);                                         \
        CUresult rc = vgpu_real.name(graph, stream);                    \
        vgpu_graph_memory_settle();                                     \
        return rc;                                                      \
    }

VGPU_GRAPH_LAUNCH(cuGraphLaunch)
VGPU_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

VGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                                 unsigned long long flags)
{
    VGPU_ENTER(cuGraphInstantiateWithFlags, exec, graph, flags);
    CUresult rc = vgpu_real.cuGraphInstantiateWithFlags(exec, graph, flags);
    if (rc == CUDA_SUCCESS)
        vgpu_graph_instantiated(*exec, graph);
    return rc;
}

VGPU_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    VGPU_ENTER(cuGraphInstantiateWithParams, exec, graph, params);
    CUresult rc = vgpu_real.cuGraphInstantiateWithParams(exec, graph, params);
    if (rc == CUDA_SUCCESS)
        vgpu_graph_instantiated(*exec, graph);
    return rc;
}

VGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    VGPU_ENTER(cuGraphExecDestroy, exec);
    CUresult rc = vgpu_real.cuGraphExecDestroy(exec);
    if (rc == CUDA_SUCCESS)
        vgpu_graph_destroyed(exec);
    return rc;
}
