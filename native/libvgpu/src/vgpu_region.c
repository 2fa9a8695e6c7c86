#include "vgpu_region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_log.h"

/* The v1.2 ABI the HAMi monitor reads (glibc x86-64 sizes). */
_Static_assert(sizeof(sem_t) == 32, "glibc x86-64 sem_t");
_Static_assert(sizeof(struct vgpu_device_memory) == 64, "device_memory_t");
_Static_assert(offsetof(struct vgpu_device_memory, data_size) == 16, "data_size");
_Static_assert(offsetof(struct vgpu_device_memory, total) == 32, "total");
_Static_assert(sizeof(struct vgpu_device_util) == 48, "device_util_t");
_Static_assert(offsetof(struct vgpu_device_util, sm_util) == 16, "sm_util");
_Static_assert(sizeof(struct vgpu_slot) == 1960, "shrreg_proc_slot_t");
_Static_assert(offsetof(struct vgpu_slot, hostpid) == 4, "hostpid");
_Static_assert(offsetof(struct vgpu_slot, used) == 8, "used");
_Static_assert(offsetof(struct vgpu_slot, monitorused) == 1032, "monitorused");
_Static_assert(offsetof(struct vgpu_slot, device_util) == 1160, "device_util");
_Static_assert(offsetof(struct vgpu_slot, status) == 1928, "status");
_Static_assert(offsetof(struct vgpu_slot, seqlock) == 1936, "seqlock");
_Static_assert(offsetof(struct vgpu_slot, start_time) == 1944, "start_time in unused[1]");
_Static_assert(offsetof(struct vgpu_region_v1, major_version) == 4, "major_version");
_Static_assert(offsetof(struct vgpu_region_v1, minor_version) == 8, "minor_version");
_Static_assert(offsetof(struct vgpu_region_v1, sm_init_flag) == 12, "sm_init_flag");
_Static_assert(offsetof(struct vgpu_region_v1, owner_pid) == 16, "owner_pid");
_Static_assert(offsetof(struct vgpu_region_v1, sem) == 24, "sem");
_Static_assert(offsetof(struct vgpu_region_v1, device_num) == 56, "device_num");
_Static_assert(offsetof(struct vgpu_region_v1, uuids) == 64, "uuids");
_Static_assert(offsetof(struct vgpu_region_v1, limit) == 1600, "limit");
_Static_assert(offsetof(struct vgpu_region_v1, sm_limit) == 1728, "sm_limit");
_Static_assert(offsetof(struct vgpu_region_v1, procs) == 1856, "procs");
_Static_assert(offsetof(struct vgpu_region_v1, proc_num) == 2008896, "proc_num");
_Static_assert(offsetof(struct vgpu_region_v1, utilization_switch) == 2008900, "switch");
_Static_assert(offsetof(struct vgpu_region_v1, recent_kernel) == 2008904, "recent_kernel");
_Static_assert(offsetof(struct vgpu_region_v1, priority) == 2008908, "priority");
_Static_assert(offsetof(struct vgpu_region_v1, last_kernel_time) == 2008912, "last_kernel_time");
_Static_assert(offsetof(struct vgpu_region_v1, sem_postinit) == 2008920, "sem_postinit");
_Static_assert(sizeof(struct vgpu_region_v1) == 2008952, "shared_region_t v1.2");
_Static_assert(sizeof(pthread_mutex_t) == 40, "glibc x86-64 pthread_mutex_t");
_Static_assert(sizeof(struct vgpu_region_ext) == 256, "extension");
_Static_assert(offsetof(struct vgpu_region, ext) == 2008952, "extension follows v1");

static struct vgpu_region *vgpu_shared;
static int vgpu_own_index = -1;
static pid_t vgpu_own_pid;
static int vgpu_proc_readable;  /* /proc tells liveness here; if not, never reap */
static pthread_mutex_t vgpu_register_mutex = PTHREAD_MUTEX_INITIALIZER;
static time_t vgpu_last_reap;
static int vgpu_corruption_reported;  /* a corrupt count is logged once per process */
/* This process's own limits (limits file and environment), kept at attach: every process of
 * the container can write the region, so the region's limits alone could be raised by one. */
