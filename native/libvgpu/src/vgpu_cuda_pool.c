/* Stream-ordered allocation: a request is checked and charged like any allocation, then the
 * charge is replaced by what the pool's reservation really grew by. Frees give nothing back
 * until the pool's reservation shrinks, which is re-read after every pool operation, before
 * any refusal and on every memory query. */
#include <pthread.h>

#include "vgpu_alloc.h"
#include "vgpu_devices.h"
#include "vgpu_hooks.h"
#include "vgpu_init.h"
#include "vgpu_log.h"
#include "vgpu_memory.h"
#include "vgpu_pool.h"
#include "vgpu_region.h"

#define VGPU_MAX_POOLS 256

struct vgpu_pool {
    CUmemoryPool handle;
    int index;        /* NVML index, or VGPU_NOT_DEVICE */
    uint64_t charged; /* the reservation last charged */
};

static pthread_mutex_t vgpu_pool_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_pool vgpu_pools[VGPU_MAX_POOLS];
static int vgpu_pool_count;
static int vgpu_pools_on[VGPU_MAX_DEVICES];
/* Graph memory nodes draw from a per-device pool of the driver's: its reservation is charged
 * like a pool's. CUDA ordinal + 1 of each device a memory node was added for, else 0. */
static int vgpu_graph_device[VGPU_MAX_DEVICES];
static uint64_t vgpu_graph_charged[VGPU_MAX_DEVICES];
static int vgpu_graph_memory_seen;

/* Caller holds vgpu_pool_mutex. */
static struct vgpu_pool *vgpu_pool_entry(CUmemoryPool pool)
{
    for (int i = 0; i < vgpu_pool_count; i++)
        if (vgpu_pools[i].handle == pool)
            return &vgpu_pools[i];
    return NULL;
}

/* Caller holds vgpu_pool_mutex. */
static struct vgpu_pool *vgpu_pool_register(CUmemoryPool pool, int index)
{
    if (vgpu_pool_count == VGPU_MAX_POOLS) {
        vgpu_error("more than %d memory pools; allocations from more are refused", VGPU_MAX_POOLS);
        return NULL;
    }
    struct vgpu_pool *entry = &vgpu_pools[vgpu_pool_count++];
    *entry = (struct vgpu_pool){.handle = pool, .index = index};
    if (index >= 0)
        vgpu_pools_on[index]++;
    return entry;
}

/* A pool we did not see created is one of the devices' own (default or current) pools. */
static int vgpu_pool_owner(CUmemoryPool pool)
{
    int count = 0;
    if (vgpu_real.cuDeviceGetCount == NULL || vgpu_real.cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return -1;
    for (CUdevice device = 0; device < count; device++) {
        CUmemoryPool candidate;
        if ((vgpu_real.cuDeviceGetDefaultMemPool != NULL &&
             vgpu_real.cuDeviceGetDefaultMemPool(&candidate, device) == CUDA_SUCCESS &&
             candidate == pool) ||
            (vgpu_real.cuDeviceGetMemPool != NULL &&
             vgpu_real.cuDeviceGetMemPool(&candidate, device) == CUDA_SUCCESS && candidate == pool))
            return vgpu_index_of(device);
    }
    return -1;
}

int vgpu_pool_index(CUmemoryPool pool)
{
    pthread_mutex_lock(&vgpu_pool_mutex);
    struct vgpu_pool *entry = vgpu_pool_entry(pool);
    int index = entry != NULL ? entry->index : -1;
    if (entry == NULL && (index = vgpu_pool_owner(pool)) >= 0 &&
        vgpu_pool_register(pool, index) == NULL)
        index = -1;
    pthread_mutex_unlock(&vgpu_pool_mutex);
    return index;
}

/* Caller holds vgpu_pool_mutex. */
static void vgpu_settle_locked(struct vgpu_pool *entry, uint64_t ticket)
{
    cuuint64_t reserved = 0;
    if (vgpu_real.cuMemPoolGetAttribute == NULL ||
        vgpu_real.cuMemPoolGetAttribute(entry->handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                        &reserved) != CUDA_SUCCESS)
        reserved = entry->charged;  /* cannot tell: keep charging what we last knew */
    int64_t net = (int64_t)(reserved - entry->charged) - (int64_t)ticket;
    entry->charged = reserved;
    if (entry->index < 0)
        return;
    if (net > 0)
        vgpu_charge(entry->index, (uint64_t)net, VGPU_KIND_DATA, 1);  /* it exists already */
    else if (net < 0)
        vgpu_refund(entry->index, (uint64_t)-net, VGPU_KIND_DATA);
}

void vgpu_pool_settle(CUmemoryPool pool, uint64_t ticket)
{
    pthread_mutex_lock(&vgpu_pool_mutex);
    struct vgpu_pool *entry = vgpu_pool_entry(pool);
    if (entry != NULL)
        vgpu_settle_locked(entry, ticket);
    pthread_mutex_unlock(&vgpu_pool_mutex);
}

/* Caller holds vgpu_pool_mutex. */
static int vgpu_graph_settle_locked(int index)
{
    cuuint64_t reserved = 0;
    CUdevice device = vgpu_graph_device[index] - 1;
    if (device < 0 || vgpu_real.cuDeviceGetGraphMemAttribute == NULL ||
        vgpu_real.cuDeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                               &reserved) != CUDA_SUCCESS)
        return 0;
    if (reserved > vgpu_graph_charged[index])
        vgpu_charge(index, reserved - vgpu_graph_charged[index], VGPU_KIND_DATA, 1);
    else
        vgpu_refund(index, vgpu_graph_charged[index] - reserved, VGPU_KIND_DATA);
    vgpu_graph_charged[index] = reserved;
    return 1;
}

