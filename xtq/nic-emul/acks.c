/*
 * Acknowledgements: the target's answer to every PUT (Fig. 4, step 7),
 * with a fetching put's result.
 *
 * target.c records each arriving put in its peer's ring (xtq__ack_hold:
 * one entry per window slot, allocated with the ring at the peer's first
 * put, so that acknowledging never allocates) and acknowledges it when it
 * is enqueued, rejected, or (with remote completion) retired on an agent's
 * thread (xtq__ack_done); the initiator frees the window slot when the ack
 * arrives (initiator.c). An ack is sent at once where the transport takes
 * it and nothing is queued before it, else queued for the progress
 * thread, which keeps the order. A send that fails is retried after a
 * backoff; an ack the initiator never got is sent again when it asks.
 *
 * Acks without a result, liveness probes and re-asks travel on the
 * control channel: tagged messages into receives of their own (CTRL_RX
 * headers), apart from the multi-receive regions where puts land. A
 * target whose regions are all held by backlogged tasks still hears acks
 * and pings (issue 10, bug 6).
 *
 * An entry is free the moment its ack is handed to the transport: the
 * initiator may reuse its window slot as soon as the ack arrives. If the
 * hand-over fails, nothing reached the initiator, so the entry is still
 * that put's and takes the ack back.
 *
 * A fetching put's result buffer is the tail of a block in memory every
 * agent can reach (a registered pool for small results, a registered
 * allocation beyond), zero-filled when the put arrives:
 *   [struct ack_send, 64 B][ack header, 64 B][result, padded to 64]
 * Header and result leave as one message: injected when small, else sent
 * from the block, which then belongs to its send until the completion
 * (xtq__ack_sent; struct ack_send is the send's context).
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

/* Blocks of this size come from the pool (results up to 3968 bytes);
 * larger ones are registered allocations of their own. */
#define RESULT_BLOCK  4096u
#define RESULT_BLOCKS 64u
#define SEND_HDR      64u
#define ACK_HDR       sizeof(struct xtq__wire_hdr)
/* A failed send is retried after 1 ms, doubling up to this. */
#define RETRY_MAX_NS 128000000ull

XTQ_STATIC_ASSERT(sizeof(struct ack_send) <= SEND_HDR, "ack_send fits its block's head");

static size_t wire_len(uint32_t result_len)
{
    return ACK_HDR + XTQ_ALIGN_UP((size_t)result_len, (size_t)64);
}

static size_t block_len(uint32_t result_len)
{
    return SEND_HDR + wire_len(result_len);
}

/* Page-granular: a GPU runtime registers whole pages, and two
 * registrations must never share one. */
static size_t block_alloc_len(uint32_t result_len)
{
    return XTQ_ALIGN_UP(block_len(result_len), (size_t)4096);
}

int xtq__acks_open(struct xtq__engine *e)
{
    e->res_pool = aligned_alloc(4096, (size_t)RESULT_BLOCK * RESULT_BLOCKS);
    e->res_free = calloc(RESULT_BLOCKS, sizeof(*e->res_free));
    if (!e->res_pool || !e->res_free)
        return -XTQ_ENOMEM;
    int rc = xtq__agents_mem_register(e->ctx, e->res_pool, (size_t)RESULT_BLOCK * RESULT_BLOCKS);
    if (rc)
        return rc;
    e->res_registered = true;
    for (uint32_t i = 0; i < RESULT_BLOCKS; i++)
        e->res_free[i] = RESULT_BLOCKS - 1 - i;
    e->res_nfree = RESULT_BLOCKS;
    return 0;
}

