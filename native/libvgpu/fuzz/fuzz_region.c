/* libFuzzer target for the shared-region reader: whatever bytes a region file holds, attaching
 * to it and every operation on it either works or is refused; nothing reads or writes outside
 * the mapping and nothing is undefined (built with ASan and UBSan).
 *
 * Input: one byte choosing the file's size, then bytes laid over a region the library has just
 * formatted, in this order: the header (device count, UUIDs, limits: offsets 0..1855), the
 * first four process slots, the tail (process count, switch, recent kernel, priority, last
 * kernel time, the post-init semaphore) and the extension's magic and version. Bytes past the
 * input keep the formatted values, so a short input is a mostly valid region.
 *
 * Not fuzzed: the two robust mutexes of the extension. A process that can write the region can
 * make a lock word look held for ever and hang its peers, as it could stop them with a signal;
 * that is no crash and no memory-safety question, and it would only show as timeouts here.
 *
 * The region's statics are reset between inputs, so the file includes the source it tests. */
#include "../src/vgpu_region.c"

#include <stdlib.h>

struct window {
    size_t offset, length;
};

static const struct window vgpu_fuzz_windows[] = {
    {0, offsetof(struct vgpu_region_v1, procs)},
    {offsetof(struct vgpu_region_v1, procs), 4 * sizeof(struct vgpu_slot)},
    {offsetof(struct vgpu_region_v1, proc_num),
     sizeof(struct vgpu_region_v1) - offsetof(struct vgpu_region_v1, proc_num)},
    {offsetof(struct vgpu_region, ext), offsetof(struct vgpu_region_ext, lock)},
};

static const off_t vgpu_fuzz_sizes[] = {
    sizeof(struct vgpu_region),     sizeof(struct vgpu_region) - 1, sizeof(struct vgpu_region) + 1,
    sizeof(struct vgpu_region_v1), 12, 0,
};

static char vgpu_fuzz_path[4096];
static struct vgpu_config vgpu_fuzz_config;
static struct vgpu_region *vgpu_fuzz_formatted; /* the library's freshly formatted region */

static void vgpu_fuzz_detach(void)
{
    if (vgpu_shared != NULL)
        munmap(vgpu_shared, sizeof(struct vgpu_region));
    vgpu_shared = NULL;
    vgpu_own_index = -1;
    vgpu_last_reap = 0;
    vgpu_corruption_reported = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("TMPDIR");
    snprintf(vgpu_fuzz_path, sizeof vgpu_fuzz_path, "%s/vgpu-fuzz-%d.cache",
             dir != NULL && dir[0] != '\0' ? dir : "/tmp", (int)getpid());
    snprintf(vgpu_fuzz_config.cache_path, sizeof vgpu_fuzz_config.cache_path, "%s",
             vgpu_fuzz_path);
    vgpu_fuzz_config.memory_limit[0] = 1ull << 30;
    vgpu_fuzz_config.sm_limit[0] = 50;
    vgpu_fuzz_config.priority = 1;
    unlink(vgpu_fuzz_path);
    if (vgpu_region_attach(&vgpu_fuzz_config) != 0)
        abort();
    vgpu_fuzz_formatted = malloc(sizeof *vgpu_fuzz_formatted);
    memcpy(vgpu_fuzz_formatted, vgpu_shared, sizeof *vgpu_fuzz_formatted);
    vgpu_fuzz_detach();
    return 0;
}

/* Write the formatted region with the input laid over it, then give the file its size. */
static void vgpu_fuzz_write(const uint8_t *data, size_t size)
{
    int fd = open(vgpu_fuzz_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    /* All zeros again without giving the file back (cheaper than O_TRUNC on a disk). */
    if (fd < 0 || ftruncate(fd, sizeof(struct vgpu_region)) != 0 ||
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  sizeof(struct vgpu_region)) != 0)
        abort();
    off_t length = size > 0 ? vgpu_fuzz_sizes[data[0] % (sizeof vgpu_fuzz_sizes /
                                                         sizeof vgpu_fuzz_sizes[0])]
                            : (off_t)sizeof(struct vgpu_region);
    if (size > 0) {
        data++;
        size--;
    }
    uint8_t chunk[sizeof(struct vgpu_slot) * 4];
    for (size_t w = 0; w < sizeof vgpu_fuzz_windows / sizeof vgpu_fuzz_windows[0]; w++) {
        const struct window *window = &vgpu_fuzz_windows[w];
        size_t taken = size < window->length ? size : window->length;
        memcpy(chunk, (const uint8_t *)vgpu_fuzz_formatted + window->offset, window->length);
        memcpy(chunk, data, taken);
        if (pwrite(fd, chunk, window->length, (off_t)window->offset) != (ssize_t)window->length)
            abort();
        data += taken;
        size -= taken;
    }
    /* The mutexes as formatted, then the size chosen (longer, shorter, or empty). */
    size_t locks = offsetof(struct vgpu_region, ext) + offsetof(struct vgpu_region_ext, lock);
    if (pwrite(fd, (const uint8_t *)vgpu_fuzz_formatted + locks, sizeof(struct vgpu_region) - locks,
               (off_t)locks) != (ssize_t)(sizeof(struct vgpu_region) - locks) ||
        ftruncate(fd, length) != 0)
        abort();
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vgpu_fuzz_write(data, size);
    if (vgpu_region_attach(&vgpu_fuzz_config) == 0) {
        char uuids[2][96] = {"GPU-fuzz-0", "GPU-fuzz-1"};
        vgpu_region_set_devices(2, uuids);
        uint64_t total, free;
        vgpu_memory_view(0, 80ull << 30, 70ull << 30, &total, &free);
        if (vgpu_charge(0, 1 << 20, VGPU_KIND_DATA, 0) == 0)
            vgpu_refund(0, 1 << 20, VGPU_KIND_DATA);
        vgpu_charge(15, 4096, VGPU_KIND_CONTEXT, 1);
        for (int dev = 0; dev < VGPU_MAX_DEVICES; dev++)
            (void)vgpu_container_used(dev);
        vgpu_reap_dead(1);
        vgpu_region_leave();
    }
    vgpu_fuzz_detach();
    return 0;
}
