/*
 * The initiator: XtqPut (Fig. 4 starts here, on the sending rank).
 *
 * A window of XTQ_PUT_WINDOW slots per target, indexed by sequence number;
 * a slot is free again when both its send completion (progress.c reads it
 * from the CQ, or at once for an injected put) and its acknowledgement
 * (acks.c on the target, xtq__initiator_ack here) have arrived. Acks name a
 * sequence number, which is checked against the window: no peer-supplied
 * pointer is ever trusted. The window is the flow control: a full one makes
 * xtq_put wait, or return -XTQ_EAGAIN. Completion words tell the caller;
 * liveness.c and lifecycle.c fail what can no longer complete.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <sched.h>

static const uint8_t zero_pad[64];

/*
 * Completion words: the engine sets state bits; a thread that sleeps on
 * the word first sets XTQ__COMPLETION_SLEEPER, and only then is a wake-up
 * (a system call) worth making. Either the
 * setter sees the sleeper bit, or the sleeper sees the new bits and does
 * not sleep: both are read-modify-writes of the one word.
 */
static void comp_post(_Atomic uint32_t *st, uint32_t bits)
{
    if (atomic_fetch_or_explicit(st, bits, memory_order_acq_rel) & XTQ__COMPLETION_SLEEPER)
        xtq__futex_wake(st, -1);
}

/* A completion word has one of the bits of `want`. */
struct comp_wait {
    struct xtq__engine *e;
    _Atomic uint32_t *st;
    uint32_t want;
};

static bool comp_ready(void *arg)
{
    struct comp_wait *c = arg;
    return atomic_load_explicit(c->st, memory_order_acquire) & c->want;
}

/* The same, polled while progressing the engine ourselves. */
static bool comp_ready_progress(void *arg)
{
    struct comp_wait *c = arg;
    if (comp_ready(c))
        return true;
    xtq__engine_progress(c->e);
    return comp_ready(c);
}

/* Sleep until a bit of `want` is set on the word (the completion side sets
 * bits with comp_post), or the deadline; naps of at most nap_ns. */
static int comp_sleep(struct comp_wait *c, int64_t nap_ns, uint64_t deadline)
{
    struct xtq__spin_wait w = {
        .ready = comp_ready,
        .arg = c,
        .word = c->st,
        .sleeper_bit = XTQ__COMPLETION_SLEEPER,
        .nap_ns = nap_ns,
    };
    return xtq__spin_wait(&w, deadline);
}

struct window_moved {
    struct xtq__engine *e;
    uint32_t seen;
};

static bool window_moved(void *arg)
{
    struct window_moved *m = arg;
    return atomic_load_explicit(&m->e->slot_freed, memory_order_acquire) != m->seen;
}

/* Sleep until the window moves past `seen` (a slot freed), or the timeout;
 * the caller re-checks under put_lock. */
static void window_sleep(struct xtq__engine *e, uint32_t seen, int64_t timeout_ns)
{
    struct window_moved m = {e, seen};
    struct xtq__spin_wait w = {
        .ready = window_moved,
        .arg = &m,
        .word = &e->slot_freed,
        .waiters = &e->window_sleepers,
        .nap_ns = XTQ_TIMEOUT_INFINITE,
    };
    (void)xtq__spin_wait(&w, xtq__deadline_ns((uint64_t)timeout_ns));
}