/* A block whose result part (`len` bytes and the padding) is zero, or NULL. */
static uint8_t *block_alloc(struct xtq__engine *e, uint32_t len, bool *pooled)
{
    uint8_t *b = NULL;
    if (unlikely(atomic_load_explicit(&xtq__faults.result_alloc, memory_order_relaxed)) &&
        xtq__fault_take(&xtq__faults.result_alloc))
        return NULL;
    if (block_len(len) <= RESULT_BLOCK) {
        xtq__mutex_lock(&e->ack_lock);
        if (e->res_nfree)
            b = e->res_pool + (size_t)e->res_free[--e->res_nfree] * RESULT_BLOCK;
        pthread_mutex_unlock(&e->ack_lock);
    }
    *pooled = b != NULL;
    if (!b) {
        b = aligned_alloc(4096, block_alloc_len(len));
        if (!b)
            return NULL;
        if (xtq__agents_mem_register(e->ctx, b, block_alloc_len(len)) != 0) {
            free(b);
            return NULL;
        }
    }
    memset(b + SEND_HDR + ACK_HDR, 0, wire_len(len) - ACK_HDR);
    return b;
}

/* Never under ack_lock (the pool takes it). */
static void block_release(struct xtq__engine *e, uint8_t *b, bool pooled, uint32_t len)
{
    if (!b)
        return;
    if (pooled) {
        xtq__mutex_lock(&e->ack_lock);
        e->res_free[e->res_nfree++] = (uint32_t)((size_t)(b - e->res_pool) / RESULT_BLOCK);
        pthread_mutex_unlock(&e->ack_lock);
    } else {
        xtq__agents_mem_deregister(e->ctx, b, block_alloc_len(len));
        free(b);
    }
}

/* An ack on its way out: what the entry held when it was handed over
 * (the entry may serve the next put meanwhile). */
struct ack_out {
    int dest;
    int32_t status;
    uint64_t seq;
    uint64_t since;
    uint64_t refused_at;
    uint8_t *block;
    bool pooled;
    uint32_t result_len;
};

/* Caller holds ack_lock: hand the entry's ack over for sending. */
static struct ack_out ack_take(struct ack_entry *a, bool async)
{
    struct ack_out o = {a->dest,       a->status, a->seq,    a->since,
                        a->refused_at, a->block,  a->pooled, a->result_len};
    a->state = ACK_FREE;
    a->sent = true;
    a->result_inflight = async;
    a->block = NULL;
    return o;
}

/* Caller holds ack_lock: a hand-over that left nothing on the wire gives
 * the ack back to its entry; false when the entry serves another put
 * now (then the ack is dropped: the caller releases the block). */
static bool ack_giveback(struct ack_entry *a, const struct ack_out *o)
{
    if (a->state != ACK_FREE || !a->sent || a->seq != o->seq)
        return false;
    a->sent = false;
    a->result_inflight = false;
    a->status = o->status;
    a->since = o->since;
    a->refused_at = o->refused_at;
    a->block = o->block;
    a->pooled = o->pooled;
    a->result_len = o->result_len;
    return true;
}

void xtq__acks_close(struct xtq__engine *e)
{
    /* The endpoint is closed: sends still listed never completed. */
    while (e->acks_inflight) {
        struct ack_send *snd = e->acks_inflight;
        e->acks_inflight = snd->next;
        if (!snd->pooled)
            block_release(e, (uint8_t *)snd, false, snd->result_len);
    }
    for (int r = 0; e->peers && r < e->ctx->size; r++) {
        struct ack_entry *ring = e->peers[r].acks;
        for (uint32_t i = 0; ring && i < e->window; i++)
            if (ring[i].block && !ring[i].pooled)
                block_release(e, ring[i].block, false, ring[i].result_len);
        free(ring);
        e->peers[r].acks = NULL;
    }
    if (e->res_registered)
        xtq__agents_mem_deregister(e->ctx, e->res_pool, (size_t)RESULT_BLOCK * RESULT_BLOCKS);
    free(e->res_pool);
    free(e->res_free);
    e->res_pool = NULL;
    e->res_free = NULL;
}

/* ---- recording ------------------------------------------------------------ */

/* Progress turn only (arrivals): the peer's ring, made at its first put. */
static struct ack_entry *ring_of(struct xtq__engine *e, uint32_t src)
{
    struct peer *p = &e->peers[src];
    if (!p->acks) {
        struct ack_entry *ring = calloc(e->window, sizeof(*ring));
        if (!ring)
            return NULL;
        for (uint32_t i = 0; i < e->window; i++)
            ring[i].dest = (int32_t)src;
        p->acks = ring;
    }
    return p->acks;
}