static uint64_t vgpu_own_memory_limit[VGPU_MAX_DEVICES];
static uint64_t vgpu_own_sm_limit[VGPU_MAX_DEVICES];

struct vgpu_region *vgpu_region(void)
{
    return vgpu_shared;
}

/* State letter and start time (clock ticks since boot) of `pid`, from /proc/<pid>/stat. */
static int vgpu_proc_stat(pid_t pid, char *state, uint64_t *start_time)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0)
        return -1;
    text[len] = '\0';
    char *field = strrchr(text, ')');  /* the command name may hold spaces and parens */
    if (field == NULL || field[1] != ' ')
        return -1;
    field += 2;
    *state = field[0];
    for (int skip = 0; skip < 19; skip++) {  /* state is field 3, starttime field 22 */
        field = strchr(field, ' ');
        if (field == NULL)
            return -1;
        field++;
    }
    unsigned long long ticks;
    if (sscanf(field, "%llu", &ticks) != 1)
        return -1;
    *start_time = ticks;
    return 0;
}

static int vgpu_slot_alive(const struct vgpu_slot *slot)
{
    char state;
    uint64_t start_time;
    if (vgpu_proc_stat(slot->pid, &state, &start_time) != 0)
        return 0;
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return slot->start_time == 0 || slot->start_time == start_time;
}

static void vgpu_slot_clear(struct vgpu_slot *slot)
{
    __atomic_store_n(&slot->status, VGPU_SLOT_FREE, __ATOMIC_RELEASE);
    memset(slot->used, 0, sizeof slot->used);
    memset(slot->monitorused, 0, sizeof slot->monitorused);
    memset(slot->device_util, 0, sizeof slot->device_util);
    slot->hostpid = 0;
    slot->seqlock = 0;
    slot->start_time = 0;
    __atomic_store_n(&slot->pid, 0, __ATOMIC_RELEASE);
}

/* The region's process count, or -1 when it is outside 0..VGPU_MAX_PROCS. Every process of
 * the container can write the file, so the count is read once and checked before it bounds
 * any slot access. */
static int vgpu_proc_count(const struct vgpu_region_v1 *v1)
{
    int32_t count = __atomic_load_n(&v1->proc_num, __ATOMIC_ACQUIRE);
    if (count >= 0 && count <= VGPU_MAX_PROCS)
        return count;
    if (!__atomic_exchange_n(&vgpu_corruption_reported, 1, __ATOMIC_RELAXED))
        vgpu_error("the shared region's process count is %d, outside 0..%d: the region is "
                   "corrupt; refusing device memory", (int)count, VGPU_MAX_PROCS);
    return -1;
}

/* Caller holds the lock. Returns how many slots were freed. */
static int vgpu_reap_locked(void)
{
    if (!vgpu_proc_readable)
        return 0;
    int freed = 0;
    int count = vgpu_proc_count(&vgpu_shared->v1);
    for (int i = 0; i < count; i++) {
        struct vgpu_slot *slot = &vgpu_shared->v1.procs[i];
        if (slot->status == VGPU_SLOT_FREE || i == vgpu_own_index)
            continue;
        if (slot->pid == 0 || !vgpu_slot_alive(slot)) {
            vgpu_info("freeing slot %d of exited process %d", i, (int)slot->pid);
            vgpu_slot_clear(slot);
            freed++;
        }
    }
    return freed;
}

