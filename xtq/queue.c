/*
 * User-mode queues with HSA semantics. The agent owns the memory (host
 * memory for the CPU agent, mapped memory for a GPU); this file holds the
 * producer side and the common initialisation. See queue_int.h for the
 * producer/consumer protocol around cookies and retire.
 */
#include "internal.h"

#include "queue_int.h"

/* Producers waiting for space poll this long before sleeping. */
#define QUEUE_SPIN_NS 2000
/* Their sleeps are bounded: a GPU consumer cannot wake a futex. */
#define QUEUE_NAP_NS 50000

static inline _Atomic uint32_t *slot_word(xtq_queue_t *q, uint64_t index)
{
    return (_Atomic uint32_t *)(void *)&q->ring[index & q->mask];
}

int xtq__queue_init(xtq_queue_t *q, xtq_agent_t *agent, uint32_t size, void *ring_mem,
                    struct xtq__queue_indices *idx, xtq_signal_t *doorbell)
{
    /* idx may be NULL only when the agent already pointed write_index and
     * read_index at its runtime's own indices. */
    if (q == NULL || ring_mem == NULL || doorbell == NULL || !xtq__queue_size_ok(size) ||
        ((uintptr_t)ring_mem & (XTQ_CACHELINE - 1)) != 0 ||
        (idx == NULL && (q->write_index == NULL || q->read_index == NULL)))
        return -XTQ_EINVAL;

    q->cookies = calloc(size, sizeof(*q->cookies));
    q->results = calloc(size, sizeof(*q->results));
    if (q->cookies == NULL || q->results == NULL) {
        xtq__queue_fini(q);
        return -XTQ_ENOMEM;
    }
    q->ring = ring_mem;
    q->size = size;
    q->mask = size - 1;
    q->idx = idx;
    q->doorbell = doorbell;
    q->agent = agent;
    q->retire = NULL;
    atomic_init(&q->registrations, 0);
    memset(ring_mem, 0, (size_t)size * XTQ_AQL_PACKET_SIZE);
    for (uint32_t i = 0; i < size; i++)
        atomic_init(slot_word(q, i), XTQ_PACKET_TYPE_INVALID);
    if (idx != NULL) {
        atomic_init(&idx->write_index, 0);
        atomic_init(&idx->read_index, 0);
        if (q->write_index == NULL)
            q->write_index = &idx->write_index;
        if (q->read_index == NULL)
            q->read_index = &idx->read_index;
    }
    return 0;
}

void xtq__queue_fini(xtq_queue_t *q)
{
    free(q->cookies);
    q->cookies = NULL;
    free(q->results);
    q->results = NULL;
}

void xtq__queue_notify_space(xtq_queue_t *q)
{
    /* An RMW, not a plain load: it is ordered with the waiter's
     * registration (an RMW on the same word), so either we see the waiter
     * or the waiter, acquiring through it, sees the new read index. */
    if (atomic_fetch_add_explicit(&q->doorbell->waiters, 0, memory_order_seq_cst) != 0)
        xtq__signal_notify(q->doorbell);
}

int xtq_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    if (agent == NULL || queue == NULL || !xtq__queue_size_ok(size) ||
        (agent->info.max_queue_size != 0 && size > agent->info.max_queue_size))
        return -XTQ_EINVAL;
    int rc = agent->ops->queue_create(agent, size, queue);
    if (rc == 0 && (*queue)->idx != NULL) {
        if ((*queue)->write_index == NULL)
            (*queue)->write_index = &(*queue)->idx->write_index;
        if ((*queue)->read_index == NULL)
            (*queue)->read_index = &(*queue)->idx->read_index;
    }
    return rc;
}

int xtq_queue_destroy(xtq_queue_t *queue)
{
    if (queue == NULL)
        return -XTQ_EINVAL;
    if (atomic_load_explicit(&queue->registrations, memory_order_acquire) > 0)
        return -XTQ_EBUSY;
    return queue->agent->ops->queue_destroy(queue);
}

uint32_t xtq_queue_size(const xtq_queue_t *queue)
{
    return queue->size;
}