struct ack_entry *xtq__ack_hold(struct xtq__engine *e, uint32_t src, uint64_t seq,
                                uint32_t result_len, bool resend, int *err)
{
    struct ack_entry *ring = ring_of(e, src);
    *err = 0;
    if (!ring) {
        *err = -XTQ_ENOMEM;
        return NULL;
    }
    /* The initiator's window keeps at most `window` puts unacknowledged,
     * so entry seq % window is free unless the peer runs another window
     * size or repeats itself. The entry remembers the last seq it served:
     * that seq again is a copy (a resend that crossed its original), an
     * older one a late copy of a put long answered; neither runs. A put
     * refused as MISSING (ack_reask) runs only as its resend, and not
     * once XTQ__RESEND_MAX + 1 MISSING answers have gone: the initiator
     * has failed it with -XTQ_EIO by then (every copy may have been on its
     * way all along: a peer whose puts waited unmatched for 50 s ran 52
     * puts it had failed, multihost link_down_30s). */
    struct ack_entry *a = &ring[seq % e->window];
    xtq__mutex_lock(&e->ack_lock);
    bool revive = a->used && a->seq == seq && a->missing && resend && a->state == ACK_FREE &&
                  a->missing_sent <= XTQ__RESEND_MAX;
    if (!revive && a->used && seq <= a->seq) {
        *err = -XTQ_EALREADY;
        pthread_mutex_unlock(&e->ack_lock);
        return NULL;
    }
    if (a->state != ACK_FREE) {
        *err = -XTQ_EPROTO;
        pthread_mutex_unlock(&e->ack_lock);
        return NULL;
    }
    a->used = true;
    a->missing = false;
    a->missing_sent = 0;
    a->state = ACK_HELD;
    a->sent = false;
    a->result_inflight = false;
    a->seq = seq;
    a->status = 0;
    a->tries = 0;
    a->refused_at = 0;
    a->block = NULL;
    a->result_len = 0;
    pthread_mutex_unlock(&e->ack_lock);
    if (result_len) {
        bool pooled;
        uint8_t *b = block_alloc(e, result_len, &pooled);
        if (!b) {
            *err = -XTQ_ENOMEM;
        } else {
            a->block = b;
            a->pooled = pooled;
            a->result_len = result_len;
        }
    }
    return a;
}

void *xtq__ack_result(const struct ack_entry *a)
{
    return a->block ? a->block + SEND_HDR + ACK_HDR : NULL;
}

/* ---- sending -------------------------------------------------------------- */

/* Put an ack on the wire: 0 (injected: gone), 1 (a send from the block is
 * in flight, listed), or the fabric's error (-FI_EAGAIN: not now). */
static ssize_t ack_transmit(struct xtq__engine *e, struct ack_entry *a, const struct ack_out *o)
{
    struct xtq__wire_hdr h;
    xtq_ctx_t *ctx = e->ctx;

    /* Test hooks: an ack lost after it left, or refused by the transport. */
    if (unlikely(atomic_load_explicit(&xtq__faults.ack_drop, memory_order_relaxed)) &&
        xtq__fault_take(&xtq__faults.ack_drop)) {
        xtq__mutex_lock(&e->ack_lock);
        if (a->seq == o->seq)
            a->result_inflight = false;
        pthread_mutex_unlock(&e->ack_lock);
        return 0;
    }
    if (unlikely(atomic_load_explicit(&xtq__faults.ack_send, memory_order_relaxed)) &&
        xtq__fault_take(&xtq__faults.ack_send))
        return -FI_EIO;

    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, ctx->job_key, (uint32_t)ctx->rank, o->seq);
    h.status = o->status;
    if (!o->block)
        return xtq__ctrl_send(e, o->dest, &h);
    h.result_len = o->result_len;
    memcpy(o->block + SEND_HDR, &h, sizeof(h));
    size_t len = wire_len(o->result_len);
    /* Small enough to leave at once: through the inbox on one host. */
    if (len <= e->ofi.inject_size) {
        if (e->inbox_peers.seg && xtq__inbox_send(e, o->dest, o->block + SEND_HDR, len) == 0)
            return 0;
        return xtq__ofi_inject(&e->ofi, o->block + SEND_HDR, len, o->dest);
    }

    struct ack_send *snd = (struct ack_send *)o->block;
    snd->kind = CTX_ACK;
    snd->pooled = o->pooled;
    snd->result_len = o->result_len;
    snd->entry = a;
    snd->seq = o->seq;
    snd->prev = NULL;
    xtq__mutex_lock(&e->ack_lock);
    snd->next = e->acks_inflight;
    if (snd->next)
        snd->next->prev = snd;
    e->acks_inflight = snd;
    pthread_mutex_unlock(&e->ack_lock);
    struct iovec iov = {o->block + SEND_HDR, len};
    ssize_t rc = xtq__ofi_sendv(&e->ofi, &iov, 1, o->dest, snd);
    if (rc == 0)
        return 1;
    xtq__mutex_lock(&e->ack_lock);
    if (snd->prev)
        snd->prev->next = snd->next;
    else
        e->acks_inflight = snd->next;
    if (snd->next)
        snd->next->prev = snd->prev;
    pthread_mutex_unlock(&e->ack_lock);
    return rc;
}

