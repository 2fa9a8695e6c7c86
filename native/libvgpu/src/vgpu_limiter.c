#include "vgpu_limiter.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_log.h"
#include "vgpu_region.h"

#define VGPU_TICK_NS (100 * 1000 * 1000L)
#define VGPU_OBSERVE_TICKS 10 /* without a limited device: measure once a second */
#define VGPU_MAX_SAMPLES 256
#define VGPU_FUNCTIONS 4096   /* kernels whose duration is learned (a power of two) */
#define VGPU_PROBES 32
/* Until measured, a kernel wave is taken to last this long: deliberately long, so that a new
 * kernel starts under its limit, not over it, and the measurement shortens it. */
#define VGPU_PRIOR_NS (20 * 1000 * 1000LL)
#define VGPU_LEAST_NS 1000LL               /* bounds of a learned duration per wave */
#define VGPU_MOST_NS (10 * 1000 * 1000 * 1000LL)
/* NVML time a correction is based on: a large error is corrected after VGPU_LEARN_US, a small
 * one (within 25 %) only after VGPU_SETTLE_US, where the lag between launches and their
 * measurement weighs less. */
#define VGPU_LEARN_US (300 * 1000)
#define VGPU_SETTLE_US (1000 * 1000)

/* A kernel (CUfunction, or a graph without visible kernels) and what one wave of it lasts. */
struct vgpu_function {
    uintptr_t key;       /* 0: a free entry */
    int index;           /* the device it runs on */
    int64_t ns_per_wave; /* learned */
    int64_t pending_ns;  /* non-zero: launched since the last correction */
    int measured;        /* corrected at least once */
};

/* Estimated device busy time per 10 ms of the clock: each launch is placed where it would run
 * (after the kernels launched before it, by their estimates), so that what NVML measured over
 * its sample periods is compared with what was estimated to run in the very same time. */
#define VGPU_SLOT_MS 10
#define VGPU_SLOTS 512 /* 5 s of history */

struct vgpu_spent {
    int64_t epoch; /* the 10 ms period this slot holds */
    int64_t ns;
};

/* Per device: a budget of device time (ns), refilled every tick at the limit's share of the
 * tick, spent by each launch at its estimated duration. */
struct vgpu_bucket {
    int64_t tokens; /* may go one launch below zero */
    int64_t refill; /* ns per tick: limit x tick x share; also the bound on tokens */
    int64_t limit;  /* percent */
    double share;   /* this process's part of the container's limit, from NVML */
    int sms, threads_per_sm;
    int ready;
    /* NVML since the last correction: from when, up to which sample, this process's busy time */
    unsigned long long window_from_us;
    unsigned long long last_seen_us;
    uint64_t busy_us;
    int64_t queue_end_ns; /* when the launched kernels would be done, by their estimates */
    struct vgpu_spent spent[VGPU_SLOTS];
};

static struct vgpu_bucket vgpu_buckets[VGPU_MAX_DEVICES];
static struct vgpu_function vgpu_functions[VGPU_FUNCTIONS];
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

/* --- learned kernel durations ------------------------------------------------------------ */

static struct vgpu_function *vgpu_function_of(uintptr_t key, int index)
{
    key = key != 0 ? key : 1;  /* NULL functions share one entry (1 is no valid address) */
    size_t at = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 52) & (VGPU_FUNCTIONS - 1);
    for (int probe = 0; probe < VGPU_PROBES; probe++, at = (at + 1) & (VGPU_FUNCTIONS - 1)) {
        struct vgpu_function *entry = &vgpu_functions[at];
        uintptr_t seen = __atomic_load_n(&entry->key, __ATOMIC_ACQUIRE);
        if (seen == key)
            return entry;
        if (seen != 0)
            continue;
        entry->index = index;
        entry->ns_per_wave = VGPU_PRIOR_NS;
        if (__atomic_compare_exchange_n(&entry->key, &seen, key, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) ||
            seen == key)
            return entry;
    }
    return &vgpu_functions[0];  /* a full neighbourhood: share a neighbour's estimate */
}