static int vgpu_region_lock(void)
{
    int rc = pthread_mutex_lock(&vgpu_shared->ext.lock);
    if (rc == EOWNERDEAD) {
        /* A process died holding the lock. Every update under it is either complete or
         * confined to the dead process's own slot, which reaping frees. */
        pthread_mutex_consistent(&vgpu_shared->ext.lock);
        vgpu_info("took over the region lock from a process that died holding it");
        vgpu_reap_locked();
        return 0;
    }
    if (rc != 0) {
        vgpu_error("shared region lock unusable: %s", strerror(rc));
        return -1;
    }
    return 0;
}

static void vgpu_region_unlock(void)
{
    pthread_mutex_unlock(&vgpu_shared->ext.lock);
}

static int vgpu_init_mutex(pthread_mutex_t *mutex)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc;
}

static int vgpu_region_format(struct vgpu_region *region, const struct vgpu_config *config)
{
    struct vgpu_region_v1 *v1 = &region->v1;
    memset(region, 0, sizeof *region);
    v1->major_version = VGPU_REGION_MAJOR;
    v1->minor_version = VGPU_REGION_MINOR;
    /* HAMi-core's semaphores stay valid process-shared semaphores for tools that use them. */
    if (sem_init(&v1->sem, 1, 1) != 0 || sem_init(&v1->sem_postinit, 1, 1) != 0 ||
        vgpu_init_mutex(&region->ext.lock) != 0 || vgpu_init_mutex(&region->ext.discovery) != 0)
        return -1;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        v1->limit[i] = config->memory_limit[i];
        v1->sm_limit[i] = config->sm_limit[i];
    }
    v1->utilization_switch = 1;
    v1->recent_kernel = 2;
    v1->priority = config->priority;
    v1->last_kernel_time = (uint64_t)time(NULL);
    region->ext.magic = VGPU_EXT_MAGIC;
    region->ext.version = VGPU_EXT_VERSION;
    __atomic_store_n(&v1->initialized_flag, VGPU_REGION_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

static void vgpu_compare_limits(const struct vgpu_region *region, const struct vgpu_config *config)
{
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        if (region->v1.limit[i] != config->memory_limit[i] ||
            region->v1.sm_limit[i] != config->sm_limit[i])
            vgpu_warn("device %d: this process asks for memory limit %llu and SM limit %llu, "
                      "the container's region has %llu and %llu; using the stricter of each",
                      i, (unsigned long long)config->memory_limit[i],
                      (unsigned long long)config->sm_limit[i],
                      (unsigned long long)region->v1.limit[i],
                      (unsigned long long)region->v1.sm_limit[i]);
    }
}

/* Why an initialised region cannot be used, or NULL. Counts and values that bound an array
 * or must be a percentage are checked here; the few read again later are checked again. */
static const char *vgpu_region_problem(const struct vgpu_region *region, char *why, size_t size)
{
    const struct vgpu_region_v1 *v1 = &region->v1;
    if (v1->major_version != VGPU_REGION_MAJOR || region->ext.magic != VGPU_EXT_MAGIC ||
        region->ext.version != VGPU_EXT_VERSION)
        snprintf(why, size, "was written by another library or version (v%u.%u)",
                 v1->major_version, v1->minor_version);
    else if (v1->proc_num < 0 || v1->proc_num > VGPU_MAX_PROCS)
        snprintf(why, size, "has a process count of %d, outside 0..%d", (int)v1->proc_num,
                 VGPU_MAX_PROCS);
    else if (v1->device_num > VGPU_MAX_DEVICES)
        snprintf(why, size, "has a device count of %llu, more than %d",
                 (unsigned long long)v1->device_num, VGPU_MAX_DEVICES);
    else
        for (int i = 0; i < VGPU_MAX_DEVICES; i++)
            if (v1->sm_limit[i] > 100) {
                snprintf(why, size, "has an SM limit of %llu %% for device %d",
                         (unsigned long long)v1->sm_limit[i], i);
                return why;
            }
    return why[0] != '\0' ? why : NULL;
}

