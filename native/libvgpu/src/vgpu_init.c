#include "vgpu_init.h"

#include <pthread.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_limiter.h"
#include "vgpu_log.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

__thread int vgpu_inside;

static pthread_once_t vgpu_once = PTHREAD_ONCE_INIT;
static struct vgpu_config vgpu_config;
static enum vgpu_memory_mode vgpu_mode;
static int vgpu_refusal_reported;

static int vgpu_any_limit(const struct vgpu_config *config)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++)
        if (config->memory_limit[i] != 0 || config->sm_limit[i] < 100)
            return 1;
    return 0;
}

static void vgpu_before_fork(void)
{
    vgpu_alloc_lock_all();
}

static void vgpu_after_fork_parent(void)
{
    vgpu_alloc_unlock_all();
}

static void vgpu_after_fork_child(void)
{
    /* The child starts with nothing of its own: no device memory, no slot, no watcher. */
    vgpu_alloc_reset();
    vgpu_region_forget_slot();
    vgpu_limiter_forget();
    vgpu_contexts_forget();
    vgpu_pools_forget();
}

static void vgpu_init(void)
{
    vgpu_inside++;
    vgpu_config_load(&vgpu_config);
    vgpu_resolve();
    if (vgpu_config.broken) {
        vgpu_mode = VGPU_MEMORY_REFUSE;
    } else if (vgpu_region_attach(&vgpu_config) == 0) {
        vgpu_mode = VGPU_MEMORY_ACCOUNT;
    } else {
        vgpu_mode = vgpu_any_limit(&vgpu_config) ? VGPU_MEMORY_REFUSE : VGPU_MEMORY_PASS;
    }
    pthread_atfork(vgpu_before_fork, vgpu_after_fork_parent, vgpu_after_fork_child);
    vgpu_inside--;
}

void vgpu_init_once(void)
{
    pthread_once(&vgpu_once, vgpu_init);
}

const struct vgpu_config *vgpu_settings(void)
{
    return &vgpu_config;
}

enum vgpu_memory_mode vgpu_memory_mode(void)
{
    return vgpu_mode;
}

void vgpu_report_refusal(void)
{
    if (__atomic_exchange_n(&vgpu_refusal_reported, 1, __ATOMIC_RELAXED))
        return;
    if (vgpu_config.broken)
        vgpu_error("refusing device memory: %s", vgpu_config.problem);
    else
        vgpu_error("refusing device memory: limits are set but the shared region %s is unusable",
                   vgpu_config.cache_path);
}

__attribute__((destructor)) static void vgpu_fini(void)
{
    vgpu_region_leave();
}