/* Whether the entry's ack leaves from its block and completes later. */
static bool ack_async(const struct xtq__engine *e, const struct ack_entry *a)
{
    return a->block && wire_len(a->result_len) > e->ofi.inject_size;
}

/* Caller holds ack_lock. */
static void queue_push(struct xtq__engine *e, struct ack_entry *a, bool at_head)
{
    a->state = ACK_QUEUED;
    if (at_head) {
        a->next = e->acks_head;
        e->acks_head = a;
        if (!e->acks_tail)
            e->acks_tail = a;
    } else {
        a->next = NULL;
        if (e->acks_tail)
            e->acks_tail->next = a;
        else
            e->acks_head = a;
        e->acks_tail = a;
    }
    atomic_fetch_add(&e->acks_pending, 1);
}

/* Caller holds ack_lock: head of the send queue off. */
static void queue_pop(struct xtq__engine *e)
{
    e->acks_head = e->acks_head->next;
    if (!e->acks_head)
        e->acks_tail = NULL;
    atomic_fetch_sub(&e->acks_pending, 1);
}

/* Caller holds ack_lock: a send failed; again after a backoff. */
static void retry_push(struct xtq__engine *e, struct ack_entry *a)
{
    uint64_t wait = 1000000ull << (a->tries < 7 ? a->tries : 7);
    a->tries++;
    a->state = ACK_QUEUED;
    a->since = xtq__now_ns() + (wait < RETRY_MAX_NS ? wait : RETRY_MAX_NS);
    a->next = e->acks_retry;
    e->acks_retry = a;
    if (!e->acks_retry_due || a->since < e->acks_retry_due)
        e->acks_retry_due = a->since;
    atomic_fetch_add(&e->acks_retrying, 1);
}

/* Caller holds ack_lock: retries that are due join the send queue. */
static void retry_due(struct xtq__engine *e, uint64_t now)
{
    struct ack_entry **pp = &e->acks_retry;
    e->acks_retry_due = 0;
    while (*pp) {
        struct ack_entry *a = *pp;
        if (a->since <= now) {
            *pp = a->next;
            atomic_fetch_sub(&e->acks_retrying, 1);
            a->since = now;
            queue_push(e, a, false);
        } else {
            if (!e->acks_retry_due || a->since < e->acks_retry_due)
                e->acks_retry_due = a->since;
            pp = &a->next;
        }
    }
}

static void ack_counted(struct xtq__engine *e, int dest)
{
    XTQ__STAT_INC(e->ctx, acks_sent);
    xtq__bell_ring(e, dest);
}

/* After ack_transmit() failed with `rc`: the ack goes back to its entry,
 * to the queue's head (the transport is full: keep the order) or to the
 * retry list (an error), unless the entry serves another put now. */