/* Caller holds the file lock. */
static struct vgpu_region *vgpu_map(int fd, const struct vgpu_config *config)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return NULL;
    if (!S_ISREG(st.st_mode) ||
        (st.st_size != 0 && st.st_size != (off_t)sizeof(struct vgpu_region))) {
        vgpu_error("%s is %lld bytes, not a libvgpu region (a regular file of %zu bytes); "
                   "refusing to use it", config->cache_path, (long long)st.st_size,
                   sizeof(struct vgpu_region));
        return NULL;
    }
    if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(struct vgpu_region)) != 0) {
        vgpu_error("cannot size %s: %s", config->cache_path, strerror(errno));
        return NULL;
    }
    void *map = mmap(NULL, sizeof(struct vgpu_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        vgpu_error("cannot map %s: %s", config->cache_path, strerror(errno));
        return NULL;
    }
    struct vgpu_region *region = map;
    char why[160] = "";
    if (__atomic_load_n(&region->v1.initialized_flag, __ATOMIC_ACQUIRE) != VGPU_REGION_MAGIC) {
        if (vgpu_region_format(region, config) == 0)
            return region;
        vgpu_error("cannot initialise the locks of %s", config->cache_path);
    } else if (vgpu_region_problem(region, why, sizeof why) != NULL) {
        vgpu_error("%s %s; refusing to use it", config->cache_path, why);
    } else {
        vgpu_compare_limits(region, config);
        return region;
    }
    munmap(map, sizeof(struct vgpu_region));
    return NULL;
}

int vgpu_region_attach(const struct vgpu_config *config)
{
    char state;
    uint64_t start_time;
    vgpu_proc_readable = vgpu_proc_stat(getpid(), &state, &start_time) == 0;
    int fd = open(config->cache_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0)
        fchmod(fd, 0666);  /* any user of the container may join, whatever the umask */
    else if (errno == EEXIST)
        fd = open(config->cache_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        vgpu_error("cannot open the shared region %s: %s", config->cache_path, strerror(errno));
        return -1;
    }
    struct flock whole = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    while (fcntl(fd, F_SETLKW, &whole) != 0 && errno == EINTR)
        ;
    struct vgpu_region *region = vgpu_map(fd, config);
    close(fd);  /* also drops the record lock; the mapping stays */
    if (region == NULL)
        return -1;
    memcpy(vgpu_own_memory_limit, config->memory_limit, sizeof(vgpu_own_memory_limit));
    memcpy(vgpu_own_sm_limit, config->sm_limit, sizeof(vgpu_own_sm_limit));
    __atomic_store_n(&vgpu_shared, region, __ATOMIC_RELEASE);
    return 0;
}

uint64_t vgpu_memory_limit(int dev)
{
    uint64_t shared = __atomic_load_n(&vgpu_shared->v1.limit[dev], __ATOMIC_RELAXED);
    uint64_t own = vgpu_own_memory_limit[dev];
    if (shared == 0 || own == 0)  /* 0: no limit */
        return shared | own;
    return shared < own ? shared : own;
}

uint64_t vgpu_sm_limit(int dev)
{
    uint64_t shared = __atomic_load_n(&vgpu_shared->v1.sm_limit[dev], __ATOMIC_RELAXED);
    uint64_t own = vgpu_own_sm_limit[dev];
    if (shared == 0 || shared > 100)  /* 0: no limit; above 100 only when written after attach */
        shared = 100;
    if (own == 0)
        own = 100;
    return shared < own ? shared : own;
}

uint64_t vgpu_container_used(int dev)
{
    const struct vgpu_region_v1 *v1 = &vgpu_shared->v1;
    int count = vgpu_proc_count(v1);
    if (count < 0)
        return UINT64_MAX;  /* a corrupt region: nothing is free */
    uint64_t used = 0;
    for (int i = 0; i < count; i++) {
        if (__atomic_load_n(&v1->procs[i].status, __ATOMIC_ACQUIRE) == VGPU_SLOT_FREE)
            continue;
        uint64_t total = __atomic_load_n(&v1->procs[i].used[dev].total, __ATOMIC_RELAXED);
        used = total > UINT64_MAX - used ? UINT64_MAX : used + total;  /* never wraps to less */
    }
    return used;
}

