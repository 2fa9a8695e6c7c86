#include "vgpu_limiter.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_log.h"
#include "vgpu_region.h"

#define VGPU_TICK_NS (100 * 1000 * 1000L)
#define VGPU_OBSERVE_TICKS 10 /* without a limited device: measure once a second */
#define VGPU_MAX_SAMPLES 256

struct vgpu_bucket {
    int64_t tokens;    /* blocks that may still be launched; may go one launch below zero */
    int64_t rate;      /* blocks added per tick, adapted to the measured utilisation */
    int64_t capacity;  /* hard bound on tokens and rate */
    int ready;
};

static struct vgpu_bucket vgpu_buckets[VGPU_MAX_DEVICES];
/* Devices this process launched on: their utilisation goes to our slot for the monitor. */
static int vgpu_observed[VGPU_MAX_DEVICES];
static pthread_mutex_t vgpu_bucket_mutex = PTHREAD_MUTEX_INITIALIZER;
static int vgpu_watcher_started;
static int64_t vgpu_recorded_second;
static unsigned long long vgpu_last_sample_us;

static void vgpu_pause(long nanoseconds)
{
    struct timespec pause = {nanoseconds / 1000000000L, nanoseconds % 1000000000L};
    nanosleep(&pause, NULL);
}

/* The container is active: the monitor counts recent_kernel > 0 as "launched lately". */
static void vgpu_note_kernel(struct vgpu_region_v1 *v1)
{
    int32_t recent = __atomic_load_n(&v1->recent_kernel, __ATOMIC_RELAXED);
    if (recent >= 0 && recent != 2)
        __atomic_compare_exchange_n(&v1->recent_kernel, &recent, 2, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec == __atomic_load_n(&vgpu_recorded_second, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&vgpu_recorded_second, (int64_t)now.tv_sec, __ATOMIC_RELAXED);
    uint64_t seen = __atomic_load_n(&v1->last_kernel_time, __ATOMIC_RELAXED);
    while (seen < (uint64_t)now.tv_sec &&
           !__atomic_compare_exchange_n(&v1->last_kernel_time, &seen, (uint64_t)now.tv_sec, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static int vgpu_attribute(CUdevice_attribute attribute, CUdevice device, int fallback)
{
    int value = 0;
    if (vgpu_real.cuDeviceGetAttribute == NULL ||
        vgpu_real.cuDeviceGetAttribute(&value, attribute, device) != CUDA_SUCCESS || value <= 0)
        return fallback;
    return value;
}

static unsigned long long vgpu_now_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000;
}

static int vgpu_container_pid(const struct vgpu_region_v1 *v1, unsigned pid)
{
    for (int i = 0; i < v1->proc_num && i < VGPU_MAX_PROCS; i++)
        if (v1->procs[i].status != VGPU_SLOT_FREE && (unsigned)v1->procs[i].hostpid == pid &&
            pid != 0)
            return 1;
    return 0;
}

static int vgpu_any_host_pid(const struct vgpu_region_v1 *v1)
{
    for (int i = 0; i < v1->proc_num && i < VGPU_MAX_PROCS; i++)
        if (v1->procs[i].status != VGPU_SLOT_FREE && v1->procs[i].hostpid != 0)
            return 1;
    return 0;
}

/* SM utilisation (percent) of the container's processes on `index` since the last tick; the
 * whole device's when no host pid is known (stricter, never looser). Also records our own
 * share in our slot for the monitor. */
static int64_t vgpu_measure(int index, struct vgpu_region_v1 *v1, unsigned long long since)
{
    nvmlDevice_t handle = vgpu_nvml_handle(index);
    if (handle == NULL)
        return 0;
    if (!vgpu_any_host_pid(v1)) {
        nvmlUtilization_t rates;
        if (vgpu_real.nvmlDeviceGetUtilizationRates == NULL ||
            vgpu_real.nvmlDeviceGetUtilizationRates(handle, &rates) != NVML_SUCCESS)
            return 0;
        return rates.gpu;
    }
    static nvmlProcessUtilizationSample_t samples[VGPU_MAX_SAMPLES];
    unsigned count = VGPU_MAX_SAMPLES;
    if (vgpu_real.nvmlDeviceGetProcessUtilization == NULL ||
        vgpu_real.nvmlDeviceGetProcessUtilization(handle, samples, &count, since) != NVML_SUCCESS)
        return 0;  /* NVML_ERROR_NOT_FOUND: no samples, nothing ran */
    int64_t total = 0, own = 0;
    struct vgpu_slot *slot = vgpu_own_slot();
    for (unsigned i = 0; i < count; i++) {
        if (!vgpu_container_pid(v1, samples[i].pid))
            continue;
        total += samples[i].smUtil;
        if (slot != NULL && (unsigned)slot->hostpid == samples[i].pid)
            own += samples[i].smUtil;
    }
    if (slot != NULL)
        __atomic_store_n(&slot->device_util[index].sm_util, (uint64_t)own, __ATOMIC_RELAXED);
    return total;
}

static void vgpu_refill(struct vgpu_bucket *bucket, int64_t limit, int64_t utilisation)
{
    /* Proportional control: a quarter of the capacity per 100 points of error and tick. */
    int64_t rate = bucket->rate + bucket->capacity * (limit - utilisation) / 400;
    int64_t least = bucket->capacity / 100 > 0 ? bucket->capacity / 100 : 1;
    bucket->rate = rate < least ? least : rate > bucket->capacity ? bucket->capacity : rate;
    int64_t tokens = __atomic_load_n(&bucket->tokens, __ATOMIC_RELAXED), next;
    do
        next = tokens + bucket->rate > bucket->capacity ? bucket->capacity : tokens + bucket->rate;
    while (!__atomic_compare_exchange_n(&bucket->tokens, &tokens, next, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

static void *vgpu_watch(void *unused)
{
    (void)unused;
    vgpu_inside = 1;  /* the watcher's own NVML and CUDA calls pass straight through */
    struct vgpu_region_v1 *v1 = &vgpu_region()->v1;
    for (unsigned tick = 1;; tick++) {
        vgpu_pause(VGPU_TICK_NS);
        int limiting = 0;
        for (int index = 0; index < VGPU_MAX_DEVICES; index++)
            limiting |= __atomic_load_n(&vgpu_buckets[index].ready, __ATOMIC_ACQUIRE);
        if (!limiting && tick % VGPU_OBSERVE_TICKS != 0)
            continue;
        unsigned long long now = vgpu_now_us();
        for (int index = 0; index < VGPU_MAX_DEVICES; index++) {
            if (!__atomic_load_n(&vgpu_observed[index], __ATOMIC_ACQUIRE))
                continue;
            int64_t used = vgpu_measure(index, v1, vgpu_last_sample_us);
            struct vgpu_bucket *bucket = &vgpu_buckets[index];
            if (__atomic_load_n(&bucket->ready, __ATOMIC_ACQUIRE))
                vgpu_refill(bucket, (int64_t)v1->sm_limit[index], used);
        }
        vgpu_last_sample_us = now;
        if (tick % VGPU_OBSERVE_TICKS == 0 && vgpu_memory_mode() == VGPU_MEMORY_ACCOUNT)
            vgpu_reconcile();
        vgpu_reap_dead(0);
    }
    return NULL;
}

static void vgpu_start_watcher(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  /* the user's signals stay with the user's threads */
    pthread_t thread;
    if (pthread_create(&thread, NULL, vgpu_watch, NULL) == 0) {
        pthread_setname_np(thread, "vgpu-limiter");
        pthread_detach(thread);
    } else {
        vgpu_error("cannot start the SM limiter thread; launches on limited devices will wait");
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static struct vgpu_bucket *vgpu_bucket_for(int index, uint64_t limit)
{
    struct vgpu_bucket *bucket = &vgpu_buckets[index];
    if (__atomic_load_n(&bucket->ready, __ATOMIC_ACQUIRE))
        return bucket;
    pthread_mutex_lock(&vgpu_bucket_mutex);
    if (!bucket->ready) {
        CUdevice device;
        vgpu_inside++;
        int have = vgpu_real.cuCtxGetDevice != NULL && vgpu_real.cuCtxGetDevice(&device) == 0;
        int sms = have ? vgpu_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device, 1) : 1;
        int threads = have ? vgpu_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                            device, 2048)
                           : 2048;
        vgpu_inside--;
        bucket->capacity = (int64_t)sms * threads;
        /* Limited from the first launch: start at the limit's share, not empty or full. */
        bucket->rate = bucket->capacity * (int64_t)limit / 100;
        bucket->tokens = bucket->rate;
        __atomic_store_n(&bucket->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&vgpu_bucket_mutex);
    return bucket;
}

void vgpu_watcher_ensure(void)
{
    if (__atomic_load_n(&vgpu_watcher_started, __ATOMIC_ACQUIRE))
        return;
    vgpu_own_slot();  /* the watcher sums utilisation over the container's slots */
    pthread_mutex_lock(&vgpu_bucket_mutex);
    if (!vgpu_watcher_started) {
        vgpu_last_sample_us = vgpu_now_us();
        vgpu_start_watcher();
        __atomic_store_n(&vgpu_watcher_started, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&vgpu_bucket_mutex);
}

/* Measure `index` from now on (and start the watcher the first time). */
static void vgpu_observe(int index)
{
    if (__atomic_load_n(&vgpu_observed[index], __ATOMIC_ACQUIRE))
        return;
    vgpu_watcher_ensure();
    __atomic_store_n(&vgpu_observed[index], 1, __ATOMIC_RELEASE);
}

static int vgpu_switch_on(const struct vgpu_region_v1 *v1, enum vgpu_policy policy)
{
    return policy == VGPU_POLICY_FORCE ||
           __atomic_load_n(&v1->utilization_switch, __ATOMIC_RELAXED) != 0;
}

void vgpu_kernel_gate(uint64_t blocks)
{
    struct vgpu_region *region = vgpu_region();
    if (region == NULL)
        return;
    struct vgpu_region_v1 *v1 = &region->v1;
    enum vgpu_policy policy = vgpu_settings()->policy;
    int index = vgpu_current_index();
    if (index < 0) {
        vgpu_note_kernel(v1);
        return;  /* no context: the driver refuses the launch itself */
    }
    vgpu_observe(index);
    uint64_t limit = v1->sm_limit[index];
    if (limit == 0 || limit >= 100 || policy == VGPU_POLICY_DISABLE) {
        vgpu_note_kernel(v1);
        return;
    }
    while (__atomic_load_n(&v1->recent_kernel, __ATOMIC_RELAXED) < 0)
        vgpu_pause(VGPU_TICK_NS);  /* a higher-priority container is busy on our GPU */
    vgpu_note_kernel(v1);
    if (!vgpu_switch_on(v1, policy))
        return;
    struct vgpu_bucket *bucket = vgpu_bucket_for(index, limit);
    while (__atomic_load_n(&bucket->tokens, __ATOMIC_RELAXED) <= 0) {
        vgpu_pause(VGPU_TICK_NS / 50);
        if (!vgpu_switch_on(v1, policy))
            return;
    }
    __atomic_sub_fetch(&bucket->tokens, (int64_t)(blocks ? blocks : 1), __ATOMIC_RELAXED);
}

void vgpu_limiter_forget(void)
{
    pthread_mutex_init(&vgpu_bucket_mutex, NULL);
    vgpu_watcher_started = 0;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        vgpu_buckets[i] = (struct vgpu_bucket){0};
        vgpu_observed[i] = 0;
    }
}