static void ack_failed(struct xtq__engine *e, struct ack_entry *a, const struct ack_out *o,
                       ssize_t rc, bool at_head)
{
    bool kept;
    if (rc != -FI_EAGAIN)
        XTQ_LOG_ONCE(OFI, WARN, "sending an ack to rank %d failed (%s); retrying", o->dest,
                     fi_strerror((int)-rc));
    xtq__mutex_lock(&e->ack_lock);
    kept = !e->acks_closed && ack_giveback(a, o);
    if (kept && rc == -FI_EAGAIN)
        queue_push(e, a, at_head);
    else if (kept)
        retry_push(e, a);
    pthread_mutex_unlock(&e->ack_lock);
    if (!kept)
        block_release(e, o->block, o->pooled, o->result_len);
}

void xtq__ack_done(struct xtq__engine *e, struct ack_entry *a, int status)
{
    uint8_t *drop = NULL;
    bool drop_pooled = false;
    uint32_t drop_len = 0;

    xtq__mutex_lock(&e->ack_lock);
    a->status = status;
    /* A task that failed sends no result; after stop nothing is sent. */
    if (status || e->acks_closed) {
        drop = a->block;
        drop_pooled = a->pooled;
        drop_len = a->result_len;
        a->block = NULL;
    }
    if (e->acks_closed) {
        a->state = ACK_FREE;
        pthread_mutex_unlock(&e->ack_lock);
        block_release(e, drop, drop_pooled, drop_len);
        return;
    }
    a->since = xtq__now_ns();
    /* Nothing queued before it: send from this thread (an agent worker
     * retiring the task, or the progress turn), unless the progress thread
     * owns the endpoint (XTQ_ENDPOINT_OWNER=progress) and this is not its
     * turn. */
    if (e->acks_head || e->ofi.inject_size < ACK_HDR ||
        (e->owner_only && !xtq__engine_in_turn(e))) {
        queue_push(e, a, false);
        pthread_mutex_unlock(&e->ack_lock);
        block_release(e, drop, drop_pooled, drop_len);
        xtq__engine_wake(e);
        return;
    }
    struct ack_out o = ack_take(a, ack_async(e, a));
    pthread_mutex_unlock(&e->ack_lock);
    block_release(e, drop, drop_pooled, drop_len);

    ssize_t rc = ack_transmit(e, a, &o);
    if (rc == 0) {
        block_release(e, o.block, o.pooled, o.result_len);
        ack_counted(e, o.dest);
    } else if (rc < 0) {
        ack_failed(e, a, &o, rc, false);
        xtq__engine_wake(e);
    }
}

void xtq__ack_unrecorded(struct xtq__engine *e, int dest, uint64_t seq, int status)
{
    struct xtq__wire_hdr h;
    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, e->ctx->job_key, (uint32_t)e->ctx->rank, seq);
    h.status = status;
    if (xtq__ctrl_send(e, dest, &h) == 0)
        ack_counted(e, dest);
}

/* Caller holds ack_lock: the put `seq` has not arrived here, and entry `a`
 * may stand for it: nothing else holds the entry, and the last put it
 * served is older. A receive region is posted: while none is (tasks hold
 * them all), puts wait unmatched in the provider, and the ASK, on the
 * control channel, may have overtaken this one; a region posted again
 * takes what waited at once. */
static bool may_refuse(const struct xtq__engine *e, const struct ack_entry *a, uint64_t seq)
{
    return a->state == ACK_FREE && !a->result_inflight && (!a->used || a->seq < seq) &&
           atomic_load_explicit(&e->regions_out, memory_order_relaxed) < e->nregions;
}

