#include "vgpu_alloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VGPU_BUCKETS 4096

struct vgpu_entry {
    struct vgpu_entry *next;
    uint64_t key;
    uint64_t bytes;
    uint64_t link;
    int dev;
    enum vgpu_object_kind kind;
};


static struct vgpu_entry *vgpu_buckets[VGPU_BUCKETS];
static pthread_mutex_t vgpu_table_mutex = PTHREAD_MUTEX_INITIALIZER;
/* Sorted by va; guarded by vgpu_table_mutex. */
static struct vgpu_mapping *vgpu_mappings;
static size_t vgpu_mapping_count, vgpu_mapping_room;

static struct vgpu_entry **vgpu_bucket(enum vgpu_object_kind kind, uint64_t key)
{
    uint64_t mixed = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ull;
    return &vgpu_buckets[mixed >> 52];
}

int vgpu_alloc_add(enum vgpu_object_kind kind, uint64_t key, int dev, uint64_t bytes,
                   uint64_t link)
{
    struct vgpu_entry *entry = malloc(sizeof *entry);
    if (entry == NULL)
        return -1;
    *entry = (struct vgpu_entry){.key = key, .bytes = bytes, .link = link, .dev = dev,
                                 .kind = kind};
    pthread_mutex_lock(&vgpu_table_mutex);
    struct vgpu_entry **bucket = vgpu_bucket(kind, key);
    entry->next = *bucket;
    *bucket = entry;
    pthread_mutex_unlock(&vgpu_table_mutex);
    return 0;
}

/* The link to the entry of (kind, key), or to the NULL ending its bucket. Caller holds the lock. */
static struct vgpu_entry **vgpu_lookup(enum vgpu_object_kind kind, uint64_t key)
{
    struct vgpu_entry **at = vgpu_bucket(kind, key);
    while (*at != NULL && ((*at)->key != key || (*at)->kind != kind))
        at = &(*at)->next;
    return at;
}

int vgpu_alloc_take(enum vgpu_object_kind kind, uint64_t key, int *dev, uint64_t *bytes,
                    uint64_t *link)
{
    pthread_mutex_lock(&vgpu_table_mutex);
    struct vgpu_entry **at = vgpu_lookup(kind, key);
    struct vgpu_entry *entry = *at;
    if (entry != NULL)
        *at = entry->next;
    pthread_mutex_unlock(&vgpu_table_mutex);
    if (entry == NULL)
        return -1;
    *dev = entry->dev;
    *bytes = entry->bytes;
    if (link != NULL)
        *link = entry->link;
    free(entry);
    return 0;
}

int64_t vgpu_alloc_ref(uint64_t key, int64_t delta, int *dev, uint64_t *bytes)
{
    pthread_mutex_lock(&vgpu_table_mutex);
    struct vgpu_entry **at = vgpu_lookup(VGPU_OBJECT_HANDLE, key);
    struct vgpu_entry *entry = *at;
    int64_t left = -1;
    if (entry != NULL) {
        left = (int64_t)entry->link + delta;
        entry->link = left > 0 ? (uint64_t)left : 0;
        *dev = entry->dev;
        *bytes = entry->bytes;
        if (left <= 0) {
            left = 0;
            *at = entry->next;
            free(entry);
        }
    }
    pthread_mutex_unlock(&vgpu_table_mutex);
    return left;
}

/* Index of the first mapping at or after `va`. Caller holds the lock. */
static size_t vgpu_mapping_at(uint64_t va)
{
    size_t low = 0, high = vgpu_mapping_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (vgpu_mappings[middle].va < va)
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

int vgpu_mapping_add(const struct vgpu_mapping *mapping)
{
    pthread_mutex_lock(&vgpu_table_mutex);
    if (vgpu_mapping_count == vgpu_mapping_room) {
        size_t room = vgpu_mapping_room ? 2 * vgpu_mapping_room : 64;
        struct vgpu_mapping *grown = realloc(vgpu_mappings, room * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&vgpu_table_mutex);
            return -1;
        }
        vgpu_mappings = grown;
        vgpu_mapping_room = room;
    }
    size_t at = vgpu_mapping_at(mapping->va);
    memmove(&vgpu_mappings[at + 1], &vgpu_mappings[at],
            (vgpu_mapping_count - at) * sizeof *vgpu_mappings);
    vgpu_mappings[at] = *mapping;
    vgpu_mapping_count++;
    pthread_mutex_unlock(&vgpu_table_mutex);
    return 0;
}

void vgpu_mapping_remove(uint64_t va, uint64_t size, void (*each)(const struct vgpu_mapping *))
{
    pthread_mutex_lock(&vgpu_table_mutex);
    size_t first = vgpu_mapping_at(va), last = first;
    while (last < vgpu_mapping_count && vgpu_mappings[last].va - va < size)
        last++;
    size_t gone = last - first;
    struct vgpu_mapping *removed = gone ? malloc(gone * sizeof *removed) : NULL;
    if (removed != NULL)
        memcpy(removed, &vgpu_mappings[first], gone * sizeof *removed);
    memmove(&vgpu_mappings[first], &vgpu_mappings[last],
            (vgpu_mapping_count - last) * sizeof *vgpu_mappings);
    vgpu_mapping_count -= gone;
    pthread_mutex_unlock(&vgpu_table_mutex);
    for (size_t i = 0; removed != NULL && i < gone; i++)
        each(&removed[i]);
    free(removed);
}

uint64_t vgpu_alloc_drop_device(int dev)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&vgpu_table_mutex);
    for (int i = 0; i < VGPU_BUCKETS; i++) {
        for (struct vgpu_entry **link = &vgpu_buckets[i]; *link != NULL;) {
            struct vgpu_entry *entry = *link;
            /* VMM handles outlive contexts; created contexts and their limits are not the
             * primary context's. */
            if (entry->dev != dev || entry->kind == VGPU_OBJECT_HANDLE ||
                entry->kind == VGPU_OBJECT_CONTEXT || entry->kind == VGPU_OBJECT_LIMIT) {
                link = &entry->next;
                continue;
            }
            *link = entry->next;
            bytes += entry->bytes;
            free(entry);
        }
    }
    pthread_mutex_unlock(&vgpu_table_mutex);
    return bytes;
}

void vgpu_alloc_lock_all(void)
{
    pthread_mutex_lock(&vgpu_table_mutex);
}

void vgpu_alloc_unlock_all(void)
{
    pthread_mutex_unlock(&vgpu_table_mutex);
}

void vgpu_alloc_reset(void)
{
    pthread_mutex_init(&vgpu_table_mutex, NULL);
    vgpu_mapping_count = 0;  /* mappings are not inherited by a fork child */
    for (int i = 0; i < VGPU_BUCKETS; i++) {
        while (vgpu_buckets[i] != NULL) {
            struct vgpu_entry *entry = vgpu_buckets[i];
            vgpu_buckets[i] = entry->next;
            free(entry);
        }
    }
}
