/*
 * The target: Fig. 4, steps 1-3 (DESIGN.md data path, steps 3-7).
 *
 * Posted multi-receive regions hold arriving messages. The progress turn
 * (progress.c) hands each one here: it is validated, rewritten under the
 * registry's read lock and handed to the target queue's agent through its
 * enqueue operation, which writes it into the queue and rings the
 * doorbell; the agent calls engine_retire when the task has finished. The kernel arguments and
 * payload stay where they landed; a region is reposted once the provider
 * has released it and every task that references it has retired. A full
 * queue never drops a task: it waits in the backlog, in arrival order, and
 * is retried when an agent retires packets. Each PUT is acknowledged
 * (acks.c): at enqueue, or when the task retired if the initiator asked for
 * remote completion, or at once with the error that rejected it. Acks and
 * liveness probes go to initiator.c and liveness.c.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"
#include "registry/registry.h"

#include <sys/mman.h>

/* ---- receive regions ---------------------------------------------------- */

#define RX_REGIONS_MAX 4096u

static int region_post(struct rx_region *r)
{
    r->landed = 0;
    r->landed_end = 0;
    r->release_pending = false;
    /* Posted before the call: once posted, the provider may fill and
     * release it on the progress thread before the call returns here
     * (a worker reposting after its task retired), and that release
     * must find it posted. */
    bool was_out = r->out;
    if (was_out) {
        r->out = false;
        atomic_fetch_sub(&r->e->regions_out, 1);
    }
    int rc = xtq__ofi_post_multi_recv(&r->e->ofi, r->buf, r->len, r);
    if (rc && was_out) {
        r->out = true;
        atomic_fetch_add(&r->e->regions_out, 1);
    }
    /* -FI_ENOMEM: the provider's receive entries are all taken (shm holds
     * unexpected messages in them): like -FI_EAGAIN, again next turn. */
    if (rc == -FI_EAGAIN || rc == -FI_ENOMEM) {
        atomic_store(&r->needs_post, 1);
        xtq__engine_wake(r->e);
        return 0;
    }
    if (rc) {
        XTQ_LOG_ONCE(OFI, ERROR, "posting a receive region failed: %s", fi_strerror(-rc));
        xtq__mutex_lock(&r->e->rx_lock);
        r->e->rx_posted--;
        pthread_mutex_unlock(&r->e->rx_lock);
        return -XTQ_EFABRIC;
    }
    return 0;
}

/* XTQ_ENDPOINT_OWNER=progress: the progress thread posts it. */
static void region_post_soon(struct rx_region *r)
{
    if (r->e->owner_only) {
        atomic_store(&r->needs_post, 1);
        xtq__engine_wake(r->e);
    } else {
        region_post(r);
    }
}

/* Post the spares most recently used while too few regions are posted:
 * their lines are the likeliest still cached. */
static void regions_top_up(struct xtq__engine *e)
{
    for (;;) {
        struct rx_region *r = NULL;
        xtq__mutex_lock(&e->rx_lock);
        if (e->rx_posted < e->rx_posted_min && e->rx_nspare) {
            r = e->rx_spare[--e->rx_nspare];
            e->rx_posted++;
        }
        pthread_mutex_unlock(&e->rx_lock);
        if (!r)
            return;
        region_post_soon(r);
    }
}

void xtq__region_put(struct rx_region *r)
{
    struct xtq__engine *e = r->e;
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&r->refs, 1, memory_order_relaxed);
        if (r->inbox) { /* a mirror slot (inbox.c): its ring slot is free too */
            xtq__inbox_release(r);
            return;
        }
        if (atomic_load(&e->stop))
            return;
        /* Free: posted again at once if too few are, else the top spare. */
        if (!r->out)
            XTQ_LOG_ONCE(ENGINE, ERROR, "bug: receive region %p freed while posted", (void *)r);
        xtq__mutex_lock(&e->rx_lock);
        bool post = e->rx_posted < e->rx_posted_min;
        if (post)
            e->rx_posted++;
        else
            e->rx_spare[e->rx_nspare++] = r;
        pthread_mutex_unlock(&e->rx_lock);
        if (post)
            region_post_soon(r);
    }
}