void xtq__ack_reask(struct xtq__engine *e, uint32_t src, uint64_t seq, bool again)
{
    struct ack_entry *ring = ring_of(e, src); /* a progress turn */
    struct xtq__wire_hdr h;
    bool answer = false, refused = false;
    if (!ring)
        return;
    struct ack_entry *a = &ring[seq % e->window];
    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, e->ctx->job_key, (uint32_t)e->ctx->rank, seq);
    xtq__mutex_lock(&e->ack_lock);
    /* Held or queued: its ack is on its way. A result still being sent:
     * likewise. Sent: again, on the control channel; a result cannot be
     * sent twice (its block is gone), so that put fails with -XTQ_EIO
     * rather than wait for ever. Refused before: MISSING again. Not here
     * (another seq): on the first ask it may still be on its way; asked
     * again (a quarter timeout later), it was lost (a connection the transport replaced dropped
     * what it held, a message that arrived malformed): the entry becomes
     * its tombstone, so that a late copy never runs, and the initiator
     * sends it again (RESEND) or fails it, knowing it did not run. */
    if (a->used && a->seq == seq && a->state == ACK_FREE && a->sent && !a->result_inflight) {
        h.status = a->status ? a->status : a->result_len ? -XTQ_EIO : 0;
        h.flags = a->missing ? XTQ__WIRE_MISSING : 0;
        if (a->missing && a->missing_sent < UINT8_MAX)
            a->missing_sent++;
        answer = true;
    } else if (again && may_refuse(e, a, seq)) {
        a->used = true;
        a->missing = true;
        a->missing_sent = 1;
        a->sent = true;
        a->seq = seq;
        a->status = -XTQ_EIO;
        a->result_len = 0;
        h.status = -XTQ_EIO;
        h.flags = XTQ__WIRE_MISSING;
        answer = refused = true;
    }
    pthread_mutex_unlock(&e->ack_lock);
    if (answer && xtq__ctrl_send(e, (int)src, &h) == 0) {
        if (refused)
            XTQ_LOG_ONCE(ENGINE, WARN,
                         "rank %u asked again for put %llu, which never arrived here (lost in "
                         "the transport); answered MISSING",
                         src, (unsigned long long)seq);
        else
            XTQ_LOG_ONCE(ENGINE, INFO, "rank %u asked again for an ack (put %llu); sent", src,
                         (unsigned long long)seq);
        ack_counted(e, (int)src);
    }
}

/* ---- the control channel ---------------------------------------------------- */

/* Receives of one header each: 4 per peer, 16 to 128; the provider holds
 * what arrives beyond them until they are reposted. */
static unsigned ctrl_rx_count(int nranks)
{
    unsigned n = 4u * (unsigned)nranks;
    return n < 16 ? 16 : n > 128 ? 128 : n;
}

static void ctrl_post(struct xtq__engine *e, struct ctrl_rx *c)
{
    int rc = xtq__ofi_post_trecv(&e->ofi, c->buf, sizeof(c->buf), XTQ__CTRL_TAG, c);
    if (rc == -FI_EAGAIN) {
        atomic_store(&c->needs_post, 1);
        xtq__engine_wake(e);
    } else if (rc) {
        XTQ_LOG_ONCE(OFI, ERROR, "posting a control receive failed: %s", fi_strerror(-rc));
        atomic_store(&c->needs_post, 1);
    }
}

int xtq__ctrl_open(struct xtq__engine *e)
{
    unsigned n = ctrl_rx_count(e->ctx->size);
    /*
     * A provider's receive entries hold posted receives and unexpected
     * messages alike (shm: 1024, its maximum). Peers may have a whole
     * window each waiting unexpected while our regions are held: where
     * the control receives would take entries those need, a region could
     * not be posted again (-FI_ENOMEM) and nothing would arrive any more.
     * There, control messages travel untagged into the regions (as puts
     * do), and say so once.
     */
    size_t need = (size_t)e->window * (size_t)(e->ctx->size - 1) + e->nregions + n;
    if (e->ofi.rx_size && need > e->ofi.rx_size) {
        xtq_info(ENGINE,
                 "%s: %zu receive entries, %zu needed with a control channel; control "
                 "messages share the receive regions",
                 e->ofi.prov_name, e->ofi.rx_size, need);
        return 0;
    }
    e->ctrl = aligned_alloc(64, n * sizeof(*e->ctrl));
    if (!e->ctrl)
        return -XTQ_ENOMEM;
    memset(e->ctrl, 0, n * sizeof(*e->ctrl));
    e->nctrl = n;
    for (unsigned i = 0; i < e->nctrl; i++) {
        e->ctrl[i].kind = CTX_CTRL;
        int rc = xtq__ofi_post_trecv(&e->ofi, e->ctrl[i].buf, sizeof(e->ctrl[i].buf),
                                     XTQ__CTRL_TAG, &e->ctrl[i]);
        if (rc && rc != -FI_EAGAIN) {
            xtq_err(OFI, "posting control receives: %s", fi_strerror(-rc));
            return -XTQ_EFABRIC;
        }
        if (rc)
            atomic_store(&e->ctrl[i].needs_post, 1);
    }
    return 0;
}