xtq_agent_t *xtq_queue_agent(const xtq_queue_t *queue)
{
    return queue->agent;
}

uint64_t xtq_queue_load_write_index(const xtq_queue_t *queue)
{
    return atomic_load_explicit(queue->write_index, memory_order_acquire);
}

uint64_t xtq_queue_load_read_index(const xtq_queue_t *queue)
{
    return atomic_load_explicit(queue->read_index, memory_order_acquire);
}

int xtq_queue_reserve(xtq_queue_t *queue, uint32_t count, uint64_t *index)
{
    uint64_t w, r;

    if (unlikely(count == 0 || count > queue->size))
        return -XTQ_EINVAL;
    w = atomic_load_explicit(queue->write_index, memory_order_relaxed);
    for (;;) {
        /* Acquire: the consumer freed the slots below r (header INVALID,
         * cookie cleared) before advancing it. */
        r = atomic_load_explicit(queue->read_index, memory_order_acquire);
        if (unlikely(r > w || w + count - r > queue->size)) {
            /* Full, or our w is stale (r has passed it): re-check once
             * against the current write index before reporting full. */
            uint64_t now = atomic_load_explicit(queue->write_index, memory_order_relaxed);
            if (now != w) {
                w = now;
                continue;
            }
            return -XTQ_EAGAIN;
        }
        if (atomic_compare_exchange_weak_explicit(queue->write_index, &w, w + count,
                                                  memory_order_acq_rel, memory_order_relaxed))
            break;
    }
    *index = w;
    return 0;
}

xtq_aql_packet_t *xtq_queue_slot(xtq_queue_t *queue, uint64_t index)
{
    return &queue->ring[index & queue->mask];
}

void xtq_queue_publish(xtq_queue_t *queue, uint64_t index, uint16_t header, uint16_t rest)
{
    if (queue->prepare != NULL)
        queue->prepare(queue, index, &queue->ring[index & queue->mask]);
    /* One 32-bit store: the consumer never sees a valid header with a
     * stale setup/type field. */
    atomic_store_explicit(slot_word(queue, index), (uint32_t)header | ((uint32_t)rest << 16),
                          memory_order_release);
}

void xtq_queue_ring_doorbell(xtq_queue_t *queue, uint64_t index)
{
    atomic_store_explicit(&queue->doorbell->value, (int64_t)index, memory_order_release);
    queue->agent->ops->doorbell(queue, index);
}

struct queue_space {
    xtq_queue_t *q;
    uint32_t count;
};

static bool queue_has_space(void *arg)
{
    struct queue_space *qs = arg;
    uint64_t w = atomic_load_explicit(qs->q->write_index, memory_order_relaxed);
    uint64_t r = atomic_load_explicit(qs->q->read_index, memory_order_seq_cst);
    return w + qs->count - r <= qs->q->size || r > w;
}

/* Wait until `count` slots could be free, or the deadline passes. Sleeps
 * on the doorbell signal's futex: host consumers wake it through
 * xtq__queue_notify_space, others are covered by the bounded naps. */
static int queue_wait_space(xtq_queue_t *q, uint32_t count, uint64_t deadline)
{
    struct queue_space qs = {q, count};
    struct xtq__spin_wait w = {
        .ready = queue_has_space,
        .arg = &qs,
        .word = &q->doorbell->seq,
        .waiters = &q->doorbell->waiters,
        .spin_ns = QUEUE_SPIN_NS,
        .nap_ns = QUEUE_NAP_NS,
    };
    int rc = xtq__spin_wait(&w, deadline);
    return rc > 0 ? 0 : rc;
}