/*
 * The provider says it is done with a region on the completion of the
 * last message cut from it (FI_RECV | FI_MULTI_RECV), or in a completion
 * of its own; neither means that every message cut from it has landed.
 * ofi_rxm (1.17) cuts a piece for each message when it matches it, and
 * flags the release on the completion of the message that took the last
 * piece, while a segmented or rendezvous message matched earlier may
 * still be arriving (its sender slow, or stopped: the multihost
 * rank_sigstop_8s case had a 59 KB put from the stopped rank overwritten
 * by messages that landed after its region was posted again). It also
 * writes a release of its own when the region is posted while messages
 * wait unmatched, before their pieces are filled. Reposting early lets new
 * messages overwrite what is still arriving. Pieces are cut contiguously
 * from the start until less than min_multi_recv is left, so the region is
 * released for real once the messages that landed cover [0, end) without
 * a gap and less than that is left after `end`.
 */
static bool region_filled(const struct rx_region *r)
{
    return r->landed == r->landed_end && r->len - r->landed_end < r->e->max_wire;
}

void xtq__region_landed(struct rx_region *r, const void *buf, size_t len)
{
    size_t end = (size_t)((const uint8_t *)buf - (const uint8_t *)r->buf) + len;
    r->landed += len;
    if (end > r->landed_end)
        r->landed_end = end;
    if (r->release_pending && region_filled(r)) {
        r->release_pending = false;
        xtq__region_put(r);
    }
}

void xtq__region_released(struct rx_region *r, bool at_once)
{
    struct xtq__engine *e = r->e;
    if (!r->out) {
        r->out = true;
        atomic_fetch_add(&e->regions_out, 1);
        xtq__mutex_lock(&e->rx_lock);
        e->rx_posted--;
        pthread_mutex_unlock(&e->rx_lock);
    }
    if (at_once || region_filled(r)) {
        xtq__region_put(r);
    } else {
        XTQ_LOG_ONCE(OFI, INFO,
                     "a receive region was released before the messages cut from "
                     "it completed; reposting it once they have");
        r->release_pending = true;
        r->pending_since = xtq__now_ns();
    }
    /* Tasks still point into it: a spare takes its place. */
    regions_top_up(e);
}

unsigned xtq__regions_stuck(struct xtq__engine *e, uint64_t now, uint64_t after_ns)
{
    unsigned n = 0;
    uint64_t oldest = now;
    for (unsigned i = 0; i < e->nregions; i++) {
        const struct rx_region *r = &e->regions[i];
        if (r->release_pending && now - r->pending_since > after_ns) {
            n++;
            oldest = r->pending_since < oldest ? r->pending_since : oldest;
        }
    }
    if (n)
        XTQ_LOG_ONCE(ENGINE, WARN,
                     "%u of %u receive regions (XTQ_RX_BUFFERS) have waited %.1f s or more for "
                     "a message cut from them to finish arriving (its sender stalled "
                     "mid-message?); they are posted again once it has",
                     n, e->nregions, (double)(now - oldest) * 1e-9);
    return n;
}

void xtq__regions_repost(struct xtq__engine *e)
{
    for (unsigned i = 0; i < e->nregions; i++)
        if (atomic_load(&e->regions[i].needs_post) && atomic_exchange(&e->regions[i].needs_post, 0))
            region_post(&e->regions[i]);
}