void xtq__ctrl_close(struct xtq__engine *e)
{
    free(e->ctrl);
    e->ctrl = NULL;
    e->nctrl = 0;
}

void xtq__ctrl_repost(struct xtq__engine *e)
{
    for (unsigned i = 0; i < e->nctrl; i++)
        if (atomic_load_explicit(&e->ctrl[i].needs_post, memory_order_relaxed) &&
            atomic_exchange(&e->ctrl[i].needs_post, 0))
            ctrl_post(e, &e->ctrl[i]);
}

ssize_t xtq__ctrl_send(struct xtq__engine *e, int dest, const struct xtq__wire_hdr *hdr)
{
    /* On one host, through the peer's inbox where its ring has room
     * (inbox.c): a store instead of the transport's send. */
    if (e->inbox_peers.seg && xtq__inbox_send(e, dest, hdr, sizeof(*hdr)) == 0)
        return 0;
    if (e->nctrl)
        return xtq__ofi_tinject(&e->ofi, hdr, sizeof(*hdr), dest, XTQ__CTRL_TAG);
    /* No control channel here (ctrl_open): into the peer's regions. */
    if (e->ofi.inject_size < sizeof(*hdr))
        return -FI_ENOSPC;
    return xtq__ofi_inject(&e->ofi, hdr, sizeof(*hdr), dest);
}

void xtq__ctrl_recv(struct xtq__engine *e, struct ctrl_rx *c, size_t len, fi_addr_t src, bool ok)
{
    const struct xtq__wire_hdr *hdr;
    xtq_ctx_t *ctx = e->ctx;
    int rc = ok ? xtq__wire_validate(c->buf, len, ctx->job_key, (uint32_t)ctx->size, e->max_msg,
                                     &hdr, NULL, NULL)
                : -XTQ_EBADMSG;
    /* Headers only: a put, or an ack with a result, does not belong here. */
    if (rc == 0 && (hdr->type == XTQ__MSG_PUT || hdr->result_len))
        rc = -XTQ_EPROTO;
    /* The rank it claims must be the endpoint it came from (target.c). */
    if (rc == 0 && !xtq__ofi_source_is(&e->ofi, (int)hdr->src_rank, src))
        rc = -XTQ_ESRCRANK;
    if (rc) {
        xtq__stats_rejected(ctx, rc);
        XTQ_LOG_ONCE(ENGINE, WARN, "dropped an invalid control message of %zu bytes: %s", len,
                     xtq_errname(rc));
    } else if (xtq__fault_dropped(hdr->src_rank)) {
        ; /* a test's link outage (target.c) */
    } else {
        xtq__peer_msg(e, hdr);
        if (xtq__probe_recv(e, hdr))
            ; /* liveness only */
        else if (hdr->type == XTQ__MSG_ACK)
            xtq__initiator_ack(e, hdr, NULL);
        else
            xtq__ack_reask(e, hdr->src_rank, hdr->seq, hdr->flags & XTQ__WIRE_ASK_AGAIN);
    }
    if (!atomic_load(&e->stop))
        ctrl_post(e, c);
}