/* The index of the slot taken; -1 when all are taken, -2 when the region is corrupt. */
static int vgpu_claim_slot_locked(void)
{
    struct vgpu_region_v1 *v1 = &vgpu_shared->v1;
    pid_t pid = getpid();
    int count = vgpu_proc_count(v1);
    if (count < 0)
        return -2;
    int free_index = -1;
    for (int i = 0; i < count; i++)  /* a slot left by an earlier holder of our pid */
        if (v1->procs[i].status != VGPU_SLOT_FREE && v1->procs[i].pid == pid)
            vgpu_slot_clear(&v1->procs[i]);
    for (int i = 0; i < count && free_index < 0; i++)
        if (v1->procs[i].status == VGPU_SLOT_FREE)
            free_index = i;
    if (free_index < 0) {
        if (count >= VGPU_MAX_PROCS)
            return -1;
        free_index = count;
    }
    struct vgpu_slot *slot = &v1->procs[free_index];
    char state;
    uint64_t start_time = 0;
    vgpu_proc_stat(pid, &state, &start_time);
    vgpu_slot_clear(slot);
    slot->start_time = start_time;
    slot->pid = pid;
    __atomic_store_n(&slot->status, VGPU_SLOT_RUNNING, __ATOMIC_RELEASE);
    if (free_index == count)
        __atomic_store_n(&v1->proc_num, free_index + 1, __ATOMIC_RELEASE);
    return free_index;
}