/* Report a slot's outcome and free it. Caller holds put_lock. */
static void slot_finish(struct xtq__engine *e, struct put_slot *s)
{
    xtq_ctx_t *ctx = e->ctx;
    xtq_completion_t *c = s->comp;
    XTQ_TRACE_POINT(XTQ_TRACE_COMPLETION, XTQ_TRACE_KEY(ctx->rank, s->seq));
    if (s->status)
        XTQ__STAT_INC(ctx, puts_failed);
    XTQ__STAT_INC(ctx, puts_completed);
    if (c) {
        _Atomic uint32_t *st = (_Atomic uint32_t *)&c->state;
        uint32_t bits = XTQ_COMPLETION_DONE | XTQ_COMPLETION_LOCAL;
        if (s->status == 0 && (s->flags & XTQ_PUT_REMOTE_COMPLETION))
            bits |= XTQ_COMPLETION_REMOTE;
        c->status = s->status;
        c->prov_errno = s->prov_errno;
        comp_post(st, bits);
    } else if (s->status) {
        XTQ_LOG_ONCE(ENGINE, WARN, "a put without completion object to rank %d failed: %s",
                     s->target, xtq_errname(s->status));
    }
    s->comp = NULL;
    s->state &= SLOT_TXQ; /* still queued: the progress thread lets it go */
    e->peers[s->target].busy--;
    atomic_fetch_sub(&e->puts_outstanding, 1);
    atomic_fetch_add_explicit(&e->slot_freed, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&e->window_sleepers, memory_order_seq_cst))
        xtq__futex_wake(&e->slot_freed, -1);
}

void xtq__slot_local(struct xtq__engine *e, struct put_slot *s, int status, int prov_errno)
{
    xtq__mutex_lock(&e->put_lock);
    if (!(s->state & SLOT_BUSY) || (s->state & SLOT_LOCAL)) {
        pthread_mutex_unlock(&e->put_lock);
        return;
    }
    s->state |= SLOT_LOCAL;
    if (status) {
        /* The message did not leave: no ack will come. */
        if (!s->status) {
            s->status = status;
            s->prov_errno = prov_errno;
        }
        s->state |= SLOT_ACKED;
    }
    if (s->comp) {
        comp_post((_Atomic uint32_t *)&s->comp->state, XTQ_COMPLETION_LOCAL);
        if (s->detach_at_local)
            s->comp = NULL;
    }
    if (s->state & SLOT_ACKED)
        slot_finish(e, s);
    pthread_mutex_unlock(&e->put_lock);
}

void xtq__initiator_ack(struct xtq__engine *e, const struct xtq__wire_hdr *hdr)
{
    uint32_t src = hdr->src_rank;
    struct put_slot *s = &e->peers[src].slots[hdr->seq % e->window];
    xtq__mutex_lock(&e->put_lock);
    if (!(s->state & SLOT_BUSY) || s->seq != hdr->seq || (s->state & SLOT_ACKED) ||
        s->target != (int)src) {
        pthread_mutex_unlock(&e->put_lock);
        XTQ_LOG_ONCE(ENGINE, WARN, "ack from rank %u names seq %llu, not in flight; dropped", src,
                     (unsigned long long)hdr->seq);
        return;
    }
    s->state |= SLOT_ACKED;
    if (hdr->status && !s->status)
        s->status = hdr->status;
    if (s->state & SLOT_LOCAL)
        slot_finish(e, s);
    pthread_mutex_unlock(&e->put_lock);
}

void xtq__puts_fail_peer(struct xtq__engine *e, int r, int status)
{
    xtq__mutex_lock(&e->put_lock);
    for (uint32_t i = 0; i < e->window; i++) {
        struct put_slot *s = &e->peers[r].slots[i];
        if (s->state & SLOT_BUSY) {
            s->status = status;
            slot_finish(e, s);
        }
    }
    pthread_mutex_unlock(&e->put_lock);
}

void xtq__puts_fail_all(struct xtq__engine *e, int status)
{
    xtq__mutex_lock(&e->put_lock);
    for (int r = 0; r < e->ctx->size; r++)
        for (uint32_t i = 0; i < e->window; i++) {
            struct put_slot *s = &e->peers[r].slots[i];
            if (s->state & SLOT_BUSY) {
                if (!s->status)
                    s->status = status;
                slot_finish(e, s);
            }
        }
    pthread_mutex_unlock(&e->put_lock);
}

/* ---- sending ----------------------------------------------------------- */

