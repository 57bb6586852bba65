/*
 * Internal queue helpers for agents (hsa-glue/) and the engine.
 *
 * Producer protocol (xtq__queue_enqueue for the engine, xtq_queue_submit,
 * applications):
 *   1. xtq_queue_reserve(q, 1, &i)            -- slot i is free (header INVALID)
 *   2. write bytes 4..63 of xtq_queue_slot(q, i)
 *   3. q->cookies[i & q->mask] = cookie       -- ALWAYS, NULL when none; plain store
 *      q->results[i & q->mask] = {buf, len, payload, payload_len}
 *                                             -- likewise ({NULL, 0, NULL, 0}: none)
 *   4. xtq_queue_publish(q, i, header, rest)  -- release: orders 2 and 3 before it
 *   5. xtq_queue_ring_doorbell(q, i)
 * q->retire is set once (by the first enqueue that carries a cookie, from
 * its descriptor: the engine's retire function) before any packet that
 * carries a cookie is published; it is never changed while such packets
 * are in flight. The publish in
 * step 4 is what makes both the cookie and q->retire visible to the agent.
 *
 * Consumer protocol (a host-side packet processor such as the CPU agent):
 *   load the header (acquire); when it is not INVALID copy the packet, the
 *   cookie and q->retire (and, if its tasks take result buffers, results[slot]),
 *   set cookies[slot] = NULL (and results[slot] = {NULL, 0}), store the header INVALID
 *   (release), then store read_index + 1 (release) and call
 *   xtq__queue_notify_space(q). When the packet finished, and only if the
 *   copied cookie was not NULL, call retire(cookie, status).
 * A producer acquires read_index in reserve, so it sees the slot INVALID and
 * the cookie cleared before it writes them again.
 * "write_index" / "read_index" mean *q->write_index / *q->read_index
 * (internal.h): the agent's runtime may own them. q->prepare, when set, runs
 * inside xtq_queue_publish before the header store.
 */
#ifndef XTQ_QUEUE_INT_H
#define XTQ_QUEUE_INT_H

#include "internal.h"

/*
 * Initialise `q` over memory the agent allocated: `ring_mem` holds `size`
 * 64-byte slots (64-byte aligned), `idx` the two indices, `doorbell` an
 * initialised signal. Marks every slot INVALID, zeroes the indices,
 * allocates the zeroed cookie and result arrays, sets retire = NULL, registrations = 0,
 * and points q->write_index / q->read_index at `idx` unless the agent set
 * them before the call (then `idx` may be NULL). Zero the struct first.
 * Returns 0, -XTQ_EINVAL (size not a power of two >= 2) or -XTQ_ENOMEM.
 */
int xtq__queue_init(xtq_queue_t *q, xtq_agent_t *agent, uint32_t size, void *ring_mem,
                    struct xtq__queue_indices *idx, xtq_signal_t *doorbell);

/* Free what xtq__queue_init allocated (the cookie and result arrays). */
void xtq__queue_fini(xtq_queue_t *q);

/* Whether `size` is acceptable for a queue (power of two, >= 2). */
static inline bool xtq__queue_size_ok(uint32_t size)
{
    return size >= 2 && (size & (size - 1)) == 0;
}

/* The generic enqueue operation (xtq__agent_ops.enqueue) for agents whose
 * queues follow the producer protocol above: reserve, bytes 4..63, cookie,
 * result buffer and retire, publish, doorbell. 0 or -XTQ_EAGAIN (full).
 * The result buffer waits in q->results for the consumer, which takes it
 * with the cookie (the CPU agent, for xtq_task_result()); an agent whose
 * tasks cannot reach one (ROCr) refuses it before calling this. */
int xtq__queue_enqueue(xtq_queue_t *q, const struct xtq__enqueue *desc);

/* A consumer advanced read_index: wake producers waiting for space in
 * xtq_queue_submit (they sleep on the doorbell signal's futex). Cheap when
 * nobody waits: one load. */
void xtq__queue_notify_space(xtq_queue_t *q);

/* Producer step 3's retire, set by the first enqueue that carries a cookie.
 * Two producers may make their first enqueues at once (two engine planes
 * putting into one queue): one stores it, with release; the other
 * acquires that store and stores nothing, so every packet's publish comes
 * after the store its agent reads. */
static inline void xtq__queue_set_retire(xtq_queue_t *q, xtq__retire_fn fn)
{
    xtq__retire_fn cur = __atomic_load_n(&q->retire, __ATOMIC_ACQUIRE);
    if (cur == fn)
        return;
    if (cur == NULL &&
        __atomic_compare_exchange_n(&q->retire, &cur, fn, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return;
    if (cur != fn) /* another function than the first: it replaces it */
        __atomic_store_n(&q->retire, fn, __ATOMIC_RELEASE);
}

#endif /* XTQ_QUEUE_INT_H */