struct vgpu_slot *vgpu_own_slot(void)
{
    if (vgpu_shared == NULL)
        return NULL;
    int index = __atomic_load_n(&vgpu_own_index, __ATOMIC_ACQUIRE);
    if (index >= 0)
        return &vgpu_shared->v1.procs[index];
    pthread_mutex_lock(&vgpu_register_mutex);
    index = vgpu_own_index;
    if (index < 0 && vgpu_region_lock() == 0) {
        vgpu_reap_locked();
        index = vgpu_claim_slot_locked();
        vgpu_region_unlock();
        if (index == -1)
            vgpu_error("all %d process slots of the shared region are taken", VGPU_MAX_PROCS);
        vgpu_own_pid = getpid();
        __atomic_store_n(&vgpu_own_index, index, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&vgpu_register_mutex);
    return index >= 0 ? &vgpu_shared->v1.procs[index] : NULL;
}

static uint64_t *vgpu_kind_field(struct vgpu_slot *slot, int dev, enum vgpu_kind kind)
{
    return kind == VGPU_KIND_CONTEXT ? &slot->used[dev].context_size : &slot->used[dev].data_size;
}

int vgpu_charge(int dev, uint64_t bytes, enum vgpu_kind kind, int force)
{
    struct vgpu_slot *slot = vgpu_own_slot();
    if (slot == NULL || vgpu_region_lock() != 0)
        return -1;
    uint64_t limit = vgpu_memory_limit(dev);
    if (!force && limit != 0) {
        uint64_t used = vgpu_container_used(dev);
        if ((bytes > limit || used > limit - bytes) && vgpu_reap_locked() > 0)
            used = vgpu_container_used(dev);
        if (bytes > limit || used > limit - bytes) {
            vgpu_region_unlock();
            vgpu_warn("device %d: out of memory: %llu bytes asked, %llu of the container's "
                      "%llu bytes in use", dev, (unsigned long long)bytes,
                      (unsigned long long)used, (unsigned long long)limit);
            return -1;
        }
    }
    __atomic_add_fetch(vgpu_kind_field(slot, dev, kind), bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&slot->used[dev].total, bytes, __ATOMIC_RELEASE);
    vgpu_region_unlock();
    return 0;
}

static void vgpu_sub_saturating(uint64_t *field, uint64_t bytes)
{
    uint64_t old = __atomic_load_n(field, __ATOMIC_RELAXED);
    uint64_t next;
    do
        next = old > bytes ? old - bytes : 0;
    while (!__atomic_compare_exchange_n(field, &old, next, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

void vgpu_refund(int dev, uint64_t bytes, enum vgpu_kind kind)
{
    /* Only this process writes its own slot while it lives, so no lock is needed to give back. */
    struct vgpu_slot *slot = vgpu_own_slot();
    if (slot == NULL)
        return;
    vgpu_sub_saturating(vgpu_kind_field(slot, dev, kind), bytes);
    vgpu_sub_saturating(&slot->used[dev].total, bytes);
}

void vgpu_reap_dead(int now)
{
    if (vgpu_shared == NULL)
        return;
    time_t second = time(NULL);
    if (!now && __atomic_load_n(&vgpu_last_reap, __ATOMIC_RELAXED) == second)
        return;
    __atomic_store_n(&vgpu_last_reap, second, __ATOMIC_RELAXED);
    if (vgpu_region_lock() == 0) {
        vgpu_reap_locked();
        vgpu_region_unlock();
    }
}

void vgpu_region_set_devices(unsigned count, char uuids[][96])
{
    if (vgpu_shared == NULL || vgpu_region_lock() != 0)
        return;
    struct vgpu_region_v1 *v1 = &vgpu_shared->v1;
    if (v1->device_num == 0) {
        for (unsigned i = 0; i < count && i < VGPU_MAX_DEVICES; i++)
            memcpy(v1->uuids[i], uuids[i], sizeof v1->uuids[i]);
        __atomic_store_n(&v1->device_num, (uint64_t)count, __ATOMIC_RELEASE);
    }
    vgpu_region_unlock();
}

void vgpu_region_leave(void)
{
    if (vgpu_shared == NULL || vgpu_own_index < 0 || vgpu_own_pid != getpid())
        return;
    if (vgpu_region_lock() == 0) {
        struct vgpu_slot *slot = &vgpu_shared->v1.procs[vgpu_own_index];
        /* Memory still held is freed by the driver only when the process is gone, after the
         * destructors: giving it back here would let a peer overshoot the limit meanwhile.
         * Such a slot stays charged until reaping sees the process dead. */
        int holds_memory = 0;
        for (int dev = 0; dev < VGPU_MAX_DEVICES; dev++)
            holds_memory |= __atomic_load_n(&slot->used[dev].total, __ATOMIC_RELAXED) != 0;
        if (!holds_memory)
            vgpu_slot_clear(slot);
        vgpu_region_unlock();
    }
    vgpu_own_index = -1;
}

void vgpu_region_forget_slot(void)
{
    pthread_mutex_init(&vgpu_register_mutex, NULL);
    vgpu_own_index = -1;
}

int vgpu_discovery_lock(void)
{
    int rc = pthread_mutex_lock(&vgpu_shared->ext.discovery);
    if (rc == EOWNERDEAD)
        rc = pthread_mutex_consistent(&vgpu_shared->ext.discovery);
    return rc == 0 ? 0 : -1;
}

void vgpu_discovery_unlock(void)
{
    pthread_mutex_unlock(&vgpu_shared->ext.discovery);
}

int vgpu_memory_view(int index, uint64_t real_total, uint64_t real_free, uint64_t *total,
                      uint64_t *free)
{
    *total = real_total;
    *free = real_free;
    if (vgpu_shared == NULL || index < 0 || index >= VGPU_MAX_DEVICES)
        return 0;
    uint64_t limit = vgpu_memory_limit(index);
    if (limit == 0)
        return 0;
    uint64_t used = vgpu_container_used(index);
    *total = limit < real_total ? limit : real_total;
    uint64_t left = used < *total ? *total - used : 0;
    *free = left < real_free ? left : real_free;
    return 1;
}