int xtq__regions_open(struct xtq__engine *e)
{
    int rc;

    /* Each holds at least a couple of the largest messages so
     * FI_OPT_MIN_MULTI_RECV never starves it. */
    size_t rlen = xtq__param_size(XTQ__PARAM_XTQ_RX_BUFFER_SIZE);
    if (rlen < 2 * e->max_wire)
        rlen = 2 * e->max_wire;
    rlen = XTQ_ALIGN_UP(rlen, (size_t)4096);
    int64_t nr = xtq__param_int(XTQ__PARAM_XTQ_RX_BUFFERS);
    e->nregions = nr < 2 ? 2 : nr > RX_REGIONS_MAX ? RX_REGIONS_MAX : (unsigned)nr;
    int64_t np = xtq__param_int(XTQ__PARAM_XTQ_RX_BUFFERS_POSTED);
    e->rx_posted_min = np < 1 ? 1 : np > e->nregions ? e->nregions : (unsigned)np;
    const bool huge = xtq__param_bool(XTQ__PARAM_XTQ_RX_HUGEPAGES);
    const size_t huge_page = (size_t)2 << 20;
    e->regions = calloc(e->nregions, sizeof(*e->regions));
    e->rx_spare = calloc(e->nregions, sizeof(*e->rx_spare));
    if (!e->regions || !e->rx_spare)
        return -XTQ_ENOMEM;
    for (unsigned i = 0; i < e->nregions; i++) {
        struct rx_region *r = &e->regions[i];
        r->kind = CTX_REGION;
        r->e = e;
        r->len = rlen;
        if (huge) {
            /* Whole huge pages, advised before the first touch below. */
            r->buf = aligned_alloc(huge_page, XTQ_ALIGN_UP(rlen, huge_page));
            if (r->buf && madvise(r->buf, XTQ_ALIGN_UP(rlen, huge_page), MADV_HUGEPAGE) != 0)
                XTQ_LOG_ONCE(ENGINE, INFO, "no transparent huge pages for the receive regions");
        } else {
            r->buf = aligned_alloc(4096, rlen);
        }
        if (!r->buf)
            return -XTQ_ENOMEM;
        /* Touched now: a spare first posted late in a run would otherwise
         * grow the process by a region then (multihost.soak.60s saw +4 MiB
         * after its warm-up once two regions were kept posted), and its
         * first messages would pay a page fault per page. */
        memset(r->buf, 0, rlen);
        /* Agents read payloads and arguments from here in place: a region
         * a GPU cannot read would fault it at the first task. */
        rc = xtq__agents_mem_register(e->ctx, r->buf, r->len);
        if (rc)
            return rc;
        r->registered = true;
        atomic_store(&r->refs, 1);
        r->out = true; /* a spare until posted */
        atomic_fetch_add(&e->regions_out, 1);
    }
    /* The first ones on top: the order they will be posted in. */
    for (unsigned i = e->nregions; i-- > 0;)
        e->rx_spare[e->rx_nspare++] = &e->regions[i];
    for (unsigned i = 0; i < e->rx_posted_min; i++) {
        struct rx_region *r = e->rx_spare[--e->rx_nspare];
        e->rx_posted++;
        rc = region_post(r);
        if (rc)
            return rc;
    }
    return 0;
}

/* After the endpoint is closed: nothing lands in them any more. */
void xtq__regions_close(struct xtq__engine *e)
{
    for (unsigned i = 0; e->regions && i < e->nregions; i++) {
        struct rx_region *r = &e->regions[i];
        /* At finalize the agents are closed already (and released what
         * they mapped): this deregisters with none. */
        if (r->registered)
            xtq__agents_mem_deregister(e->ctx, r->buf, r->len);
        free(r->buf);
    }
    free(e->regions);
    free(e->rx_spare);
    e->regions = NULL;
    e->rx_spare = NULL;
}

/* ---- tasks ---------------------------------------------------------------- */

static void task_reject(struct xtq__engine *e, struct rx_task *t, int err)
{
    xtq__stats_rejected(e->ctx, err);
    /* An index not registered (yet): the initiator has the code in its
     * completion and may try again, as libxtq_coll's team handshake does
     * when a member has not registered its queue yet; a warning here was
     * noise in every team's start. Counted all the same (msgs_rejected,
     * rejected_by_reason), and logged with XTQ_LOG_LEVEL=info. */
    if (err == -XTQ_ENOKERNEL || err == -XTQ_ENOFUNC || err == -XTQ_ENOQUEUE)
        XTQ_LOG_ONCE(ENGINE, INFO, "rejected a command from rank %u (seq %llu): %s", t->src,
                     (unsigned long long)t->seq, xtq_errname(err));
    else
        XTQ_LOG_ONCE(ENGINE, WARN, "rejected a command from rank %u (seq %llu): %s", t->src,
                     (unsigned long long)t->seq, xtq_errname(err));
    xtq__ack_done(e, t->ack, err);
    xtq__region_put(t->region);
    free(t);
}

