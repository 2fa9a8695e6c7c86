/* The shared region: HAMi-core's v1.2 file layout, byte for byte, followed
 * by a libvgpu extension that HAMi's monitor does not read (it accepts any file at least as
 * large as the v1 struct). The extension holds the robust process-shared lock that makes
 * check-and-charge atomic across the container's processes. */
#ifndef VGPU_REGION_H
#define VGPU_REGION_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>

#include "vgpu_config.h"

#define VGPU_REGION_MAGIC 19920718
#define VGPU_REGION_MAJOR 1u
#define VGPU_REGION_MINOR 2u
#define VGPU_MAX_PROCS 1024
#define VGPU_EXT_MAGIC 0x31555047u /* "GPU1" little-endian */
#define VGPU_EXT_VERSION 1u

#define VGPU_SLOT_FREE 0
#define VGPU_SLOT_RUNNING 1

struct vgpu_device_memory {
    uint64_t context_size;
    uint64_t module_size;
    uint64_t data_size;
    uint64_t offset;
    uint64_t total;
    uint64_t unused[3];
};

struct vgpu_device_util {
    uint64_t dec_util;
    uint64_t enc_util;
    uint64_t sm_util;
    uint64_t unused[3];
};

struct vgpu_slot {
    int32_t pid;
    int32_t hostpid;
    struct vgpu_device_memory used[VGPU_MAX_DEVICES];
    uint64_t monitorused[VGPU_MAX_DEVICES];
    struct vgpu_device_util device_util[VGPU_MAX_DEVICES];
    int32_t status;
    int32_t padding;
    uint64_t seqlock;    /* HAMi-core's seqlock word; libvgpu keeps it 0 */
    uint64_t start_time; /* libvgpu: the pid's /proc starttime, to tell a reused pid */
    uint64_t unused;
};

struct vgpu_region_v1 {
    int32_t initialized_flag;
    uint32_t major_version;
    uint32_t minor_version;
    int32_t sm_init_flag;
    uint64_t owner_pid;
    sem_t sem;
    uint64_t device_num;
    char uuids[VGPU_MAX_DEVICES][96];
    uint64_t limit[VGPU_MAX_DEVICES];
    uint64_t sm_limit[VGPU_MAX_DEVICES];
    struct vgpu_slot procs[VGPU_MAX_PROCS];
    int32_t proc_num;
    int32_t utilization_switch;
    int32_t recent_kernel;
    int32_t priority;
    uint64_t last_kernel_time;
    sem_t sem_postinit;
};

struct vgpu_region_ext {
    uint32_t magic;
    uint32_t version;
    pthread_mutex_t lock;      /* slots and charges */
    pthread_mutex_t discovery; /* host-pid discovery, one process at a time */
    uint64_t reserved[21];
};

struct vgpu_region {
    struct vgpu_region_v1 v1;
    struct vgpu_region_ext ext;
};

enum vgpu_kind { VGPU_KIND_CONTEXT, VGPU_KIND_DATA };

/* Create or join the region named by the configuration. 0, or -1 with the reason logged. */
int vgpu_region_attach(const struct vgpu_config *config);
/* The mapped region, or NULL when none could be attached. */
struct vgpu_region *vgpu_region(void);

/* The limits this process enforces on device `dev` (0 <= dev < VGPU_MAX_DEVICES, region
 * attached): the stricter of the region's and its own. Memory in bytes, 0 = no limit; SM in
 * percent, 100 = no limit. */
uint64_t vgpu_memory_limit(int dev);
uint64_t vgpu_sm_limit(int dev);

/* Check-and-charge `bytes` on device `dev` (NVML index) atomically across processes:
 * 0 when charged, -1 when it would pass the limit (or there is no slot). `force` charges
 * memory that already exists (context overhead) without the check. */
int vgpu_charge(int dev, uint64_t bytes, enum vgpu_kind kind, int force);
void vgpu_refund(int dev, uint64_t bytes, enum vgpu_kind kind);
/* Bytes charged on `dev` by every process of the container. */
uint64_t vgpu_container_used(int dev);

/* This process's slot, registering it on first use; NULL when none can be had. */
struct vgpu_slot *vgpu_own_slot(void);
/* Free slots of dead processes, at most once a second unless `now` is set. */
void vgpu_reap_dead(int now);
/* Record the NVML device count and UUIDs when the region does not have them yet. */
void vgpu_region_set_devices(unsigned count, char uuids[][96]);
/* Give the slot back (process exit). */
void vgpu_region_leave(void);
/* After fork, in the child: the parent's slot is not ours. */
void vgpu_region_forget_slot(void);
/* Lock for the cross-process host-pid discovery. */
int vgpu_discovery_lock(void);
void vgpu_discovery_unlock(void);

/* The container's view of a device's memory from the driver's real numbers: total is
 * min(limit, real total), free is what is left of it (never more than really free, never
 * negative). 1 when the view differs from the driver's, 0 when the device has no limit. */
int vgpu_memory_view(int index, uint64_t real_total, uint64_t real_free, uint64_t *total,
                      uint64_t *free);

#endif