/* Waves a grid takes on the device: how many times its threads fill every SM. */
static int64_t vgpu_waves(const struct vgpu_bucket *bucket, uint64_t blocks, uint64_t threads)
{
    uint64_t resident = (uint64_t)bucket->sms * (uint64_t)bucket->threads_per_sm;
    uint64_t total = blocks * (threads ? threads : 1);
    uint64_t waves = resident ? (total + resident - 1) / resident : 1;
    return waves ? (int64_t)waves : 1;
}

static int64_t vgpu_epoch(unsigned long long us)
{
    return (int64_t)(us / (VGPU_SLOT_MS * 1000));
}

static void vgpu_add_spent(struct vgpu_bucket *bucket, int64_t epoch, int64_t ns)
{
    struct vgpu_spent *slot = &bucket->spent[epoch % VGPU_SLOTS];
    int64_t seen = __atomic_load_n(&slot->epoch, __ATOMIC_ACQUIRE);
    if (seen != epoch && __atomic_compare_exchange_n(&slot->epoch, &seen, epoch, 0,
                                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        __atomic_store_n(&slot->ns, 0, __ATOMIC_RELEASE);  /* a period long gone */
    __atomic_add_fetch(&slot->ns, ns, __ATOMIC_RELAXED);
}

static int64_t vgpu_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    return (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Place a launch of `cost` ns on the estimated timeline of the device. */
static void vgpu_note_spent(struct vgpu_bucket *bucket, int64_t cost)
{
    const int64_t slot_ns = VGPU_SLOT_MS * 1000000LL;
    int64_t now = vgpu_now_ns(), start = __atomic_load_n(&bucket->queue_end_ns, __ATOMIC_RELAXED);
    int64_t from;
    do
        from = start > now ? start : now;
    while (!__atomic_compare_exchange_n(&bucket->queue_end_ns, &start, from + cost, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    int64_t to = from + cost;
    if (to - from > (int64_t)VGPU_SLOTS * slot_ns)
        from = to - (int64_t)VGPU_SLOTS * slot_ns;  /* beyond the history kept */
    while (from < to) {
        int64_t epoch = from / slot_ns, end = (epoch + 1) * slot_ns;
        int64_t part = (end < to ? end : to) - from;
        vgpu_add_spent(bucket, epoch, part);
        from += part;
    }
}

/* Estimated device time launched in (from, to], microseconds of the clock. */
static int64_t vgpu_spent_between(const struct vgpu_bucket *bucket, unsigned long long from,
                                  unsigned long long to)
{
    int64_t spent = 0, last = vgpu_epoch(to), first = vgpu_epoch(from) + 1;
    if (last - first >= VGPU_SLOTS)
        first = last - VGPU_SLOTS + 1;
    for (int64_t epoch = first; epoch <= last; epoch++) {
        const struct vgpu_spent *slot = &bucket->spent[epoch % VGPU_SLOTS];
        if (__atomic_load_n(&slot->epoch, __ATOMIC_ACQUIRE) == epoch)
            spent += __atomic_load_n(&slot->ns, __ATOMIC_RELAXED);
    }
    return spent;
}

/* The estimated device time of one kernel launch; `*unmeasured` is set when its duration is
 * still the prior. */
static int64_t vgpu_cost(struct vgpu_bucket *bucket, int index, uintptr_t key, uint64_t blocks,
                         uint64_t threads, int *unmeasured)
{
    struct vgpu_function *function = vgpu_function_of(key, index);
    __atomic_store_n(&function->pending_ns, 1, __ATOMIC_RELAXED);  /* launched lately */
    *unmeasured |= !__atomic_load_n(&function->measured, __ATOMIC_RELAXED);
    return vgpu_waves(bucket, blocks, threads) *
           __atomic_load_n(&function->ns_per_wave, __ATOMIC_RELAXED);
}

static int vgpu_switch_on(const struct vgpu_region_v1 *v1, enum vgpu_policy policy);

/* Wait for device time, then spend `cost` of it, placed on the estimated timeline. A launch
 * whose kernels are not measured yet costs at most one tick's budget: the prior errs long, and
 * a single launch must not hold the gate shut for many ticks before the first measurement. */
static void vgpu_spend(struct vgpu_bucket *bucket, int64_t cost, int unmeasured)
{
    const struct vgpu_region_v1 *v1 = &vgpu_region()->v1;
    enum vgpu_policy policy = vgpu_settings()->policy;
    if (unmeasured && cost > bucket->refill)
        cost = bucket->refill;
    vgpu_note_spent(bucket, cost);
    while (__atomic_load_n(&bucket->tokens, __ATOMIC_RELAXED) <= 0) {
        vgpu_pause(VGPU_TICK_NS / 50);
        if (!vgpu_switch_on(v1, policy))
            return;
    }
    __atomic_sub_fetch(&bucket->tokens, cost, __ATOMIC_RELAXED);
}

/* NVML measured `busy_us` of this process's kernels over `covered_us`, in which its launches
 * were estimated to take `spent` ns: scale the durations of the kernels launched lately by
 * measured / estimated. A small error waits for `settled` (more time covered). 1 when
 * corrected. */
static int vgpu_correct(struct vgpu_bucket *bucket, int index, uint64_t busy_us,
                        uint64_t covered_us, int64_t spent, int settled)
{
    double ratio = spent > 0 ? (double)busy_us * 1000.0 / (double)spent : 1.0;
    /* A saturated device says only "at least": never shorten on it. */
    if (busy_us * 100 >= covered_us * 99 && ratio < 1.0)
        ratio = 1.0;
    /* Too little launched to tell; a single outlier window moves an estimate at most 64x, and
     * one close to right only half way (the measurement lags the launches). */
    if (spent < (int64_t)covered_us * 10)  /* under 1 % of the time */
        ratio = 1.0;
    /* NVML's whole percents cannot tell how short a barely measurable kernel is. */
    double least = busy_us * 50 < covered_us ? 1.0 / 16 : 1.0 / 64;
    ratio = ratio < least ? least : ratio > 64 ? 64 : ratio;
    if (ratio > 0.8 && ratio < 1.25) {
        if (!settled)
            return 0;
        ratio = (1.0 + ratio) / 2.0;
    }
    vgpu_debug("device %d: measured %llu us busy in %llu us, estimated %lld us: durations x %.3f",
               index, (unsigned long long)busy_us, (unsigned long long)covered_us,
               (long long)(spent / 1000), ratio);
    /* What is still queued by the old estimates is queued by the new ones. */
    const int64_t slot_ns = VGPU_SLOT_MS * 1000000LL;
    int64_t now = vgpu_now_ns(), queued = __atomic_load_n(&bucket->queue_end_ns, __ATOMIC_RELAXED);
    if (queued > now) {
        __atomic_store_n(&bucket->queue_end_ns, now + (int64_t)((double)(queued - now) * ratio),
                         __ATOMIC_RELAXED);
        for (int64_t epoch = now / slot_ns + 1, last = queued / slot_ns;
             epoch <= last && epoch < now / slot_ns + VGPU_SLOTS; epoch++) {
            struct vgpu_spent *slot = &bucket->spent[epoch % VGPU_SLOTS];
            if (__atomic_load_n(&slot->epoch, __ATOMIC_ACQUIRE) == epoch)
                __atomic_store_n(&slot->ns,
                                 (int64_t)((double)__atomic_load_n(&slot->ns, __ATOMIC_RELAXED) *
                                           ratio),
                                 __ATOMIC_RELAXED);
        }
    }
    for (int i = 0; i < VGPU_FUNCTIONS; i++) {
        struct vgpu_function *function = &vgpu_functions[i];
        if (function->key == 0 || function->index != index ||
            __atomic_exchange_n(&function->pending_ns, 0, __ATOMIC_RELAXED) == 0)
            continue;  /* not launched since the last correction */
        double next = (double)__atomic_load_n(&function->ns_per_wave, __ATOMIC_RELAXED) * ratio;
        __atomic_store_n(&function->measured, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&function->ns_per_wave,
                         next < VGPU_LEAST_NS   ? VGPU_LEAST_NS
                         : next > VGPU_MOST_NS ? VGPU_MOST_NS
                                               : (int64_t)next,
                         __ATOMIC_RELAXED);
    }
    return 1;
}

/* --- measuring --------------------------------------------------------------------------- */

struct vgpu_reading {
    int fresh;             /* NVML had samples newer than the last reading */
    unsigned long long newest_us;
    int64_t own;           /* percent, this process */
    int64_t container;     /* percent, the container's processes together */
};

/* What NVML reports since `since` for `index`: this process's and the container's SM
 * utilisation (the whole device's when no host pid is known: stricter, never looser). Also
 * records our own share in our slot for the monitor. Not fresh when NVML has no new sample:
 * the last measurement then stands. */
static struct vgpu_reading vgpu_measure(int index, struct vgpu_region_v1 *v1,
                                        unsigned long long since)
{
    struct vgpu_reading reading = {0};
    nvmlDevice_t handle = vgpu_nvml_handle(index);
    if (handle == NULL)
        return reading;
    if (!vgpu_any_host_pid(v1)) {
        nvmlUtilization_t rates;
        if (vgpu_real.nvmlDeviceGetUtilizationRates == NULL ||
            vgpu_real.nvmlDeviceGetUtilizationRates(handle, &rates) != NVML_SUCCESS)
            return reading;
        return (struct vgpu_reading){1, vgpu_now_us(), rates.gpu, rates.gpu};
    }
    static nvmlProcessUtilizationSample_t samples[VGPU_MAX_SAMPLES];
    unsigned count = VGPU_MAX_SAMPLES;
    if (vgpu_real.nvmlDeviceGetProcessUtilization == NULL ||
        vgpu_real.nvmlDeviceGetProcessUtilization(handle, samples, &count, since) != NVML_SUCCESS)
        return reading;  /* NVML_ERROR_NOT_FOUND: no new sample */
    struct vgpu_slot *slot = vgpu_own_slot();
    unsigned own_pid = slot != NULL ? (unsigned)slot->hostpid : 0;
    int64_t own = 0, container = 0, own_samples = 0, samples_seen = 0;
    for (unsigned i = 0; i < count; i++) {
        if (samples[i].timeStamp <= since || !vgpu_container_pid(v1, samples[i].pid))
            continue;
        if (samples[i].timeStamp > reading.newest_us)
            reading.newest_us = samples[i].timeStamp;
        container += samples[i].smUtil;
        samples_seen++;
        if (samples[i].pid == own_pid) {
            own += samples[i].smUtil;
            own_samples++;
        }
    }
    if (own_samples == 0)
        return reading;
    /* NVML gives a sample per period and process: average over the periods. */
    reading.fresh = 1;
    reading.own = own / own_samples;
    reading.container = container / own_samples;
    (void)samples_seen;
    __atomic_store_n(&slot->device_util[index].sm_util, (uint64_t)reading.own, __ATOMIC_RELAXED);
    return reading;
}

/* A new reading: correct the kernel durations once enough time is covered, and this
 * process's share of the limit (processes of one container share it). */
static void vgpu_learn(int index, struct vgpu_bucket *bucket, const struct vgpu_reading *reading)
{
    if (bucket->last_seen_us == 0) {
        bucket->window_from_us = reading->newest_us;  /* the first sample starts a window */
    } else if (reading->newest_us > bucket->last_seen_us) {
        uint64_t covered = reading->newest_us - bucket->last_seen_us;
        bucket->busy_us += covered * (uint64_t)reading->own / 100;
    }
    bucket->last_seen_us = reading->newest_us;
    uint64_t covered = bucket->last_seen_us - bucket->window_from_us;
    if (covered >= VGPU_LEARN_US &&
        vgpu_correct(bucket, index, bucket->busy_us, covered,
                     vgpu_spent_between(bucket, bucket->window_from_us, bucket->last_seen_us),
                     covered >= VGPU_SETTLE_US)) {
        bucket->window_from_us = bucket->last_seen_us;
        bucket->busy_us = 0;
    }
    double target = reading->container > 0 ? (double)reading->own / (double)reading->container
                                           : 1.0;
    target = target < 0.05 ? 0.05 : target > 1.0 ? 1.0 : target;
    bucket->share = (bucket->share + target) / 2.0;
    bucket->refill = (int64_t)((double)VGPU_TICK_NS * (double)bucket->limit / 100.0 *
                               bucket->share);
}

static void vgpu_refill(struct vgpu_bucket *bucket)
{
    int64_t tokens = __atomic_load_n(&bucket->tokens, __ATOMIC_RELAXED), next;
    do
        next = tokens + bucket->refill > bucket->refill ? bucket->refill : tokens + bucket->refill;
    while (!__atomic_compare_exchange_n(&bucket->tokens, &tokens, next, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

/* Set by the watcher once its thread is fully set up (see vgpu_start_watcher). */
static int vgpu_watcher_running;

static void *vgpu_watch(void *unused)
{
    (void)unused;
    vgpu_inside = 1;  /* the watcher's own NVML and CUDA calls pass straight through */
    __atomic_store_n(&vgpu_watcher_running, 1, __ATOMIC_RELEASE);
    struct vgpu_region_v1 *v1 = &vgpu_region()->v1;
    for (unsigned tick = 1;; tick++) {
        vgpu_pause(VGPU_TICK_NS);
        int limiting = 0;
        for (int index = 0; index < VGPU_MAX_DEVICES; index++)
            limiting |= __atomic_load_n(&vgpu_buckets[index].ready, __ATOMIC_ACQUIRE);
        if (limiting || tick % VGPU_OBSERVE_TICKS == 0) {
            for (int index = 0; index < VGPU_MAX_DEVICES; index++) {
                if (!__atomic_load_n(&vgpu_observed[index], __ATOMIC_ACQUIRE))
                    continue;
                struct vgpu_bucket *bucket = &vgpu_buckets[index];
                int ready = __atomic_load_n(&bucket->ready, __ATOMIC_ACQUIRE);
                unsigned long long since = ready && bucket->last_seen_us ? bucket->last_seen_us
                                                                         : vgpu_last_sample_us;
                struct vgpu_reading reading = vgpu_measure(index, v1, since);
                if (ready && reading.fresh)
                    vgpu_learn(index, bucket, &reading);
                if (ready)
                    vgpu_refill(bucket);
            }
            vgpu_last_sample_us = vgpu_now_us();
        }
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
        /* Return only once the thread runs its own code: a fork() right after the first limited
         * call must not catch it inside the thread library's (or a sanitizer's) start-up, which
         * allocates; a child forked then could inherit that allocator's lock held. */
        for (int waited_ms = 0; waited_ms < 1000; waited_ms++) {
            if (__atomic_load_n(&vgpu_watcher_running, __ATOMIC_ACQUIRE))
                break;
            vgpu_pause(1000000);
        }
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
        bucket->sms = have ? vgpu_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device, 1) : 1;
        bucket->threads_per_sm =
            have ? vgpu_attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device, 2048)
                 : 2048;
        vgpu_inside--;
        bucket->limit = (int64_t)limit;
        bucket->share = 1.0;
        /* Limited from the first launch: one tick's share of device time. */
        bucket->refill = VGPU_TICK_NS * (int64_t)limit / 100;
        bucket->tokens = bucket->refill;
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

/* The limited device of the current context, after the monitor's freeze and the activity
 * marks; NULL when this launch is not limited. */
static struct vgpu_bucket *vgpu_gate_open(int *index_out)
{
    struct vgpu_region *region = vgpu_region();
    if (region == NULL)
        return NULL;
    struct vgpu_region_v1 *v1 = &region->v1;
    enum vgpu_policy policy = vgpu_settings()->policy;
    int index = vgpu_current_index();
    if (index < 0) {
        vgpu_note_kernel(v1);
        return NULL;  /* no context: the driver refuses the launch itself */
    }
    vgpu_observe(index);
    uint64_t limit = v1->sm_limit[index];
    if (limit == 0 || limit >= 100 || policy == VGPU_POLICY_DISABLE) {
        vgpu_note_kernel(v1);
        return NULL;
    }
    while (__atomic_load_n(&v1->recent_kernel, __ATOMIC_RELAXED) < 0)
        vgpu_pause(VGPU_TICK_NS);  /* a higher-priority container is busy on our GPU */
    vgpu_note_kernel(v1);
    if (!vgpu_switch_on(v1, policy))
        return NULL;
    *index_out = index;
    return vgpu_bucket_for(index, limit);
}

void vgpu_kernel_gate(CUfunction function, uint64_t blocks, uint64_t threads)
{
    int index = 0;
    struct vgpu_bucket *bucket = vgpu_gate_open(&index);
    int unmeasured = 0;
    if (bucket != NULL)
        vgpu_spend(bucket, vgpu_cost(bucket, index, (uintptr_t)function, blocks, threads,
                                     &unmeasured),
                   unmeasured);
}

/* --- graphs: the kernels of each executable graph, read at instantiation ------------------ */

struct vgpu_graph_kernel {
    CUfunction function;
    uint64_t blocks;
    uint64_t threads;
};

struct vgpu_graph {
    struct vgpu_graph *next;
    CUgraphExec exec;
    size_t count;
    struct vgpu_graph_kernel kernels[];
};

static struct vgpu_graph *vgpu_graphs;
static pthread_mutex_t vgpu_graph_mutex = PTHREAD_MUTEX_INITIALIZER;

void vgpu_graph_instantiated(CUgraphExec exec, CUgraph graph)
{
    size_t count = 0;
    if (vgpu_real.cuGraphGetNodes == NULL || vgpu_real.cuGraphNodeGetType == NULL ||
        vgpu_real.cuGraphKernelNodeGetParams_v2 == NULL ||
        vgpu_real.cuGraphGetNodes(graph, NULL, &count) != CUDA_SUCCESS)
        return;  /* its launches are then learned as a whole */
    CUgraphNode *nodes = calloc(count ? count : 1, sizeof *nodes);
    struct vgpu_graph *entry = malloc(sizeof *entry + count * sizeof entry->kernels[0]);
    if (nodes == NULL || entry == NULL ||
        vgpu_real.cuGraphGetNodes(graph, nodes, &count) != CUDA_SUCCESS) {
        free(nodes);
        free(entry);
        return;
    }
    entry->exec = exec;
    entry->count = 0;
    for (size_t i = 0; i < count; i++) {
        CUgraphNodeType type;
        CUDA_KERNEL_NODE_PARAMS params;
        if (vgpu_real.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS ||
            type != CU_GRAPH_NODE_TYPE_KERNEL ||
            vgpu_real.cuGraphKernelNodeGetParams_v2(nodes[i], &params) != CUDA_SUCCESS)
            continue;
        entry->kernels[entry->count++] = (struct vgpu_graph_kernel){
            params.func, (uint64_t)params.gridDimX * params.gridDimY * params.gridDimZ,
            (uint64_t)params.blockDimX * params.blockDimY * params.blockDimZ};
    }
    free(nodes);
    pthread_mutex_lock(&vgpu_graph_mutex);
    entry->next = vgpu_graphs;
    vgpu_graphs = entry;
    pthread_mutex_unlock(&vgpu_graph_mutex);
}

void vgpu_graph_destroyed(CUgraphExec exec)
{
    pthread_mutex_lock(&vgpu_graph_mutex);
    for (struct vgpu_graph **link = &vgpu_graphs; *link != NULL; link = &(*link)->next) {
        if ((*link)->exec == exec) {
            struct vgpu_graph *gone = *link;
            *link = gone->next;
            free(gone);
            break;
        }
    }
    pthread_mutex_unlock(&vgpu_graph_mutex);
}

/* A graph launch costs its kernels; one whose kernels are unknown is learned as a whole. */
void vgpu_graph_gate(CUgraphExec exec)
{
    int index = 0;
    struct vgpu_bucket *bucket = vgpu_gate_open(&index);
    if (bucket == NULL)
        return;
    int64_t cost = 0;
    int known = 0, unmeasured = 0;
    pthread_mutex_lock(&vgpu_graph_mutex);
    for (struct vgpu_graph *entry = vgpu_graphs; entry != NULL && !known; entry = entry->next) {
        if (entry->exec != exec)
            continue;
        known = 1;
        for (size_t k = 0; k < entry->count; k++)
            cost += vgpu_cost(bucket, index, (uintptr_t)entry->kernels[k].function,
                              entry->kernels[k].blocks, entry->kernels[k].threads, &unmeasured);
    }
    pthread_mutex_unlock(&vgpu_graph_mutex);
    if (!known)
        cost = vgpu_cost(bucket, index, (uintptr_t)exec, 1, 1, &unmeasured);
    vgpu_spend(bucket, cost, unmeasured);
}

void vgpu_limiter_forget(void)
{
    pthread_mutex_init(&vgpu_bucket_mutex, NULL);
    pthread_mutex_init(&vgpu_graph_mutex, NULL);
    vgpu_watcher_started = 0;
    vgpu_watcher_running = 0;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        vgpu_buckets[i] = (struct vgpu_bucket){0};
        vgpu_observed[i] = 0;
    }
}