int xtq__queue_enqueue(xtq_queue_t *q, const struct xtq__enqueue *d)
{
    uint64_t i;
    uint32_t first;
    int rc = xtq_queue_reserve(q, 1, &i);
    if (rc)
        return rc;
    xtq_aql_packet_t *slot = xtq_queue_slot(q, i);
    memcpy(slot->bytes + 4, d->packet->bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
    if (d->cookie != NULL)
        xtq__queue_set_retire(q, d->retire);
    q->cookies[i & q->mask] = d->cookie;
    q->results[i & q->mask] =
        (struct xtq__result_buf){d->result, d->result_len, d->payload, d->payload_len};
    memcpy(&first, d->packet->bytes, sizeof(first));
    xtq_queue_publish(q, i, (uint16_t)(first & 0xffffu), (uint16_t)(first >> 16));
    XTQ_TRACE_POINT(XTQ_TRACE_ENQUEUED, d->trace_key);
    xtq_queue_ring_doorbell(q, i);
    XTQ_TRACE_POINT(XTQ_TRACE_DOORBELL, d->trace_key);
    return 0;
}

/* When a wait for space of `timeout_ns` ends (UINT64_MAX: never). */
static uint64_t submit_deadline(int64_t timeout_ns)
{
    if (timeout_ns == XTQ_TIMEOUT_INFINITE)
        return UINT64_MAX;
    uint64_t now = xtq__now_ns();
    return (uint64_t)timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + (uint64_t)timeout_ns;
}

/* After a full queue's -XTQ_EAGAIN: wait for a slot, or say why not. */
static int submit_wait(xtq_queue_t *queue, int rc, int64_t timeout_ns, uint64_t deadline)
{
    if (rc != -XTQ_EAGAIN || timeout_ns == 0)
        return rc;
    return queue_wait_space(queue, 1, deadline);
}

int xtq_queue_submit(xtq_queue_t *queue, const xtq_aql_packet_t *packet, int64_t timeout_ns,
                     uint64_t *index)
{
    uint64_t i, deadline;
    xtq_aql_packet_t *slot;
    uint32_t first;
    int rc;

    if (queue == NULL || packet == NULL || timeout_ns < 0)
        return -XTQ_EINVAL;
    deadline = submit_deadline(timeout_ns);
    while ((rc = xtq_queue_reserve(queue, 1, &i)) != 0)
        if ((rc = submit_wait(queue, rc, timeout_ns, deadline)) != 0)
            return rc;

    slot = xtq_queue_slot(queue, i);
    memcpy(slot->bytes + 4, packet->bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
    queue->cookies[i & queue->mask] = NULL;
    queue->results[i & queue->mask] = (struct xtq__result_buf){NULL, 0, NULL, 0};
    memcpy(&first, packet->bytes, sizeof(first));
    xtq_queue_publish(queue, i, (uint16_t)(first & 0xffffu), (uint16_t)(first >> 16));
    xtq_queue_ring_doorbell(queue, i);
    if (index != NULL)
        *index = i;
    return 0;
}

int xtq_queue_submit_args(xtq_queue_t *queue, const xtq_aql_packet_t *packet, uint32_t kernarg_len,
                          uint64_t payload_len, int64_t timeout_ns)
{
    struct xtq__enqueue d;
    uint64_t deadline, arg1 = 0;
    int rc;

    if (queue == NULL || packet == NULL || timeout_ns < 0 || kernarg_len == 0 ||
        xtq_aql_header_type(packet->kernel.header) != XTQ_PACKET_TYPE_KERNEL_DISPATCH ||
        packet->kernel.kernarg_address == NULL || (payload_len && kernarg_len < 16))
        return -XTQ_EINVAL;
    if (payload_len) {
        memcpy(&arg1, (const uint8_t *)packet->kernel.kernarg_address + 8, sizeof(arg1));
        if (arg1 == 0)
            return -XTQ_EINVAL;
    }
    memset(&d, 0, sizeof(d));
    d.packet = packet;
    d.kernarg = packet->kernel.kernarg_address;
    d.kernarg_len = kernarg_len;
    d.payload = (const void *)(uintptr_t)arg1;
    d.payload_len = payload_len;
    deadline = submit_deadline(timeout_ns);
    while ((rc = queue->agent->ops->enqueue(queue, &d)) != 0)
        if ((rc = submit_wait(queue, rc, timeout_ns, deadline)) != 0)
            return rc;
    return 0;
}
