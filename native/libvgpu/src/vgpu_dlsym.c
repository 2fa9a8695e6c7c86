/* Handing out hooks: the dlsym hook and the cuGetProcAddress filters.
 *
 * Both ask the real resolver first, with the caller's own arguments, and only swap a result
 * that is the real address of a hooked entry for that hook. So versions (cuMemPrefetchAsync vs
 * _v2), per-thread-stream variants (_ptsz) and names libvgpu does not hook come back exactly as
 * the driver gives them. */
#include <dlfcn.h>
#include <link.h>

#include "vgpu_hooks.h"
#include "vgpu_init.h"

/* Sanitizer runtimes call dlsym before they are set up, so this path is never instrumented. */
#define VGPU_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))

VGPU_UNINSTRUMENTED static struct link_map *vgpu_object_of(const void *address)
{
    Dl_info info;
    struct link_map *map = NULL;
    return dladdr1(address, &info, (void **)&map, RTLD_DL_LINKMAP) ? map : NULL;
}

/* Whether `later` comes after `object` in load order (the link_map chain). */
VGPU_UNINSTRUMENTED static int vgpu_comes_after(const struct link_map *object,
                                                const struct link_map *later)
{
    for (const struct link_map *map = object->l_next; map != NULL; map = map->l_next)
        if (map == later)
            return 1;
    return 0;
}

/* The definition `object` itself has of `symbol`, if any. dlopen of a loaded object gives its
 * handle with a usable search list; the vdso has none and is skipped. */
VGPU_UNINSTRUMENTED static void *vgpu_defined_in(struct link_map *object, const char *symbol)
{
    void *handle = object->l_name[0] ? dlopen(object->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (handle == NULL)
        return NULL;
    void *found = vgpu_real_dlsym(handle, symbol);
    dlclose(handle);
    return found != NULL && vgpu_object_of(found) == object ? found : NULL;
}

VGPU_UNINSTRUMENTED static void *vgpu_first_from(struct link_map *map, const struct link_map *stop,
                                                 const char *symbol)
{
    for (; map != NULL && map != stop; map = map->l_next) {
        void *found = vgpu_defined_in(map, symbol);
        if (found != NULL)
            return found;
    }
    return NULL;
}

/* dlsym(RTLD_NEXT, ...) answered for the real caller: the first definition in an object loaded
 * after the caller's. glibc would compute "next" from libvgpu's position; that answer is kept
 * whenever it is also right for the caller, so the slow walk is rare. */
VGPU_UNINSTRUMENTED static void *vgpu_next_after(const void *caller, const char *symbol)
{
    void *after_us = vgpu_real_dlsym(RTLD_NEXT, symbol);
    struct link_map *from = vgpu_object_of(caller), *self = vgpu_object_of((void *)vgpu_object_of);
    if (from == NULL || self == NULL || from == self)
        return after_us;  /* code outside any object (JIT): the best answer there is */
    if (vgpu_comes_after(from, self)) {  /* an earlier preload or the program itself */
        void *found = vgpu_first_from(from->l_next, self, symbol);
        if (found != NULL)
            return found;
        found = vgpu_same_name(symbol, "dlsym") ? (void *)dlsym : vgpu_hook_named(symbol);
        return found != NULL ? found : after_us;
    }
    struct link_map *owner = after_us ? vgpu_object_of(after_us) : NULL;
    if (owner != NULL && vgpu_comes_after(from, owner))
        return after_us;
    return vgpu_first_from(from->l_next, NULL, symbol);
}

VGPU_UNINSTRUMENTED VGPU_EXPORT void *dlsym(void *handle, const char *symbol)
{
    void *found = handle == RTLD_NEXT ? vgpu_next_after(__builtin_return_address(0), symbol)
                                      : vgpu_real_dlsym(handle, symbol);
    /* Names we do not hook return before touching TLS (sanitizers intercept __tls_get_addr). */
    if (found == NULL || vgpu_hook_named(symbol) == NULL || vgpu_inside)
        return found;
    vgpu_init_once();
    return vgpu_hook_for(found);
}

VGPU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
    vgpu_init_once();
    if (vgpu_real.cuGetProcAddress == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = vgpu_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn != NULL && !vgpu_inside)
        *pfn = vgpu_hook_for(*pfn);
    return rc;
}

VGPU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    vgpu_init_once();
    if (vgpu_real.cuGetProcAddress_v2 == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = vgpu_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    if (rc == CUDA_SUCCESS && pfn != NULL && !vgpu_inside)
        *pfn = vgpu_hook_for(*pfn);
    return rc;
}
