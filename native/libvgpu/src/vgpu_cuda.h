/* The CUDA driver API as the driver itself sees it.
 *
 * __CUDA_API_VERSION_INTERNAL turns off cuda.h's renaming macros (cuMemAlloc -> cuMemAlloc_v2,
 * cuLaunchKernel -> cuLaunchKernel_ptsz, ...) and declares every exported name, legacy and
 * per-thread-stream variants included, so a hook can be defined under each exact driver name. */
#ifndef VGPU_CUDA_H
#define VGPU_CUDA_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#if CUDA_VERSION < 12000
#error "libvgpu needs the CUDA 12 or 13 cuda.h (cuGetProcAddress_v2, cuLaunchKernelEx)"
#endif

#endif