void xtq__ack_sent(struct xtq__engine *e, void *send, int status)
{
    struct ack_send *snd = send;
    struct ack_entry *a = snd->entry;
    int dest = a->dest;

    xtq__mutex_lock(&e->ack_lock);
    if (snd->prev)
        snd->prev->next = snd->next;
    else
        e->acks_inflight = snd->next;
    if (snd->next)
        snd->next->prev = snd->prev;
    bool mine = a->state == ACK_FREE && a->sent && a->seq == snd->seq;
    if (mine)
        a->result_inflight = false;
    if (status && mine && !e->acks_closed) {
        /* Nothing of it arrived: the entry is still its put's. */
        a->sent = false;
        a->block = (uint8_t *)snd;
        a->pooled = snd->pooled;
        a->result_len = snd->result_len;
        retry_push(e, a);
        pthread_mutex_unlock(&e->ack_lock);
        XTQ_LOG_ONCE(OFI, WARN, "sending a result to rank %d failed (%s); retrying", dest,
                     fi_strerror(status));
        return;
    }
    pthread_mutex_unlock(&e->ack_lock);
    block_release(e, (uint8_t *)snd, snd->pooled, snd->result_len);
    if (!status)
        ack_counted(e, dest);
}

/* Send queued acks (progress thread), in order; a destination that takes
 * nothing stops the flush until the next turn. */
int xtq__acks_flush(struct xtq__engine *e)
{
    int n = 0;
    if (atomic_load_explicit(&e->acks_retrying, memory_order_relaxed)) {
        uint64_t now = xtq__now_ns();
        xtq__mutex_lock(&e->ack_lock);
        if (e->acks_retry && now >= e->acks_retry_due)
            retry_due(e, now);
        pthread_mutex_unlock(&e->ack_lock);
    }
    while (atomic_load(&e->acks_pending)) {
        xtq__mutex_lock(&e->ack_lock);
        struct ack_entry *a = e->acks_head;
        if (!a) {
            pthread_mutex_unlock(&e->ack_lock);
            break;
        }
        queue_pop(e);
        if (atomic_load(&e->peers[a->dest].down)) {
            /* Nobody to tell. */
            uint8_t *b = a->block;
            bool pooled = a->pooled;
            uint32_t len = a->result_len;
            a->block = NULL;
            a->state = ACK_FREE;
            pthread_mutex_unlock(&e->ack_lock);
            block_release(e, b, pooled, len);
            n++;
            continue;
        }
        struct ack_out o = ack_take(a, ack_async(e, a));
        pthread_mutex_unlock(&e->ack_lock);

        ssize_t rc = ack_transmit(e, a, &o);
        if (rc == 0) {
            block_release(e, o.block, o.pooled, o.result_len);
            ack_counted(e, o.dest);
        } else if (rc == -FI_EAGAIN && e->peer_timeout_ns && o.refused_at &&
                   xtq__now_ns() - o.refused_at >= e->peer_timeout_ns) {
            /* A destination that takes nothing for a whole peer timeout
             * of tries is gone: drop its acks rather than hold up
             * everyone's. Timed from the first refused try, not from when
             * the ack was queued: a flusher that did not run for a while
             * blames nobody. */
            block_release(e, o.block, o.pooled, o.result_len);
            xtq__peer_down(e, o.dest, "silent for longer than XTQ_PEER_TIMEOUT_MS");
        } else if (rc < 0) {
            if (rc == -FI_EAGAIN && !o.refused_at)
                o.refused_at = xtq__now_ns();
            ack_failed(e, a, &o, rc, true);
            if (rc == -FI_EAGAIN)
                break;
        }
        n++;
    }
    return n;
}

/* Agent workers may still be acknowledging tasks (after a drain timeout):
 * the queues are emptied under the lock, and stay closed. Blocks go at
 * destroy (sends in flight may still read theirs). */
void xtq__acks_drop(struct xtq__engine *e)
{
    xtq__mutex_lock(&e->ack_lock);
    for (struct ack_entry *a = e->acks_head; a; a = a->next)
        a->state = ACK_FREE;
    for (struct ack_entry *a = e->acks_retry; a; a = a->next)
        a->state = ACK_FREE;
    e->acks_head = e->acks_tail = e->acks_retry = NULL;
    e->acks_closed = true;
    atomic_store(&e->acks_pending, 0);
    atomic_store(&e->acks_retrying, 0);
    pthread_mutex_unlock(&e->ack_lock);
}