void vgpu_graph_memory_settle(void)
{
    if (!__atomic_load_n(&vgpu_graph_memory_seen, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&vgpu_pool_mutex);
    for (int index = 0; index < VGPU_MAX_DEVICES; index++)
        vgpu_graph_settle_locked(index);
    pthread_mutex_unlock(&vgpu_pool_mutex);
}

int vgpu_pools_refresh(int index)
{
    if (index < 0 || index >= VGPU_MAX_DEVICES ||
        (__atomic_load_n(&vgpu_pools_on[index], __ATOMIC_RELAXED) == 0 &&
         __atomic_load_n(&vgpu_graph_device[index], __ATOMIC_RELAXED) == 0))
        return 0;
    pthread_mutex_lock(&vgpu_pool_mutex);
    int settled = vgpu_graph_settle_locked(index);
    for (int i = 0; i < vgpu_pool_count; i++) {
        if (vgpu_pools[i].index == index) {
            vgpu_settle_locked(&vgpu_pools[i], 0);
            settled++;
        }
    }
    pthread_mutex_unlock(&vgpu_pool_mutex);
    return settled;
}

void vgpu_pools_forget(void)
{
    pthread_mutex_init(&vgpu_pool_mutex, NULL);
    vgpu_pool_count = 0;
    vgpu_graph_memory_seen = 0;
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        vgpu_pools_on[i] = 0;
        vgpu_graph_device[i] = 0;
        vgpu_graph_charged[i] = 0;
    }
}

/* What of `bytes` the pool cannot hand out from memory it already holds unused: what an
 * allocation may add to its reservation. (Fragmentation can make the growth larger; the
 * settlement after the call charges the real growth.) */
static uint64_t vgpu_pool_uncovered(CUmemoryPool pool, uint64_t bytes)
{
    cuuint64_t reserved = 0, used = 0;
    if (vgpu_real.cuMemPoolGetAttribute == NULL ||
        vgpu_real.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) ||
        vgpu_real.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) ||
        used > reserved)
        return bytes;
    uint64_t cached = reserved - used;
    return bytes > cached ? bytes - cached : 0;
}

/* Allocate from `pool` on device `index`: charge what the request may add to the pool's
 * reservation, call the driver, then charge what the reservation really grew by instead. */
#define VGPU_FROM_POOL(pool, index, call)                                                  \
    do {                                                                                   \
        struct vgpu_ticket ticket_;                                                        \
        uint64_t asked_ = (index) >= 0 ? vgpu_pool_uncovered((pool), bytes) : bytes;       \
        CUresult rc_ = vgpu_reserve(&ticket_, (index), asked_);                            \
        if (rc_ != CUDA_SUCCESS)                                                           \
            return rc_;                                                                    \
        rc_ = (call);                                                                      \
        if (ticket_.index < 0)                                                             \
            return rc_;                                                                    \
        if (rc_ == CUDA_SUCCESS &&                                                         \
            vgpu_alloc_add(VGPU_OBJECT_POOLED, *dptr, ticket_.index, 0,                    \
                           (uint64_t)(uintptr_t)(pool)) != 0) {                            \
            vgpu_real.cuMemFree_v2(*dptr);                                                 \
            rc_ = CUDA_ERROR_OUT_OF_MEMORY;                                                \
        }                                                                                  \
        vgpu_pool_settle((pool), asked_);                                                  \
        return rc_;                                                                        \
    } while (0)

/* The pool cuMemAllocAsync takes from: the current pool of the stream's device. */
static int vgpu_stream_pool(CUstream stream, CUmemoryPool *pool)
{
    CUdevice device;
    int index = vgpu_stream_device(stream, &device);
    if (index < 0)
        return index;
    if (vgpu_real.cuDeviceGetMemPool == NULL ||
        vgpu_real.cuDeviceGetMemPool(pool, device) != CUDA_SUCCESS)
        return -1;
    pthread_mutex_lock(&vgpu_pool_mutex);
    if (vgpu_pool_entry(*pool) == NULL && vgpu_pool_register(*pool, index) == NULL)
        index = -1;
    pthread_mutex_unlock(&vgpu_pool_mutex);
    return index;
}