static void live_add(struct xtq__engine *e, struct rx_task *t)
{
    xtq__mutex_lock(&e->live_lock);
    t->lprev = NULL;
    t->lnext = e->live;
    if (e->live)
        e->live->lprev = t;
    e->live = t;
    pthread_mutex_unlock(&e->live_lock);
}

static void live_del(struct xtq__engine *e, struct rx_task *t)
{
    xtq__mutex_lock(&e->live_lock);
    if (t->lprev)
        t->lprev->lnext = t->lnext;
    else
        e->live = t->lnext;
    if (t->lnext)
        t->lnext->lprev = t->lprev;
    pthread_mutex_unlock(&e->live_lock);
}

/* Runs on an agent's thread when a task we enqueued has finished. */
static void engine_retire(void *cookie, int status)
{
    struct rx_task *t = cookie;
    struct xtq__engine *e = t->e;
    /* Its kernel, function and signal may be destroyed from now on:
     * before the ack, so that once a remote-completion put is DONE the
     * target's objects are free (a destroy there is not refused). */
    live_del(e, t);
    xtq__registry_task_end(&t->refs);
    /* With remote completion the ack (and a fetching put's result, which
     * the task has finished writing) leaves now. After xtq__engine_stop()
     * (finalize) nothing is sent: acks.c drops it. */
    if (t->wire_flags & XTQ__WIRE_REMOTE_COMPLETION) {
        /* On one host the initiator may be polling our completion word:
         * one store, before the ack's send path (notify.c). */
        if (t->wire_flags & XTQ__WIRE_NOTIFY)
            xtq__notify_post(e, t->src, t->seq, status);
        xtq__ack_done(e, t->ack, status);
    }
    XTQ__STAT_INC(e->ctx, tasks_completed);
    xtq__region_put(t->region);
    free(t);
    atomic_fetch_sub_explicit(&e->tasks_inflight, 1, memory_order_release);
    /* The queue has room again: for any plane's backlog, whichever plane
     * received the task that just left it. */
    xtq_ctx_t *ctx = e->ctx;
    for (unsigned j = 0; j < ctx->nplanes; j++) {
        struct xtq__engine *f = ctx->planes[j];
        if (atomic_load_explicit(&f->backlog_len, memory_order_relaxed))
            xtq__engine_wake(f);
    }
}

/*
 * Rewrite and enqueue one task. Returns 0 (enqueued: `t` now belongs to
 * the agent), -XTQ_EAGAIN (queue full: keep it) or a rejection code.
 */
