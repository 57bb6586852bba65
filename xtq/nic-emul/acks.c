/*
 * Acknowledgements: the target's answer to every PUT (Fig. 4, step 7).
 *
 * target.c acknowledges a put when it is enqueued, rejected, or (with
 * remote completion) retired on an agent's thread; the initiator frees the
 * window slot when the ack arrives (initiator.c). An ack is injected at
 * once where the transport takes it and nothing is queued before it, else
 * queued for the progress thread, which keeps the order.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

static void ack_queue(struct xtq__engine *e, struct ack_msg *a)
{
    xtq__mutex_lock(&e->ack_lock);
    if (e->acks_closed) {
        /* Stopped: nobody will send it (an agent worker acknowledging a
         * task that outlived finalize's drain). */
        pthread_mutex_unlock(&e->ack_lock);
        free(a);
        return;
    }
    a->next = NULL;
    if (e->acks_tail)
        e->acks_tail->next = a;
    else
        e->acks_head = a;
    e->acks_tail = a;
    atomic_fetch_add(&e->acks_pending, 1);
    pthread_mutex_unlock(&e->ack_lock);
    xtq__engine_wake(e);
}

/* Send an ack now if the transport takes it, else queue it for the
 * progress thread. Safe from any thread (agent workers call it). */
void xtq__ack_send(struct xtq__engine *e, int dest, uint64_t seq, int status)
{
    struct xtq__wire_hdr hdr;
    xtq_ctx_t *ctx = e->ctx;
    xtq__wire_hdr_init(&hdr, XTQ__MSG_ACK, ctx->job_key, (uint32_t)ctx->rank, seq);
    hdr.status = status;
    /* Sent here, from whichever thread acknowledges, unless the progress
     * thread owns the endpoint (XTQ_ENDPOINT_OWNER=progress). */
    if (!e->owner_only && !atomic_load(&e->acks_pending) && e->ofi.inject_size >= sizeof(hdr)) {
        if (xtq__ofi_inject(&e->ofi, &hdr, sizeof(hdr), dest) == 0) {
            XTQ__STAT_INC(ctx, acks_sent);
            xtq__bell_ring(e, dest);
            return;
        }
    }
    struct ack_msg *a = malloc(sizeof(*a));
    if (!a) {
        XTQ_LOG_ONCE(ENGINE, ERROR, "out of memory queuing an ack; initiator will time out");
        return;
    }
    a->dest = dest;
    a->hdr = hdr;
    a->since = 0;
    ack_queue(e, a);
}

/* Flush queued acks (progress thread). Injected acks need no completion;
 * providers without inject space get a plain send from the ack's memory. */
int xtq__acks_flush(struct xtq__engine *e)
{
    int n = 0;
    while (atomic_load(&e->acks_pending)) {
        xtq__mutex_lock(&e->ack_lock);
        struct ack_msg *a = e->acks_head;
        pthread_mutex_unlock(&e->ack_lock);
        if (!a)
            break;
        ssize_t rc = 0;
        if (!atomic_load(&e->peers[a->dest].down)) {
            rc = xtq__ofi_inject(&e->ofi, &a->hdr, sizeof(a->hdr), a->dest);
            if (rc == -FI_EAGAIN) {
                /* A destination that takes nothing for a whole peer
                 * timeout of tries is gone: drop its acks rather than hold
                 * up the acks to everyone else. Timed from the first try
                 * that failed, not from when the ack was queued: a flusher
                 * that did not run for a while blames nobody. */
                uint64_t now = xtq__now_ns();
                if (!a->since)
                    a->since = now;
                if (!e->peer_timeout_ns || now - a->since < e->peer_timeout_ns)
                    break;
                xtq__peer_down(e, a->dest, "silent for longer than XTQ_PEER_TIMEOUT_MS");
                rc = 0;
            }
        }
        if (atomic_load(&e->peers[a->dest].down))
            ; /* dropped */
        else if (rc)
            XTQ_LOG_ONCE(OFI, ERROR, "sending an ack to rank %d failed: %s", a->dest,
                         fi_strerror((int)-rc));
        else {
            XTQ__STAT_INC(e->ctx, acks_sent);
            xtq__bell_ring(e, a->dest);
        }
        xtq__mutex_lock(&e->ack_lock);
        e->acks_head = a->next;
        if (!e->acks_head)
            e->acks_tail = NULL;
        atomic_fetch_sub(&e->acks_pending, 1);
        pthread_mutex_unlock(&e->ack_lock);
        free(a);
        n++;
    }
    return n;
}

/* Agent workers may still be acknowledging tasks (after a drain timeout):
 * the list is taken under the lock, and the queue stays closed. */
void xtq__acks_drop(struct xtq__engine *e)
{
    xtq__mutex_lock(&e->ack_lock);
    struct ack_msg *a = e->acks_head;
    e->acks_head = e->acks_tail = NULL;
    e->acks_closed = true;
    atomic_store(&e->acks_pending, 0);
    pthread_mutex_unlock(&e->ack_lock);
    while (a) {
        struct ack_msg *next = a->next;
        free(a);
        a = next;
    }
}