#define VGPU_ASYNC_ALLOC(name)                                                       \
    VGPU_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytes, CUstream stream)      \
    {                                                                                \
        VGPU_ENTER(name, dptr, bytes, stream);                                       \
        CUmemoryPool pool = NULL;                                                    \
        int index = vgpu_memory_mode() == VGPU_MEMORY_ACCOUNT                        \
                        ? vgpu_stream_pool(stream, &pool)                            \
                        : VGPU_NOT_DEVICE;                                           \
        VGPU_FROM_POOL(pool, index, vgpu_real.name(dptr, bytes, stream));            \
    }

VGPU_ASYNC_ALLOC(cuMemAllocAsync)
VGPU_ASYNC_ALLOC(cuMemAllocAsync_ptsz)

#define VGPU_POOL_ALLOC(name)                                                                  \
    VGPU_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,              \
                              CUstream stream)                                                 \
    {                                                                                          \
        VGPU_ENTER(name, dptr, bytes, pool, stream);                                           \
        int index = vgpu_memory_mode() == VGPU_MEMORY_ACCOUNT ? vgpu_pool_index(pool)          \
                                                               : VGPU_NOT_DEVICE;              \
        VGPU_FROM_POOL(pool, index, vgpu_real.name(dptr, bytes, pool, stream));                \
    }

VGPU_POOL_ALLOC(cuMemAllocFromPoolAsync)
VGPU_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz)

VGPU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    VGPU_ENTER(cuMemPoolCreate, pool, props);
    CUresult rc = vgpu_real.cuMemPoolCreate(pool, props);
    if (rc != CUDA_SUCCESS || props == NULL)
        return rc;
    int index = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                    ? vgpu_index_of(props->location.id)
                    : VGPU_NOT_DEVICE;
    pthread_mutex_lock(&vgpu_pool_mutex);
    if (vgpu_pool_entry(*pool) == NULL)
        vgpu_pool_register(*pool, index);
    pthread_mutex_unlock(&vgpu_pool_mutex);
    return rc;
}

VGPU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    VGPU_ENTER(cuMemPoolDestroy, pool);
    CUresult rc = vgpu_real.cuMemPoolDestroy(pool);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&vgpu_pool_mutex);
    struct vgpu_pool *entry = vgpu_pool_entry(pool);
    if (entry != NULL) {
        if (entry->index >= 0) {
            vgpu_refund(entry->index, entry->charged, VGPU_KIND_DATA);
            vgpu_pools_on[entry->index]--;
        }
        *entry = vgpu_pools[--vgpu_pool_count];
    }
    pthread_mutex_unlock(&vgpu_pool_mutex);
    return rc;
}

VGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    VGPU_ENTER(cuMemPoolTrimTo, pool, keep);
    CUresult rc = vgpu_real.cuMemPoolTrimTo(pool, keep);
    vgpu_pool_settle(pool, 0);
    return rc;
}

VGPU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                           void *value)
{
    VGPU_ENTER(cuMemPoolSetAttribute, pool, attribute, value);
    CUresult rc = vgpu_real.cuMemPoolSetAttribute(pool, attribute, value);
    vgpu_pool_settle(pool, 0);
    return rc;
}

/* A memory node is not memory yet (the graph's launch allocates it), but one that cannot fit
 * under the limit now is refused here, where the application can still handle the error. */
VGPU_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph,
                                            const CUgraphNode *dependencies, size_t count,
                                            CUDA_MEM_ALLOC_NODE_PARAMS *params)
{
    VGPU_ENTER(cuGraphAddMemAllocNode, node, graph, dependencies, count, params);
    int index = params != NULL && params->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                    ? vgpu_index_of(params->poolProps.location.id)
                    : VGPU_NOT_DEVICE;
    struct vgpu_ticket ticket;
    CUresult rc = vgpu_reserve(&ticket, index, params != NULL ? params->bytesize : 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ticket.index >= 0) {
        vgpu_refund(ticket.index, ticket.bytes, VGPU_KIND_DATA);  /* a check, not a charge */
        pthread_mutex_lock(&vgpu_pool_mutex);
        vgpu_graph_device[ticket.index] = params->poolProps.location.id + 1;
        __atomic_store_n(&vgpu_graph_memory_seen, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&vgpu_pool_mutex);
    }
    return vgpu_real.cuGraphAddMemAllocNode(node, graph, dependencies, count, params);
}

VGPU_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    VGPU_ENTER(cuDeviceGraphMemTrim, device);
    CUresult rc = vgpu_real.cuDeviceGraphMemTrim(device);
    vgpu_graph_memory_settle();
    return rc;
}
