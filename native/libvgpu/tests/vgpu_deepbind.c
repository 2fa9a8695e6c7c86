/* A library that allocates device memory the way a library loaded with RTLD_DEEPBIND does:
 * its references bind to its own dependencies (the driver) before any preload, so libvgpu's
 * hooks never see the call. */
#include "stub.h"

int deepbind_alloc(unsigned long long bytes)
{
    CUdeviceptr pointer;
    return (int)cuMemAlloc_v2(&pointer, bytes);
}