static int task_enqueue(struct xtq__engine *e, struct rx_task *t)
{
    struct xtq__registry *reg = e->ctx->registry;
    xtq_aql_packet_t pkt = t->packet;
    xtq_queue_t *q = NULL;
    int rc;

    pthread_rwlock_rdlock(&reg->lock);
    rc = xtq__rewrite(reg, &pkt, t->kernarg, t->kernarg_len, t->payload, t->payload_len, &q);
    if (rc)
        goto out;
    /* Capture what the ack needs: the task may retire (and be freed) on
     * another thread as soon as the agent has published it. */
    uint32_t src = t->src, wflags = t->wire_flags;
    uint64_t seq = t->seq;
    struct ack_entry *ack = t->ack;
    struct xtq__enqueue d = {
        .packet = &pkt,
        .kernarg = t->kernarg,
        .kernarg_len = t->kernarg_len,
        .payload = t->payload,
        .payload_len = t->payload_len,
        .result = xtq__ack_result(ack),
        .result_len = ack->block ? ack->result_len : 0,
        .retire = engine_retire,
        .cookie = t,
        .trace_key = XTQ_TRACE_KEY(src, seq),
    };
    /* On one host a GPU may store the initiator's completion word itself,
     * as soon as the task finished: for packets without a completion
     * signal, whose decrement must come first (notify.c). */
    if ((wflags & XTQ__WIRE_NOTIFY) && e->notify_agents &&
        pkt.kernel.completion_signal.handle == 0) {
        d.notify = xtq__notify_own_word(e, src, seq);
        d.notify_tag = (uint32_t)(seq + 1);
    }
    /* A backlogged task is retried every turn while its queue is full:
     * find that out from the indices before taking the live-list lock
     * (twice: add, then remove again). */
    uint64_t w = atomic_load_explicit(q->write_index, memory_order_relaxed);
    uint64_t r = atomic_load_explicit(q->read_index, memory_order_acquire);
    if (r <= w && w - r >= q->size) { /* r > w: w was stale, try */
        rc = -XTQ_EAGAIN;
        goto out;
    }
    /* Counted live, and naming its kernel (or function) and signal, before
     * the agent can retire it; undone if the queue turns out to be full
     * after all (the backlog keeps it). Under the read lock: unregistration
     * waits. */
    xtq__registry_task_begin(reg, &t->packet, &t->refs);
    /* A short task may run in this turn (the agent decides): retired, and
     * t freed, by the time enqueue returns; not one its initiator said
     * runs long (XTQ_PUT_LONG_TASK). */
    d.run_here = (t->refs.flags & XTQ_REGISTER_SHORT) != 0 && !(wflags & XTQ__WIRE_LONG_TASK);
    live_add(e, t);
    atomic_fetch_add_explicit(&e->tasks_inflight, 1, memory_order_relaxed);
    /* Counted before the agent has it: a worker may run it, and whoever
     * waits on its signal read the statistics, before enqueue returns. */
    XTQ__STAT_INC(e->ctx, tasks_enqueued);
    XTQ__STAT_ADD(e->ctx, payload_bytes_received, d.payload_len);
    rc = q->agent->ops->enqueue(q, &d);
    if (rc) {
        atomic_fetch_sub_explicit(&e->ctx->stats.tasks_enqueued, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&e->ctx->stats.payload_bytes_received, d.payload_len,
                                  memory_order_relaxed);
        xtq__registry_task_end(&t->refs);
        live_del(e, t);
        atomic_fetch_sub_explicit(&e->tasks_inflight, 1, memory_order_relaxed);
        goto out;
    }
    pthread_rwlock_unlock(&reg->lock);
    if (!(wflags & XTQ__WIRE_REMOTE_COMPLETION))
        xtq__ack_done(e, ack, 0);
    return 0;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

/* ---- backlog ------------------------------------------------------------- */

static void backlog_push(struct xtq__engine *e, struct rx_task *t)
{
    t->next = NULL;
    if (e->backlog_tail)
        e->backlog_tail->next = t;
    else
        e->backlog_head = t;
    e->backlog_tail = t;
    atomic_fetch_add(&e->backlog_len, 1);
}

/* Retry backlogged tasks in arrival order; stop at the first still full. */
int xtq__backlog_drain(struct xtq__engine *e)
{
    int n = 0;
    while (e->backlog_head) {
        struct rx_task *t = e->backlog_head;
        /* Once enqueued, t may retire and be freed on an agent thread. */
        struct rx_task *next = t->next;
        int rc = task_enqueue(e, t);
        if (rc == -XTQ_EAGAIN)
            break;
        e->backlog_head = next;
        if (!e->backlog_head)
            e->backlog_tail = NULL;
        atomic_fetch_sub(&e->backlog_len, 1);
        if (rc)
            task_reject(e, t, rc);
        n++;
    }
    return n;
}

void xtq__backlog_drop(struct xtq__engine *e)
{
    while (e->backlog_head) {
        struct rx_task *t = e->backlog_head;
        e->backlog_head = t->next;
        free(t);
    }
}

void xtq__live_free(struct xtq__engine *e)
{
    while (e->live) {
        struct rx_task *t = e->live;
        e->live = t->lnext;
        /* Not task_end: the agents that held the kernels are closed. */
        free(t);
    }
}

/* ---- arrival ------------------------------------------------------------- */

/* Record a put for its ack: NULL when it cannot be (answered or dropped
 * here), else its entry, to be acknowledged with *err when that is set. */
static struct ack_entry *put_record(struct xtq__engine *e, const struct xtq__wire_hdr *hdr,
                                    int *err)
{
    struct ack_entry *a = xtq__ack_hold(e, hdr->src_rank, hdr->seq, hdr->result_len,
                                        hdr->flags & XTQ__WIRE_RESEND, err);
    if (a)
        return a;
    if (*err == -XTQ_EALREADY) {
        /* A copy: a resend that crossed its original, or a late original
         * of a put answered MISSING. Runs once, or not at all. */
        XTQ_LOG_ONCE(ENGINE, INFO, "rank %u sent put %llu again, or late; dropped the copy",
                     hdr->src_rank, (unsigned long long)hdr->seq);
        return NULL;
    }
    if (*err == -XTQ_EPROTO)
        XTQ_LOG_ONCE(ENGINE, ERROR,
                     "rank %u has more puts in flight than our window (XTQ_PUT_WINDOW must be "
                     "the same on every rank); refused",
                     hdr->src_rank);
    xtq__stats_rejected(e->ctx, *err);
    xtq__ack_unrecorded(e, (int)hdr->src_rank, hdr->seq, *err);
    return NULL;
}

static void handle_put(struct xtq__engine *e, struct rx_region *r, const struct xtq__wire_hdr *hdr,
                       const void *cmd, const void *payload)
{
    int err;
    XTQ__STAT_INC(e->ctx, msgs_received);
    XTQ_TRACE_POINT(XTQ_TRACE_ENGINE_RECV, XTQ_TRACE_KEY(hdr->src_rank, hdr->seq));
    struct ack_entry *ack = put_record(e, hdr, &err);
    if (!ack)
        return;
    struct rx_task *t = err ? NULL : malloc(sizeof(*t));
    if (!t) {
        XTQ_LOG_ONCE(ENGINE, ERROR, "out of memory for a task or its result; rejecting");
        xtq__stats_rejected(e->ctx, -XTQ_ENOMEM);
        xtq__ack_done(e, ack, -XTQ_ENOMEM);
        return;
    }
    t->e = e;
    t->ack = ack;
    t->region = r;
    t->next = NULL;
    t->src = hdr->src_rank;
    t->wire_flags = hdr->flags;
    t->seq = hdr->seq;
    t->counted_full = false;
    memcpy(&t->packet, cmd, sizeof(t->packet));
    t->kernarg_len = hdr->cmd_len - XTQ_AQL_PACKET_SIZE;
    t->kernarg = t->kernarg_len ? (uint8_t *)cmd + XTQ_AQL_PACKET_SIZE : NULL;
    /* Kernel arguments must be 16-byte aligned for the kernel; messages
     * land 64-byte aligned, so this copy is for odd providers only. */
    if (t->kernarg && ((uintptr_t)t->kernarg & 15)) {
        if (t->kernarg_len > sizeof(t->scratch)) {
            XTQ_LOG_ONCE(ENGINE, ERROR, "misaligned kernel arguments too large to copy");
            atomic_fetch_add(&r->refs, 1);
            task_reject(e, t, -XTQ_EKERNARG);
            return;
        }
        memcpy(t->scratch, t->kernarg, t->kernarg_len);
        t->kernarg = t->scratch;
    }
    t->payload = (void *)payload;
    t->payload_len = hdr->payload_len;
    atomic_fetch_add(&r->refs, 1);

    /* queue_full_events counts every command that had to wait for queue
     * space, whether it found the queue full or a backlog ahead of it. */
    if (e->backlog_head) {
        XTQ__STAT_INC(e->ctx, queue_full_events);
        t->counted_full = true;
        backlog_push(e, t);
        return;
    }
    int rc = task_enqueue(e, t);
    if (rc == -XTQ_EAGAIN) {
        XTQ__STAT_INC(e->ctx, queue_full_events);
        t->counted_full = true;
        backlog_push(e, t);
    } else if (rc) {
        task_reject(e, t, rc);
    }
}

/* `inbox`: the rank whose inbox ring it came from (inbox.c), or -1: the
 * transport, from endpoint `src`. */
static void target_recv(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                        fi_addr_t src, int64_t inbox, const void *inplace)
{
    const struct xtq__wire_hdr *hdr = NULL;
    const void *cmd = NULL, *payload = NULL;
    xtq_ctx_t *ctx = e->ctx;
    int rc = xtq__wire_validate(buf, len, ctx->job_key, (uint32_t)ctx->size, e->max_msg, &hdr, &cmd,
                                &payload);
    /* Validated on the copy; the payload (or an ack's result) is read in
     * place, at its offset in the ring slot (inbox.c). */
    if (rc == 0 && inplace && payload)
        payload = (const uint8_t *)inplace + ((const uint8_t *)payload - (const uint8_t *)buf);
    if (rc) {
        const struct xtq__wire_hdr *raw = buf;
        xtq__stats_rejected(ctx, rc);
        XTQ_LOG_ONCE(ENGINE, WARN, "dropped an invalid message of %zu bytes: %s", len,
                     xtq_errname(rc));
        /* Answer only a peer of this job that we can name; recorded like
         * any put where its entry is free, so that the answer is not lost. */
        if (len >= sizeof(*raw) && raw->magic == XTQ_WIRE_MAGIC && raw->type == XTQ__MSG_PUT &&
            raw->job_key == ctx->job_key && raw->src_rank < (uint32_t)ctx->size &&
            (inbox >= 0 ? raw->src_rank == (uint32_t)inbox
                        : xtq__ofi_source_is(&e->ofi, (int)raw->src_rank, src))) {
            int err;
            struct ack_entry *a = xtq__ack_hold(e, raw->src_rank, raw->seq, 0, false, &err);
            if (a)
                xtq__ack_done(e, a, rc);
            else if (err != -XTQ_EALREADY) /* a stale header: nothing to answer */
                xtq__ack_unrecorded(e, (int)raw->src_rank, raw->seq, rc);
        }
        return;
    }
    /* The rank a message claims must be the endpoint it came from: else a
     * process of this job could run tasks, or complete puts, in another
     * rank's name. Nobody is answered (the claimed rank sent nothing). */
    if (inbox >= 0 ? hdr->src_rank != (uint32_t)inbox
                   : !xtq__ofi_source_is(&e->ofi, (int)hdr->src_rank, src)) {
        xtq__stats_rejected(ctx, -XTQ_ESRCRANK);
        XTQ_LOG_ONCE(ENGINE, WARN, "dropped a message claiming rank %u from another endpoint",
                     hdr->src_rank);
        return;
    }
    if (xtq__fault_dropped(hdr->src_rank))
        return; /* a test's link outage */
    /* Test hook: a put lost in the transport (a connection replaced). */
    if (hdr->type == XTQ__MSG_PUT &&
        unlikely(atomic_load_explicit(&xtq__faults.put_lost, memory_order_relaxed)) &&
        xtq__fault_take(&xtq__faults.put_lost))
        return;
    /* What its inbox ring holds was written before this left it: first. */
    if (inbox < 0 && e->inbox_own)
        xtq__inbox_take_from(e, hdr->src_rank);
    xtq__peer_msg(e, hdr);
    if (xtq__probe_recv(e, hdr))
        ; /* liveness only */
    else if (hdr->type == XTQ__MSG_ACK)
        xtq__initiator_ack(e, hdr, payload);
    else if (hdr->type == XTQ__MSG_ASK) /* sent untagged: answered all the same */
        xtq__ack_reask(e, hdr->src_rank, hdr->seq, hdr->flags & XTQ__WIRE_ASK_AGAIN);
    else
        handle_put(e, r, hdr, cmd, payload);
}

void xtq__target_recv(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                      fi_addr_t src)
{
    target_recv(e, r, buf, len, src, -1, NULL);
}

void xtq__target_recv_inbox(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                            uint32_t src, const void *inplace)
{
    target_recv(e, r, buf, len, FI_ADDR_NOTAVAIL, (int64_t)src, inplace);
}