/* One try at sending the put of slot `s`, as recorded in it: 0 (sent;
 * injected puts are local at once), -FI_EAGAIN (no room: try again), or
 * another error, which completes the slot with -XTQ_EFABRIC. */
static ssize_t slot_send(struct xtq__engine *e, struct put_slot *s)
{
    ssize_t rc = s->eager ? xtq__ofi_inject(&e->ofi, s->stage, s->total, s->target)
                          : xtq__ofi_sendv(&e->ofi, s->iov, s->niov, s->target, s);
    if (rc == 0) {
        xtq__bell_ring(e, s->target);
        /* An injected message has no send completion: local now. */
        if (s->eager)
            xtq__slot_local(e, s, 0, 0);
    } else if (rc != -FI_EAGAIN) {
        XTQ_LOG_ONCE(OFI, ERROR, "fi_sendv to rank %d: %s", s->target, fi_strerror((int)-rc));
        xtq__slot_local(e, s, -XTQ_EFABRIC, (int)-rc);
    }
    return rc;
}

static void mpsc_push(struct mpsc *q, struct mpsc_node *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    struct mpsc_node *prev = atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* NULL when empty, or when a producer is between its two steps (it is
 * seen next time). One consumer at a time (the progress turn). */
static struct mpsc_node *mpsc_pop(struct mpsc *q)
{
    struct mpsc_node *tail = q->tail;
    struct mpsc_node *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next)
            return NULL;
        q->tail = tail = next;
        next = atomic_load_explicit(&tail->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
        return NULL;
    mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

/* The slot left the send queue: it may be reused once complete. */
static void slot_dequeued(struct xtq__engine *e, struct put_slot *s)
{
    xtq__mutex_lock(&e->put_lock);
    s->state &= ~(uint32_t)SLOT_TXQ;
    bool free_now = !(s->state & SLOT_BUSY);
    pthread_mutex_unlock(&e->put_lock);
    if (free_now) { /* completed while queued (peer down): a window slot freed */
        atomic_fetch_add_explicit(&e->slot_freed, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&e->window_sleepers, memory_order_seq_cst))
            xtq__futex_wake(&e->slot_freed, -1);
    }
}

int xtq__txq_flush(struct xtq__engine *e)
{
    int n = 0;
    for (;;) {
        struct put_slot *s = e->tx_retry;
        if (s) {
            e->tx_retry = NULL;
        } else {
            struct mpsc_node *node = mpsc_pop(&e->txq);
            if (!node)
                break;
            s = container_of(node, struct put_slot, txq);
        }
        /* Its peer went down while it was queued (the put was failed
         * with -XTQ_EHOSTDOWN): nothing to send. */
        if (atomic_load(&e->peers[s->target].down)) {
            slot_dequeued(e, s);
            continue;
        }
        if (slot_send(e, s) == -FI_EAGAIN) {
            e->tx_retry = s; /* the transport is full: first next turn */
            break;
        }
        XTQ_TRACE_POINT(XTQ_TRACE_MSG_SENT, XTQ_TRACE_KEY(e->ctx->rank, s->seq));
        slot_dequeued(e, s);
        n++;
    }
    return n;
}

void xtq__txq_drop(struct xtq__engine *e)
{
    struct mpsc_node *node;
    e->tx_retry = NULL;
    while ((node = mpsc_pop(&e->txq)) != NULL)
        ; /* their puts were failed by xtq__puts_fail_all */
}

/* ---- puts -------------------------------------------------------------- */

static int slot_stage(struct put_slot *s, size_t need)
{
    if (s->stage_cap >= need)
        return 0;
    size_t cap = XTQ_ALIGN_UP(need, (size_t)256);
    uint8_t *p = aligned_alloc(64, cap);
    if (!p)
        return -XTQ_ENOMEM;
    free(s->stage);
    s->stage = p;
    s->stage_cap = cap;
    return 0;
}

/* Wait for the window to move (slot freed) or for progress. */
static void window_wait(struct xtq__engine *e, uint32_t seen)
{
    /* Progress ourselves too: the thread may not be running yet, or may
     * share a core with us. */
    if (xtq__engine_progress(e) > 0 || e->manual)
        return;
    xtq__engine_wake(e);
    window_sleep(e, seen, 1000000);
}

int xtq__engine_put(struct xtq__engine *e, int target, const void *cmd, size_t cmd_len,
                    const void *payload, size_t payload_len, uint32_t flags, xtq_completion_t *comp)
{
    xtq_ctx_t *ctx = e->ctx;
    xtq_completion_t local_comp;
    struct put_slot *s;
    struct iovec iov[5];
    size_t niov = 0;
    int rc;

    if (!cmd || cmd_len < XTQ_AQL_PACKET_SIZE || (payload_len && !payload))
        return -XTQ_EINVAL;
    if (!comp && (flags & XTQ_PUT_REMOTE_COMPLETION))
        return -XTQ_EINVAL;
    if (flags & ~(uint32_t)(XTQ_PUT_REMOTE_COMPLETION | XTQ_PUT_NONBLOCKING))
        return -XTQ_EINVAL;
    if (target < 0 || target >= ctx->size)
        return -XTQ_ESRCRANK;
    if (cmd_len > UINT32_MAX || cmd_len + payload_len > e->max_msg)
        return -XTQ_EMSGSIZE;
    if (atomic_load(&e->stop))
        return -XTQ_EFINALIZED;

    struct peer *p = &e->peers[target];
    xtq__mutex_lock(&e->put_lock);
    for (;;) {
        if (atomic_load(&p->down)) {
            pthread_mutex_unlock(&e->put_lock);
            return -XTQ_EHOSTDOWN;
        }
        s = &p->slots[p->next_seq % e->window];
        if (!(s->state & (SLOT_BUSY | SLOT_TXQ)))
            break;
        uint32_t seen = atomic_load_explicit(&e->slot_freed, memory_order_acquire);
        pthread_mutex_unlock(&e->put_lock);
        if (flags & XTQ_PUT_NONBLOCKING) {
            xtq__engine_progress(e);
            return -XTQ_EAGAIN;
        }
        window_wait(e, seen);
        xtq__mutex_lock(&e->put_lock);
    }
    size_t hdr_len = sizeof(struct xtq__wire_hdr);
    size_t pad1 = xtq__wire_payload_offset((uint32_t)cmd_len) - hdr_len - cmd_len;
    size_t total = xtq__wire_put_len((uint32_t)cmd_len, payload_len);
    size_t pad2 = total - xtq__wire_payload_offset((uint32_t)cmd_len) - payload_len;
    /* Gather [hdr][cmd][pad][payload][pad] straight from the caller's
     * buffers; where the provider takes fewer iovs (tcp and shm take 4),
     * the command (a packet and its arguments) joins the header in the
     * slot's stage. Larger payloads are never copied. */
    size_t want_iov = 2 + (pad1 ? 1 : 0) + (payload_len ? 1 : 0) + (pad2 ? 1 : 0);
    /* Small puts (up to the provider's inject size) are copied whole into
     * the stage and injected: one copy of a few hundred bytes costs less
     * than a gathered send and its completion (the eager protocol). */
    bool eager = total <= e->ofi.inject_size;
    bool gather_cmd = eager || want_iov > e->ofi.iov_limit;
    rc = slot_stage(s, eager ? total : gather_cmd ? hdr_len + cmd_len + pad1 : hdr_len);
    if (rc) {
        pthread_mutex_unlock(&e->put_lock);
        return rc;
    }
    uint64_t seq = p->next_seq++;
    struct xtq__wire_hdr *hdr = (struct xtq__wire_hdr *)s->stage;
    xtq__wire_hdr_init(hdr, XTQ__MSG_PUT, ctx->job_key, (uint32_t)ctx->rank, seq);
    hdr->flags = (flags & XTQ_PUT_REMOTE_COMPLETION) ? XTQ__WIRE_REMOTE_COMPLETION : 0;
    hdr->cmd_len = (uint32_t)cmd_len;
    hdr->payload_len = payload_len;
    if (gather_cmd) {
        memcpy(s->stage + hdr_len, cmd, cmd_len);
        memset(s->stage + hdr_len + cmd_len, 0, pad1);
        iov[niov++] = (struct iovec){s->stage, hdr_len + cmd_len + pad1};
    } else {
        iov[niov++] = (struct iovec){s->stage, hdr_len};
        iov[niov++] = (struct iovec){(void *)cmd, cmd_len};
        if (pad1)
            iov[niov++] = (struct iovec){(void *)zero_pad, pad1};
    }
    if (eager) {
        uint8_t *at = s->stage + hdr_len + cmd_len + pad1;
        if (payload_len)
            memcpy(at, payload, payload_len);
        memset(at + payload_len, 0, pad2);
        iov[0].iov_len = total;
    } else {
        if (payload_len)
            iov[niov++] = (struct iovec){(void *)payload, payload_len};
        if (pad2)
            iov[niov++] = (struct iovec){(void *)zero_pad, pad2};
    }

    if (!comp) {
        memset(&local_comp, 0, sizeof(local_comp));
        comp = &local_comp;
        s->detach_at_local = true;
    } else {
        s->detach_at_local = false;
    }
    comp->state = 0;
    comp->status = 0;
    comp->prov_errno = 0;
    comp->target = target;
    comp->seq = seq;
    XTQ_TRACE_POINT(XTQ_TRACE_PUT_ISSUED, XTQ_TRACE_KEY(ctx->rank, seq));
    memcpy(s->iov, iov, niov * sizeof(iov[0]));
    s->niov = (uint8_t)niov;
    s->eager = eager;
    s->total = total;
    s->kind = CTX_PUT;
    s->state = e->owner_only ? SLOT_BUSY | SLOT_TXQ : SLOT_BUSY;
    s->target = target;
    s->flags = flags;
    s->seq = seq;
    s->status = 0;
    s->prov_errno = 0;
    s->comp = comp;
    if (p->busy++ == 0)
        atomic_store_explicit(&p->last_heard, xtq__now_ns(), memory_order_relaxed);
    atomic_fetch_add(&e->puts_outstanding, 1);
    XTQ__STAT_INC(ctx, puts_issued);
    pthread_mutex_unlock(&e->put_lock);

    if (e->owner_only) {
        /* The progress thread sends it (txq_flush); it is awake or woken. */
        mpsc_push(&e->txq, &s->txq);
        xtq__engine_wake(e);
    } else {
        /* The slot is ours until its completions arrive; send outside the
         * window lock so acks and completions keep flowing. */
        while (slot_send(e, s) == -FI_EAGAIN) {
            /* The target died while we waited for room: xtq__peer_down()
             * has completed the slot with -XTQ_EHOSTDOWN. */
            if (atomic_load(&p->down))
                break;
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        }
        XTQ_TRACE_POINT(XTQ_TRACE_MSG_SENT, XTQ_TRACE_KEY(ctx->rank, seq));
        /* A gathered send completes in the CQ, which the progress thread
         * must read. An injected put is local already, and its ack rings
         * this rank's doorbell: a wake-up here would only cost a system
         * call on every small put while the thread sleeps. */
        if (!eager || !e->bells)
            xtq__engine_wake(e);
    }

    if (comp == &local_comp) {
        /* No completion object: return once the buffers are free. */
        struct comp_wait c = {e, (_Atomic uint32_t *)&local_comp.state, XTQ_COMPLETION_LOCAL};
        if (e->manual) {
            while (!comp_ready(&c))
                xtq__engine_progress(e);
        } else {
            /* Naps of 1 ms: the transport may finish the send without
             * anything that wakes us (progress.c reads its completion). */
            (void)comp_sleep(&c, 1000000, UINT64_MAX);
        }
        return local_comp.status;
    }
    return 0;
}

/*
 * A lone waiter (XTQ_LONE_WAITER): a thread that would sleep on its
 * completion word, the progress thread waking it when the ack comes,
 * takes the progress turns and sleeps on the transport itself instead, so
 * the ack wakes it directly (one hand-off less on every round trip whose
 * waiter sleeps). The progress thread parks meanwhile (progress.c); every
 * turn is a whole one, so this rank's target side and other threads'
 * completions keep moving. Called with the claim held; releases it.
 */
static int lone_wait(struct xtq__engine *e, struct comp_wait *c, uint64_t deadline)
{
    int rc;

    /* A turn of the progress thread in flight ends before ours begin;
     * later ones see the claim under this lock and leave. */
    pthread_mutex_lock(&e->progress_lock);
    pthread_mutex_unlock(&e->progress_lock);
    for (;;) {
        if (comp_ready(c)) {
            rc = 0;
            break;
        }
        if (xtq__now_ns() >= deadline) {
            rc = -XTQ_ETIMEDOUT;
            break;
        }
        if (xtq__engine_progress(e) > 0)
            continue;
        if (comp_ready(c)) {
            rc = 0;
            break;
        }
        /* The CQ's fd or this rank's doorbell (an ack rings it), a kick,
         * or a short nap while puts are in flight. */
        xtq__progress_block(e);
    }
    atomic_store_explicit(&e->lone_waiter, 0, memory_order_seq_cst);
    if (atomic_load_explicit(&e->parked, memory_order_seq_cst))
        xtq__futex_wake(&e->lone_waiter, -1);
    return rc;
}

int xtq__engine_wait(struct xtq__engine *e, xtq_completion_t *comp, int64_t timeout_ns)
{
    struct comp_wait c = {e, (_Atomic uint32_t *)&comp->state, XTQ_COMPLETION_DONE};
    uint64_t deadline = xtq__deadline_ns(xtq__timeout_ns(timeout_ns));

    if (e->manual) {
        /* Nobody else progresses: we do, until done or the deadline. */
        for (;;) {
            if (comp_ready(&c))
                return comp->status;
            if (xtq__now_ns() >= deadline)
                return -XTQ_ETIMEDOUT;
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        }
    }
    /* Poll first, progressing the engine ourselves (if the progress thread
     * is not): an ack that comes within the spin is seen without two
     * thread wake-ups (engine thread, then us). Then sleep, leaving the
     * engine to its thread; naps of at most 100 ms. */
    if (e->wait_spin_ns) {
        uint64_t now = xtq__now_ns();
        uint64_t spin = deadline > now ? deadline - now : 0;
        if (spin > e->wait_spin_ns)
            spin = e->wait_spin_ns;
        if (xtq__spin_until(comp_ready_progress, &c, spin))
            return comp->status;
    }
    /* Not within the spin (none on a small host): sleep on the transport
     * as a lone waiter, or on the completion word. */
    uint32_t free_claim = 0;
    if (e->lone_waiter_on && e->thread_started && !comp_ready(&c) &&
        atomic_compare_exchange_strong(&e->lone_waiter, &free_claim, 1)) {
        int rc = lone_wait(e, &c, deadline);
        return rc < 0 ? rc : comp->status;
    }
    int rc = comp_sleep(&c, 100000000, deadline);
    return rc < 0 ? rc : comp->status;
}

int xtq__engine_drain_puts(struct xtq__engine *e, uint64_t deadline)
{
    while (atomic_load(&e->puts_outstanding)) {
        if (xtq__now_ns() >= deadline)
            return -XTQ_ETIMEDOUT;
        uint32_t seen = atomic_load(&e->slot_freed);
        if (!atomic_load(&e->puts_outstanding))
            break;
        if (e->manual || !e->thread_started) {
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        } else {
            window_sleep(e, seen, 1000000);
        }
    }
    return 0;
}
