#include <dlfcn.h>
#include <pthread.h>

#include "vgpu_hooks.h"
#include "vgpu_log.h"

struct vgpu_real vgpu_real;

#define VGPU_NAME(name) #name,
#define VGPU_ADDRESS(name) (void *)&name,
#define VGPU_COUNT(name) +1

enum { VGPU_HOOK_COUNT = 0 VGPU_CUDA_HOOKED(VGPU_COUNT) VGPU_NVML_HOOKED(VGPU_COUNT) };

static const char *const vgpu_hooked_names[VGPU_HOOK_COUNT] = {
    VGPU_CUDA_HOOKED(VGPU_NAME) VGPU_NVML_HOOKED(VGPU_NAME)};
static void *const vgpu_hooks[VGPU_HOOK_COUNT] = {
    VGPU_CUDA_HOOKED(VGPU_ADDRESS) VGPU_NVML_HOOKED(VGPU_ADDRESS)};
/* vgpu_reals[i] is the driver's address of vgpu_hooked_names[i]. */
static void *vgpu_reals[VGPU_HOOK_COUNT];

typedef void *(*vgpu_dlsym_fn)(void *, const char *);
static vgpu_dlsym_fn vgpu_glibc_dlsym;
static pthread_once_t vgpu_dlsym_once = PTHREAD_ONCE_INIT;

__attribute__((no_sanitize("address", "undefined"))) static void vgpu_find_glibc_dlsym(void)
{
    /* dlvsym is not hooked; RTLD_NEXT from here skips our own dlsym. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !vgpu_glibc_dlsym; i++)
        vgpu_glibc_dlsym = (vgpu_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

__attribute__((no_sanitize("address", "undefined"))) void *vgpu_real_dlsym(void *handle, const char *symbol)
{
    pthread_once(&vgpu_dlsym_once, vgpu_find_glibc_dlsym);
    return vgpu_glibc_dlsym ? vgpu_glibc_dlsym(handle, symbol) : NULL;
}

void vgpu_resolve(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NODELETE);
    if (cuda == NULL)
        vgpu_info("libcuda.so.1 not loadable: %s", dlerror());
    if (nvml == NULL)
        vgpu_info("libnvidia-ml.so.1 not loadable: %s", dlerror());
#define VGPU_FROM(library, name) \
    vgpu_real.name = library ? (__typeof__(vgpu_real.name))vgpu_real_dlsym(library, #name) : NULL;
#define VGPU_FROM_CUDA(name) VGPU_FROM(cuda, name)
#define VGPU_FROM_NVML(name) VGPU_FROM(nvml, name)
    VGPU_CUDA_HOOKED(VGPU_FROM_CUDA)
    VGPU_CUDA_USED(VGPU_FROM_CUDA)
    VGPU_NVML_HOOKED(VGPU_FROM_NVML)
    VGPU_NVML_USED(VGPU_FROM_NVML)
    int i = 0;
#define VGPU_REAL_ADDRESS(name) vgpu_reals[i++] = (void *)vgpu_real.name;
    VGPU_CUDA_HOOKED(VGPU_REAL_ADDRESS)
    VGPU_NVML_HOOKED(VGPU_REAL_ADDRESS)
}

void *vgpu_hook_for(void *real_address)
{
    if (real_address == NULL)
        return NULL;
    for (int i = 0; i < VGPU_HOOK_COUNT; i++)
        if (vgpu_reals[i] == real_address)
            return vgpu_hooks[i];
    return real_address;
}

/* strcmp without libc: sanitizer runtimes call dlsym before their strcmp works. */
__attribute__((no_sanitize("address", "undefined"))) int vgpu_same_name(const char *a,
                                                                         const char *b)
{
    while (*a != '\0' && *a == *b)
        a++, b++;
    return *a == *b;
}

__attribute__((no_sanitize("address", "undefined"))) void *vgpu_hook_named(const char *name)
{
    if (name == NULL || !((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v')))
        return NULL;
    for (int i = 0; i < VGPU_HOOK_COUNT; i++)
        if (vgpu_same_name(vgpu_hooked_names[i], name))
            return vgpu_hooks[i];
    return NULL;
}
