#include "vgpu_alloc.h"

#include <pthread.h>
#include <stdlib.h>

#define VGPU_BUCKETS 4096

struct vgpu_entry {
    struct vgpu_entry *next;
    uint64_t key;
    uint64_t bytes;
    int dev;
    enum vgpu_object_kind kind;
};

static struct vgpu_entry *vgpu_buckets[VGPU_BUCKETS];
static pthread_mutex_t vgpu_table_mutex = PTHREAD_MUTEX_INITIALIZER;

static struct vgpu_entry **vgpu_bucket(enum vgpu_object_kind kind, uint64_t key)
{
    uint64_t mixed = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ull;
    return &vgpu_buckets[mixed >> 52];
}

int vgpu_alloc_add(enum vgpu_object_kind kind, uint64_t key, int dev, uint64_t bytes)
{
    struct vgpu_entry *entry = malloc(sizeof *entry);
    if (entry == NULL)
        return -1;
    *entry = (struct vgpu_entry){.key = key, .bytes = bytes, .dev = dev, .kind = kind};
    pthread_mutex_lock(&vgpu_table_mutex);
    struct vgpu_entry **bucket = vgpu_bucket(kind, key);
    entry->next = *bucket;
    *bucket = entry;
    pthread_mutex_unlock(&vgpu_table_mutex);
    return 0;
}

int vgpu_alloc_take(enum vgpu_object_kind kind, uint64_t key, int *dev, uint64_t *bytes)
{
    pthread_mutex_lock(&vgpu_table_mutex);
    struct vgpu_entry **link = vgpu_bucket(kind, key);
    while (*link != NULL && ((*link)->key != key || (*link)->kind != kind))
        link = &(*link)->next;
    struct vgpu_entry *entry = *link;
    if (entry != NULL)
        *link = entry->next;
    pthread_mutex_unlock(&vgpu_table_mutex);
    if (entry == NULL)
        return -1;
    *dev = entry->dev;
    *bytes = entry->bytes;
    free(entry);
    return 0;
}

uint64_t vgpu_alloc_drop_device(int dev)
{
    uint64_t bytes = 0;
    pthread_mutex_lock(&vgpu_table_mutex);
    for (int i = 0; i < VGPU_BUCKETS; i++) {
        for (struct vgpu_entry **link = &vgpu_buckets[i]; *link != NULL;) {
            struct vgpu_entry *entry = *link;
            if (entry->dev != dev || entry->kind == VGPU_OBJECT_HANDLE) {
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
    for (int i = 0; i < VGPU_BUCKETS; i++) {
        while (vgpu_buckets[i] != NULL) {
            struct vgpu_entry *entry = vgpu_buckets[i];
            vgpu_buckets[i] = entry->next;
            free(entry);
        }
    }
}
