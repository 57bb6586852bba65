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

/* A slot whose stage grew past this gives it back when its put is DONE: a
 * put copied whole (more pieces than the provider gathers) must not pin a
 * megabyte per slot. */
#define STAGE_KEEP 16384
/* Puts up to this size (wire bytes) that the provider does not inject
 * (tcp injects 64 bytes) are copied whole into the stage: a copy of a few
 * KiB costs little next to the send, and a put staged whole can be sent
 * again if the transport loses it (a connection reset; slot_missing). */
#define STAGE_COPY_MAX 4096
/* Longest wait between evaluations of armed triggers: signals a device
 * changes are polled (nothing on the host sees the change), host-side
 * changes kick the engine and this is a safety net. */
#define TRIG_POLL_DEVICE_NS 50000
#define TRIG_POLL_HOST_NS   1000000

enum { TRIG_NONE, TRIG_ARMED, TRIG_READY };

/* now + timeout, saturating; XTQ_TIMEOUT_INFINITE (or any overflow) is
 * no deadline. */
static uint64_t deadline_after(int64_t timeout_ns)
{
    uint64_t now = xtq__now_ns();
    if (timeout_ns == XTQ_TIMEOUT_INFINITE || (uint64_t)timeout_ns > UINT64_MAX - now)
        return UINT64_MAX;
    return now + (uint64_t)timeout_ns;
}

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
    xtq_completion_t *comp; /* whose put may finish through a completion word */
};

static bool notify_try(struct xtq__engine *e, xtq_completion_t *comp);
static void peer_floor(struct xtq__engine *e, struct peer *p);

static bool comp_ready(void *arg)
{
    struct comp_wait *c = arg;
    uint32_t st = atomic_load_explicit(c->st, memory_order_acquire);
    if (st & c->want)
        return true;
    /* On one host: the target's word may say DONE before its ack does. */
    if ((st & XTQ__COMPLETION_NOTIFY) && c->comp && notify_try(c->e, c->comp))
        return atomic_load_explicit(c->st, memory_order_acquire) & c->want;
    return false;
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

/* ---- slots ------------------------------------------------------------- */

/* Caller holds put_lock: a trigger off the list it is on. */
static void trig_unlink(struct xtq__engine *e, struct put_trigger *t)
{
    struct put_trigger **head, **tail;
    if (t->list == TRIG_NONE)
        return;
    head = t->list == TRIG_ARMED ? &e->trig_armed : &e->trig_ready;
    tail = t->list == TRIG_ARMED ? &e->trig_armed_tail : &e->trig_ready_tail;
    if (t->prev)
        t->prev->next = t->next;
    else
        *head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        *tail = t->prev;
    if (t->list == TRIG_ARMED && (t->sig->flags & XTQ__SIGNAL_DEVICE))
        e->trig_device--;
    t->list = TRIG_NONE;
    t->prev = t->next = NULL;
}

/* Caller holds put_lock: a trigger onto the tail of a list. */
static void trig_append(struct xtq__engine *e, struct put_trigger *t, uint8_t list)
{
    struct put_trigger **head = list == TRIG_ARMED ? &e->trig_armed : &e->trig_ready;
    struct put_trigger **tail = list == TRIG_ARMED ? &e->trig_armed_tail : &e->trig_ready_tail;
    t->list = list;
    t->next = NULL;
    t->prev = *tail;
    if (*tail)
        (*tail)->next = t;
    else
        *head = t;
    *tail = t;
    if (list == TRIG_ARMED && (t->sig->flags & XTQ__SIGNAL_DEVICE))
        e->trig_device++;
}

/* The slot may be taken again (caller holds put_lock): its trigger goes,
 * a large stage goes, and threads waiting for the window hear of it. */
static void slot_release(struct xtq__engine *e, struct put_slot *s)
{
    /* Handled by its target (acked) or given up: inbox puts may follow. */
    if (s->fi_counted) {
        s->fi_counted = false;
        atomic_fetch_sub_explicit(&e->peers[s->target].fi_unacked, 1, memory_order_release);
    }
    free(s->trig);
    s->trig = NULL;
    if (s->stage_cap > STAGE_KEEP) {
        free(s->stage);
        s->stage = NULL;
        s->stage_cap = 0;
    }
    atomic_fetch_add_explicit(&e->slot_freed, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&e->window_sleepers, memory_order_seq_cst))
        xtq__futex_wake(&e->slot_freed, -1);
}

/* A triggered put is DONE: fired or not, its trigger is no longer
 * watched, and its signal may be destroyed (once; the slot frees the
 * trigger itself). Caller holds put_lock. */
static void slot_untrigger(struct xtq__engine *e, struct put_slot *s)
{
    struct put_trigger *t = s->trig;
    if (!t || !t->sig)
        return;
    trig_unlink(e, t);
    atomic_fetch_sub(&e->trig_count, 1);
    atomic_fetch_sub_explicit(&t->sig->watchers, 1, memory_order_relaxed);
    xtq__refs_put(&t->sig->refs);
    t->sig = NULL;
}

/* Report a slot's outcome: the put is DONE. Caller holds put_lock. The
 * slot is free at once unless a thread is still handing it to the
 * transport (SLOT_SENDING: that thread frees it). A put failed while the
 * transport still holds its message (peer down) is DONE now but LOCAL only
 * when the transport lets go (slot_let_go): its buffers may still be read,
 * and the slot stays SLOT_HELD until then. */
static void slot_finish(struct xtq__engine *e, struct put_slot *s)
{
    xtq_ctx_t *ctx = e->ctx;
    xtq_completion_t *c = s->comp;
    bool held = !(s->state & SLOT_LOCAL);
    /* A put its waiter completed from the target's word was traced and
     * counted then. */
    if (!(s->state & SLOT_DIRECT)) {
        XTQ_TRACE_POINT(XTQ_TRACE_COMPLETION, XTQ_TRACE_KEY(ctx->rank, s->seq));
        if (s->status)
            XTQ__STAT_INC(ctx, puts_failed);
        XTQ__STAT_INC(ctx, puts_completed);
    }
    slot_untrigger(e, s);
    if (c) {
        _Atomic uint32_t *st = (_Atomic uint32_t *)&c->state;
        uint32_t bits = XTQ_COMPLETION_DONE | (held ? 0 : XTQ_COMPLETION_LOCAL);
        if (s->status == 0 && (s->flags & XTQ_PUT_REMOTE_COMPLETION))
            bits |= XTQ_COMPLETION_REMOTE;
        c->status = s->status;
        c->prov_errno = s->prov_errno;
        comp_post(st, bits);
    } else if (s->status && !s->counter && !(s->state & SLOT_DIRECT)) {
        XTQ_LOG_ONCE(ENGINE, WARN, "a put without completion object to rank %d failed: %s",
                     s->target, xtq_errname(s->status));
    }
    /* After the completion object is final: a waiter on the counter may
     * look at it as soon as it sees the count. */
    if (s->counter)
        xtq__counter_complete(s->counter, s->status);
    s->counter = NULL;
    s->comp = held ? c : NULL;
    s->state &= SLOT_SENDING;
    if (held)
        s->state |= SLOT_HELD;
    struct peer *p = &e->peers[s->target];
    p->busy--;
    peer_floor(e, p);
    atomic_fetch_sub(&e->puts_outstanding, 1);
    if (!s->state)
        slot_release(e, s);
}

/* A failed put's message left the transport's hands (or never entered
 * them): LOCAL at last. Caller holds put_lock, and releases the slot once
 * nothing else holds it. */
static void slot_let_go(struct put_slot *s)
{
    if (!(s->state & SLOT_HELD))
        return;
    if (s->comp)
        comp_post((_Atomic uint32_t *)&s->comp->state, XTQ_COMPLETION_LOCAL);
    s->comp = NULL;
    s->state &= ~(uint32_t)SLOT_HELD;
}

/* The message left (status 0) or could not (caller holds put_lock). */
static void slot_local_locked(struct xtq__engine *e, struct put_slot *s, int status, int prov_errno)
{
    if (!(s->state & SLOT_BUSY)) {
        slot_let_go(s);
        if (!s->state)
            slot_release(e, s);
        return;
    }
    if (s->state & SLOT_LOCAL)
        return;
    s->state |= SLOT_LOCAL;
    s->local_at = xtq__now_ns();
    if (status) {
        /* The message did not leave: no ack will come. */
        if (!s->status) {
            s->status = status;
            s->prov_errno = prov_errno;
        }
        s->state |= SLOT_ACKED;
    }
    if (s->comp) {
        /* The caller that passed no completion returns at LOCAL with what
         * its stack copy says: the transport's error must be in it then
         * (issue 10, bug 1). */
        if (s->detach_at_local) {
            s->comp->status = s->status;
            s->comp->prov_errno = s->prov_errno;
        }
        comp_post((_Atomic uint32_t *)&s->comp->state, XTQ_COMPLETION_LOCAL);
        if (s->detach_at_local)
            s->comp = NULL;
    }
    if (s->state & SLOT_ACKED)
        slot_finish(e, s);
}

void xtq__slot_local(struct xtq__engine *e, struct put_slot *s, int status, int prov_errno)
{
    xtq__mutex_lock(&e->put_lock);
    slot_local_locked(e, s, status, prov_errno);
    pthread_mutex_unlock(&e->put_lock);
}

/* The sending thread lets go of the slot after one attempt: `rc` is 0
 * (on the wire; an injected put is LOCAL now), -FI_EAGAIN (gave up: the
 * slot was completed meanwhile) or the transport's error. */
static void slot_sent(struct xtq__engine *e, struct put_slot *s, ssize_t rc, bool injected)
{
    if (rc == 0 && !s->inbox_sent) /* the inbox's write rang it */
        xtq__bell_ring(e, s->target);
    else if (rc && rc != -FI_EAGAIN)
        XTQ_LOG_ONCE(OFI, ERROR, "sending a put to rank %d: %s", s->target, fi_strerror((int)-rc));
    xtq__mutex_lock(&e->put_lock);
    s->state &= ~(uint32_t)SLOT_SENDING;
    if (rc == 0 && injected)
        slot_local_locked(e, s, 0, 0);
    else if (rc && rc != -FI_EAGAIN)
        slot_local_locked(e, s, -XTQ_EFABRIC, (int)-rc);
    else if (rc == -FI_EAGAIN)
        slot_let_go(s); /* never left */
    if (!s->state)
        slot_release(e, s);
    pthread_mutex_unlock(&e->put_lock);
}

static ssize_t put_transmit(struct xtq__engine *e, struct put_slot *s, const struct put_layout *l,
                            const struct iovec *iov, size_t niov);

/* Its message left whole (injected, or written into the target's inbox):
 * the caller's buffers are free, and no transport completion follows. */
static bool put_left_whole(const struct put_slot *s, const struct put_layout *l)
{
    return l->how == SEND_INJECT || s->inbox_sent;
}


/*
 * The target never got put `s` and refused it for good (a MISSING answer
 * to an ASK_AGAIN; acks.c): the copy was lost in the transport (a
 * connection the transport replaced dropped what it held, or it arrived
 * malformed). A put staged whole (injected or copied: every small put) is
 * sent again, marked RESEND, which the target runs once; one gathered
 * from the caller's buffers cannot be (they are the caller's again since
 * LOCAL) and fails with -XTQ_EIO: it did not run. Caller holds put_lock;
 * released here.
 */
static void slot_missing(struct xtq__engine *e, struct put_slot *s, int status)
{
    bool staged = s->txl.how == SEND_INJECT || s->txl.how == SEND_COPY;
    bool local = s->state & SLOT_LOCAL;
    if (!local || !staged || s->resends >= XTQ__RESEND_MAX) {
        /* Not LOCAL: the transport never completed its send (and may
         * still hold the buffers): DONE now, LOCAL when it lets go. */
        XTQ_LOG_ONCE(ENGINE, WARN,
                     "put %llu to rank %d was lost in the transport and not run there; it "
                     "fails (%s)",
                     (unsigned long long)s->seq, s->target,
                     !local   ? "the transport never completed its send"
                     : staged ? "sent again too often"
                              : "its buffers are the caller's again");
        s->state |= SLOT_ACKED;
        if (!s->status)
            s->status = status ? status : -XTQ_EIO;
        slot_finish(e, s);
        pthread_mutex_unlock(&e->put_lock);
        return;
    }
    XTQ_LOG_ONCE(ENGINE, WARN, "put %llu to rank %d was lost in the transport; sending it again",
                 (unsigned long long)s->seq, s->target);
    s->resends++;
    s->asks = 0;
    s->state &= ~(uint32_t)SLOT_LOCAL;
    s->state |= SLOT_SENDING;
    ((struct xtq__wire_hdr *)s->stage)->flags |= XTQ__WIRE_RESEND;
    struct iovec iov = {s->stage, s->txl.total};
    struct put_layout l = s->txl;
    pthread_mutex_unlock(&e->put_lock);
    ssize_t rc = put_transmit(e, s, &l, &iov, 1);
    if (rc != -FI_EAGAIN) {
        slot_sent(e, s, rc, put_left_whole(s, &l));
        return;
    }
    /* The transport is full: as if it left, so that the next ASK brings
     * the next MISSING and another try. */
    xtq__mutex_lock(&e->put_lock);
    s->state &= ~(uint32_t)SLOT_SENDING;
    slot_local_locked(e, s, 0, 0);
    if (!s->state)
        slot_release(e, s);
    pthread_mutex_unlock(&e->put_lock);
}

/* Flush's floor: past every DONE put from the oldest one on (a put its
 * caller knows DONE from the target's word counts, though its slot waits
 * for the ack). Caller holds put_lock. */
static void peer_floor(struct xtq__engine *e, struct peer *p)
{
    while (p->done_below < p->next_seq) {
        const struct put_slot *o = &p->slots[p->done_below % e->window];
        if ((o->state & SLOT_BUSY) && !(o->state & SLOT_DIRECT) && o->seq == p->done_below)
            break;
        p->done_below++;
    }
}

/*
 * The target's completion word for put slot `s` (notify.c): when it names
 * the put, the put is DONE for its caller now: its completion object
 * (detached from the slot, so the caller may reuse it at once) and its
 * counter get the status, and flush's floor moves past it. The slot stays
 * busy for the ack, which frees it and moves the window as before. Only a
 * put that asked for the word, is LOCAL (its buffers free) and not
 * answered yet is completed here; anything else is the ack's to finish.
 * Caller holds put_lock.
 */
static bool slot_direct_locked(struct xtq__engine *e, struct put_slot *s)
{
    xtq_ctx_t *ctx = e->ctx;
    if (!s->notify || (s->state & (SLOT_ACKED | SLOT_DIRECT | SLOT_HELD)) ||
        (s->state & (SLOT_BUSY | SLOT_LOCAL)) != (SLOT_BUSY | SLOT_LOCAL))
        return false;
    const _Atomic uint64_t *w = xtq__notify_word(e, s->target, s->seq);
    if (!w)
        return false;
    uint64_t v = atomic_load_explicit(w, memory_order_acquire);
    if ((uint32_t)v != (uint32_t)(s->seq + 1))
        return false;
    int32_t status = (int32_t)(v >> 32);
    /* Statuses are 0 or negative: anything else was not written by a retire. */
    if (status > 0)
        return false;
    s->state |= SLOT_DIRECT;
    s->status = status;
    /* Counted as the ack would have, now that its caller knows. */
    if (status)
        XTQ__STAT_INC(ctx, puts_failed);
    XTQ__STAT_INC(ctx, puts_completed);
    XTQ__STAT_INC(ctx, puts_completed_direct);
    XTQ_TRACE_POINT(XTQ_TRACE_COMPLETION, XTQ_TRACE_KEY(ctx->rank, s->seq));
    xtq_completion_t *c = s->comp;
    s->comp = NULL;
    if (c) {
        c->status = status;
        c->prov_errno = 0;
        comp_post((_Atomic uint32_t *)&c->state,
                  XTQ_COMPLETION_DONE | XTQ_COMPLETION_LOCAL |
                      (status == 0 ? XTQ_COMPLETION_REMOTE : 0));
    }
    /* After the completion object is final, as slot_finish orders it. */
    if (s->counter)
        xtq__counter_complete(s->counter, status);
    s->counter = NULL;
    /* DONE: its trigger's signal is the caller's again (flush's promise). */
    slot_untrigger(e, s);
    peer_floor(e, &e->peers[s->target]);
    return true;
}

/* A waiter's look at the word of the put `comp` reports (comp_ready,
 * xtq_completion_test/_state). */
static bool notify_try(struct xtq__engine *e, xtq_completion_t *comp)
{
    const int target = comp->target;
    const uint64_t seq = comp->seq;
    if (target < 0 || target >= e->ctx->size)
        return false;
    /* A waiter polls here: the window's lock only once the word names the
     * put (slot_direct_locked reads it again under the lock). */
    const _Atomic uint64_t *w = xtq__notify_word(e, target, seq);
    if (!w || (uint32_t)atomic_load_explicit(w, memory_order_relaxed) != (uint32_t)(seq + 1))
        return false;
    bool done = false;
    xtq__mutex_lock(&e->put_lock);
    struct put_slot *s = e->peers[target].slots ? &e->peers[target].slots[seq % e->window] : NULL;
    if (s && s->seq == seq && s->comp == comp)
        done = slot_direct_locked(e, s);
    pthread_mutex_unlock(&e->put_lock);
    return done;
}

bool xtq__engine_notify_poll(xtq_completion_t *comp)
{
    struct xtq__engine *e = (struct xtq__engine *)(uintptr_t)comp->internal_[0];
    return e && notify_try(e, comp);
}

void xtq__initiator_ack(struct xtq__engine *e, const struct xtq__wire_hdr *hdr, const void *result)
{
    uint32_t src = hdr->src_rank;
    xtq__mutex_lock(&e->put_lock);
    struct put_slot *slots = e->peers[src].slots, *s = NULL;
    if (slots)
        s = &slots[hdr->seq % e->window];
    if (!s || !(s->state & SLOT_BUSY) || (s->state & SLOT_ARMED) || s->seq != hdr->seq ||
        (s->state & SLOT_ACKED) || s->target != (int)src) {
        /* Sent and answered already: a second answer (to a resend, or to
         * an ASK that crossed the first ack), or one for a put failed at
         * a peer timeout. A fault's ordinary aftermath, not worth a
         * warning. A put never sent (or armed, not sent yet) is another
         * matter. */
        const bool armed = s && s->seq == hdr->seq && (s->state & SLOT_ARMED);
        const bool sent = hdr->seq < e->peers[src].next_seq && !armed;
        pthread_mutex_unlock(&e->put_lock);
        if (sent) {
            atomic_fetch_add_explicit(&e->acks_late, 1, memory_order_relaxed);
            xtq_dbg(ENGINE, "ack from rank %u for put %llu, answered already; dropped", src,
                    (unsigned long long)hdr->seq);
        } else {
            atomic_fetch_add_explicit(&e->acks_unknown, 1, memory_order_relaxed);
            XTQ_LOG_ONCE(ENGINE, WARN, "ack from rank %u names put %llu, never sent to it; dropped",
                         src, (unsigned long long)hdr->seq);
        }
        return;
    }
    if (hdr->flags & XTQ__WIRE_MISSING) {
        /* A resend on its way is answered by its own ack. */
        if (s->state & SLOT_SENDING) {
            pthread_mutex_unlock(&e->put_lock);
            return;
        }
        slot_missing(e, s, hdr->status);
        return;
    }
    s->state |= SLOT_ACKED;
    if (hdr->status && !s->status)
        s->status = hdr->status;
    /* A fetching put's result lands in the caller's buffer before DONE;
     * never more than it asked for. The copy is under put_lock: a peer
     * declared down meanwhile cannot complete the put under it. */
    if (hdr->result_len) {
        if (hdr->result_len > s->result_len) {
            XTQ_LOG_ONCE(ENGINE, WARN,
                         "rank %u answered put %llu with %u result bytes, %zu asked; refused", src,
                         (unsigned long long)hdr->seq, hdr->result_len, s->result_len);
            if (!s->status)
                s->status = -XTQ_EPROTO;
        } else if (!s->status) {
            memcpy(s->result, result, hdr->result_len);
        }
    }
    if (s->state & SLOT_LOCAL)
        slot_finish(e, s);
    pthread_mutex_unlock(&e->put_lock);
}

void xtq__puts_fail_peer(struct xtq__engine *e, int r, int status)
{
    xtq__mutex_lock(&e->put_lock);
    for (uint32_t i = 0; e->peers[r].slots && i < e->window; i++) {
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
        for (uint32_t i = 0; e->peers[r].slots && i < e->window; i++) {
            struct put_slot *s = &e->peers[r].slots[i];
            if (s->state & SLOT_BUSY) {
                if (!s->status)
                    s->status = status;
                slot_finish(e, s);
            }
            /* Nothing reads the CQ any more, and the endpoint closes
             * before the caller's finalize returns. */
            if (s->state & SLOT_HELD) {
                slot_let_go(s);
                if (!s->state)
                    slot_release(e, s);
            }
        }
    pthread_mutex_unlock(&e->put_lock);
}

/* ---- acks that do not come ------------------------------------------------ */

/* How long a put that left may wait for its ack before we ask again: a
 * quarter of the peer timeout (1.25 s by default), at least 10 ms; 1 s
 * when peers are never declared down. A target that is still running the
 * task (remote completion) answers nothing and is asked again later. */
static uint64_t reask_after(const struct xtq__engine *e)
{
    if (!e->peer_timeout_ns)
        return 1000000000ull;
    return e->peer_timeout_ns / 4 > 10000000ull ? e->peer_timeout_ns / 4 : 10000000ull;
}

void xtq__puts_reask(struct xtq__engine *e)
{
    uint64_t now = xtq__now_ns(), after = reask_after(e);
    if (now < e->next_reask || !atomic_load_explicit(&e->puts_outstanding, memory_order_relaxed))
        return;
    e->next_reask = now + after / 2;
    for (int r = 0; r < e->ctx->size; r++) {
        struct peer *p = &e->peers[r];
        if (atomic_load(&p->down))
            continue;
        xtq__mutex_lock(&e->put_lock);
        for (uint32_t i = 0; p->busy && p->slots && i < e->window; i++) {
            struct put_slot *s = &p->slots[i];
            uint32_t st = s->state;
            if (!(st & SLOT_BUSY) || (st & (SLOT_ARMED | SLOT_SENDING)))
                continue;
            /* A send the transport has not completed for a peer timeout
             * (4 rounds) while the peer talks: its connection was replaced
             * under it (a reset), and it may never complete. Acked: DONE,
             * LOCAL when the transport lets go. Not acked: asked, as a put
             * that left is. */
            bool local = st & SLOT_LOCAL;
            if (now - s->local_at < (local || s->asks ? after : 4 * after))
                continue;
            if (st & SLOT_ACKED) {
                if (!local) {
                    XTQ_LOG_ONCE(ENGINE, WARN,
                                 "the transport never completed the send of put %llu to rank "
                                 "%d, acknowledged; DONE, LOCAL once the transport lets go",
                                 (unsigned long long)s->seq, r);
                    slot_finish(e, s);
                }
                continue;
            }
            /* Lost on the way, or the task still runs: ask (on the
             * control channel; best effort, again next round). */
            struct xtq__wire_hdr h;
            xtq__wire_hdr_init(&h, XTQ__MSG_ASK, e->ctx->job_key, (uint32_t)e->ctx->rank, s->seq);
            /* Asked before, unanswered: if it is not there, it was lost
             * (acks.c answers MISSING). */
            if (s->asks)
                h.flags = XTQ__WIRE_ASK_AGAIN;
            if (s->asks < UINT8_MAX)
                s->asks++;
            s->local_at = now;
            if (xtq__ctrl_send(e, r, &h) == 0)
                xtq__bell_ring(e, r);
        }
        pthread_mutex_unlock(&e->put_lock);
    }
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

/* Test hooks (engine.h): make the next sends of a kind fail. */
struct xtq__engine_faults xtq__faults;

bool xtq__fault_take(_Atomic uint32_t *n)
{
    uint32_t v = atomic_load_explicit(n, memory_order_relaxed);
    while (v && !atomic_compare_exchange_weak_explicit(n, &v, v - 1, memory_order_relaxed,
                                                       memory_order_relaxed))
        ;
    return v != 0;
}

/* Check the pieces and choose how the message leaves. Totals never
 * overflow: each piece is checked against what is left of max_msg
 * (issue 10, bug 5). */
static int put_layout(const struct xtq__engine *e, size_t cmd_len, const struct iovec *iov,
                      size_t iovcnt, struct put_layout *l)
{
    size_t hdr_len = sizeof(struct xtq__wire_hdr);
    if (cmd_len > e->max_msg || cmd_len > UINT32_MAX)
        return -XTQ_EMSGSIZE;
    size_t room = e->max_msg - cmd_len;
    l->cmd_len = cmd_len;
    l->payload_len = 0;
    l->pieces = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        size_t n = iov[i].iov_len;
        if (!n)
            continue;
        if (!iov[i].iov_base)
            return -XTQ_EINVAL;
        if (n > room - l->payload_len)
            return -XTQ_EMSGSIZE;
        l->payload_len += n;
        l->pieces++;
    }
    size_t off = xtq__wire_payload_offset((uint32_t)cmd_len);
    l->pad1 = off - hdr_len - cmd_len;
    l->total = xtq__wire_put_len((uint32_t)cmd_len, l->payload_len);
    l->pad2 = l->total - off - l->payload_len;
    size_t limit = e->ofi.iov_limit < WIRE_IOV_MAX ? e->ofi.iov_limit : WIRE_IOV_MAX;
    size_t tail = l->pieces + (l->pad2 ? 1 : 0);
    /* Small puts (up to the provider's inject size) are copied whole and
     * injected: one copy of a few hundred bytes costs less than a gathered
     * send and its completion (the eager protocol); up to STAGE_COPY_MAX
     * they are copied whole and sent from the stage. Larger payloads are
     * gathered from the caller's buffers where the provider takes that
     * many pieces (tcp and shm take 4: the command then joins the header),
     * and copied into the stage only beyond. */
    if (l->total <= e->ofi.inject_size)
        l->how = SEND_INJECT;
    else if (l->total <= STAGE_COPY_MAX)
        l->how = SEND_COPY;
    else if (2 + (l->pad1 ? 1 : 0) + tail <= limit)
        l->how = SEND_GATHER;
    else if (1 + tail <= limit)
        l->how = SEND_GATHER_CMD;
    else
        l->how = SEND_COPY;
    return 0;
}

/* Bytes of the stage a put needs. */
static size_t put_stage_len(const struct put_layout *l)
{
    switch (l->how) {
    case SEND_GATHER:
        return sizeof(struct xtq__wire_hdr);
    case SEND_GATHER_CMD:
        return sizeof(struct xtq__wire_hdr) + l->cmd_len + l->pad1;
    default:
        return l->total;
    }
}

/* The command joins the header in the stage (every way but GATHER). */
static void put_stage_cmd(const struct put_layout *l, uint8_t *stage, const void *cmd)
{
    size_t hdr_len = sizeof(struct xtq__wire_hdr);
    memcpy(stage + hdr_len, cmd, l->cmd_len);
    memset(stage + hdr_len + l->cmd_len, 0, l->pad1);
}

/* The wire iovs; the payload is copied into the stage here where the
 * message leaves whole from it. `cmd` is read for GATHER only. */
static size_t put_wire(const struct put_layout *l, uint8_t *stage, const void *cmd,
                       const struct iovec *piov, size_t iovcnt, struct iovec iov[WIRE_IOV_MAX])
{
    size_t hdr_len = sizeof(struct xtq__wire_hdr), n = 0;
    if (l->how == SEND_GATHER) {
        iov[n++] = (struct iovec){stage, hdr_len};
        iov[n++] = (struct iovec){(void *)cmd, l->cmd_len};
        if (l->pad1)
            iov[n++] = (struct iovec){(void *)zero_pad, l->pad1};
    } else {
        iov[n++] = (struct iovec){stage, hdr_len + l->cmd_len + l->pad1};
    }
    if (l->how == SEND_INJECT || l->how == SEND_COPY) {
        uint8_t *at = stage + hdr_len + l->cmd_len + l->pad1;
        for (size_t i = 0; i < iovcnt; i++) {
            if (piov[i].iov_len)
                memcpy(at, piov[i].iov_base, piov[i].iov_len);
            at += piov[i].iov_len;
        }
        memset(at, 0, l->pad2);
        iov[0].iov_len = l->total;
        return 1;
    }
    for (size_t i = 0; i < iovcnt; i++)
        if (piov[i].iov_len)
            iov[n++] = piov[i];
    if (l->pad2)
        iov[n++] = (struct iovec){(void *)zero_pad, l->pad2};
    return n;
}

/* One attempt to hand the slot's message to the transport, or to write it
 * into the target's inbox where it reserved a ring index (inbox.c): once,
 * whatever happens (the index is given back unused on a failure); a
 * resend goes through the transport. */
static ssize_t put_transmit(struct xtq__engine *e, struct put_slot *s, const struct put_layout *l,
                            const struct iovec *iov, size_t niov)
{
    bool fault = unlikely(atomic_load_explicit(&xtq__faults.put_send, memory_order_relaxed)) &&
                 xtq__fault_take(&xtq__faults.put_send);
    if (s->inbox) {
        s->inbox = false;
        s->inbox_sent = true;
        if (fault || !s->inbox_filled) /* a fault gives the index back unused */
            xtq__inbox_fill(e, s->target, s->inbox_idx, iov, fault ? 0 : niov);
        s->inbox_filled = false;
        xtq__inbox_publish(e, s->target, s->inbox_idx);
        if (fault)
            return -FI_EIO;
        XTQ__STAT_INC(e->ctx, puts_via_inbox);
        return 0;
    }
    s->inbox_sent = false;
    /* Inbox puts may not overtake it until its target has handled it. */
    if (!s->fi_counted) {
        s->fi_counted = true;
        atomic_fetch_add_explicit(&e->peers[s->target].fi_unacked, 1, memory_order_acq_rel);
    }
    if (fault)
        return -FI_EIO;
    if (l->how == SEND_INJECT)
        return xtq__ofi_inject(&e->ofi, s->stage, l->total, s->target);
    return xtq__ofi_sendv(&e->ofi, iov, niov, s->target, s);
}

/* ---- the send queue (XTQ_ENDPOINT_OWNER=progress) ------------------------ */

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

/* A queued slot is SLOT_SENDING (the caller handed it over with its
 * pieces in s->txl, s->txiov): the progress turn sends it and lets go. */
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
        ssize_t rc = -FI_EAGAIN;
        if (s->inbox && atomic_load(&e->peers[s->target].down)) {
            xtq__inbox_write(e, s->target, s->inbox_idx, NULL, 0); /* given back */
            s->inbox = false;
        }
        if (!atomic_load(&e->peers[s->target].down)) {
            rc = put_transmit(e, s, &s->txl, s->txiov, s->txniov);
            if (rc == -FI_EAGAIN) {
                e->tx_retry = s; /* the transport is full: first next turn */
                break;
            }
            XTQ_TRACE_POINT(XTQ_TRACE_MSG_SENT, XTQ_TRACE_KEY(e->ctx->rank, s->seq));
        }
        slot_sent(e, s, rc, put_left_whole(s, &s->txl));
        n++;
    }
    return n;
}

void xtq__txq_drop(struct xtq__engine *e)
{
    struct mpsc_node *node;
    /* Their puts were failed by xtq__puts_fail_all: let the slots go. */
    if (e->tx_retry)
        slot_sent(e, e->tx_retry, -FI_EAGAIN, false);
    e->tx_retry = NULL;
    while ((node = mpsc_pop(&e->txq)) != NULL)
        slot_sent(e, container_of(node, struct put_slot, txq), -FI_EAGAIN, false);
}

/* ---- triggered puts ------------------------------------------------------ */

/* Engines with armed triggers that a host-side signal change kicks. */
static pthread_rwlock_t trig_engines_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct xtq__engine *trig_engines;

static bool trig_holds(const struct put_trigger *t)
{
    int64_t v = atomic_load_explicit(&t->sig->value, memory_order_seq_cst);
    switch (t->cond) {
    case XTQ_SIGNAL_EQ:
        return v == t->value;
    case XTQ_SIGNAL_NE:
        return v != t->value;
    case XTQ_SIGNAL_LT:
        return v < t->value;
    case XTQ_SIGNAL_GTE:
        return v >= t->value;
    }
    return false;
}

/* A signal that an armed put watches changed (signal.c, host side, from
 * any thread): every engine with armed puts evaluates them next turn. */
void xtq__triggers_kick(void)
{
    pthread_rwlock_rdlock(&trig_engines_lock);
    for (struct xtq__engine *e = trig_engines; e; e = e->trig_link) {
        if (!atomic_load_explicit(&e->trig_count, memory_order_relaxed))
            continue;
        atomic_store(&e->trig_kick, 1);
        xtq__engine_wake(e);
    }
    pthread_rwlock_unlock(&trig_engines_lock);
}

static void trig_listen(struct xtq__engine *e)
{
    pthread_rwlock_wrlock(&trig_engines_lock);
    if (!e->trig_listed) {
        e->trig_link = trig_engines;
        trig_engines = e;
        e->trig_listed = true;
    }
    pthread_rwlock_unlock(&trig_engines_lock);
}

void xtq__triggers_stop(struct xtq__engine *e)
{
    pthread_rwlock_wrlock(&trig_engines_lock);
    for (struct xtq__engine **pp = &trig_engines; *pp; pp = &(*pp)->trig_link)
        if (*pp == e) {
            *pp = e->trig_link;
            break;
        }
    e->trig_listed = false;
    pthread_rwlock_unlock(&trig_engines_lock);
}

int xtq__engine_triggers_cancel(struct xtq__engine *e)
{
    int n = 0;
    xtq__mutex_lock(&e->put_lock);
    while (e->trig_armed) {
        struct put_slot *s = e->trig_armed->slot;
        s->status = -XTQ_ECANCELED;
        s->state |= SLOT_LOCAL; /* never handed to the transport */
        slot_finish(e, s);
        n++;
    }
    pthread_mutex_unlock(&e->put_lock);
    return n;
}

/* Caller holds put_lock: the triggered put of slot `s` has not fired
 * (armed, or ready but not handed to the transport): fail it. */
static bool trig_cancel_locked(struct xtq__engine *e, struct put_slot *s)
{
    if (!(s->state & SLOT_BUSY) || (s->state & (SLOT_SENDING | SLOT_LOCAL)) || !s->trig ||
        s->trig->list == TRIG_NONE)
        return false;
    s->status = -XTQ_ECANCELED;
    s->state |= SLOT_LOCAL; /* never handed to the transport */
    slot_finish(e, s);
    return true;
}

int xtq__engine_put_cancel(struct xtq__engine *e, xtq_completion_t *comp)
{
    int target = comp->target, rc = -XTQ_EALREADY;
    if (target < 0 || target >= e->ctx->size)
        return -XTQ_EINVAL;
    xtq__mutex_lock(&e->put_lock);
    /* The completion names its put's slot; a slot that serves another put
     * now (or none) means this one is long DONE. */
    struct put_slot *slots = e->peers[target].slots;
    struct put_slot *s = slots ? &slots[comp->seq % e->window] : NULL;
    if (s && s->comp == comp && s->seq == comp->seq && trig_cancel_locked(e, s))
        rc = 0;
    pthread_mutex_unlock(&e->put_lock);
    return rc;
}

size_t xtq__engine_put_cancel_trigger(struct xtq__engine *e, const struct xtq_signal *sig)
{
    size_t n = 0;
    xtq__mutex_lock(&e->put_lock);
    for (int list = 0; list < 2; list++) {
        struct put_trigger *t = list ? e->trig_ready : e->trig_armed, *next;
        for (; t; t = next) {
            next = t->next; /* t is gone once its put is finished */
            if (t->sig == sig && trig_cancel_locked(e, t->slot))
                n++;
        }
    }
    pthread_mutex_unlock(&e->put_lock);
    return n;
}

int xtq__triggers_poll(struct xtq__engine *e)
{
    if (!atomic_load_explicit(&e->trig_count, memory_order_relaxed))
        return 0;
    uint64_t now = xtq__now_ns();
    if (!atomic_exchange(&e->trig_kick, 0) && now < e->trig_next_poll)
        return 0;

    /* Evaluate under the window lock; send outside it, in firing order. */
    struct put_trigger *fire = NULL, **fire_tail = &fire;
    xtq__mutex_lock(&e->put_lock);
    e->trig_next_poll = now + (e->trig_device ? TRIG_POLL_DEVICE_NS : TRIG_POLL_HOST_NS);
    for (struct put_trigger *t = e->trig_armed, *next; t; t = next) {
        next = t->next;
        if (trig_holds(t)) {
            trig_unlink(e, t);
            t->slot->state &= ~(uint32_t)SLOT_ARMED;
            trig_append(e, t, TRIG_READY);
        }
    }
    while (e->trig_ready) {
        struct put_trigger *t = e->trig_ready;
        trig_unlink(e, t);
        t->slot->state |= SLOT_SENDING;
        t->slot->local_at = now; /* fired: asked about from now on */
        *fire_tail = t;
        fire_tail = &t->next;
    }
    pthread_mutex_unlock(&e->put_lock);

    int n = 0;
    for (struct put_trigger *t = fire, *next; t; t = next) {
        next = t->next;
        struct put_slot *s = t->slot;
        struct iovec iov[WIRE_IOV_MAX];
        XTQ_TRACE_POINT(XTQ_TRACE_PUT_ISSUED, XTQ_TRACE_KEY(e->ctx->rank, s->seq));
        size_t niov = put_wire(&t->l, s->stage, NULL, t->piov, t->piovcnt, iov);
        ssize_t rc = put_transmit(e, s, &t->l, iov, niov);
        if (rc == -FI_EAGAIN && !atomic_load(&e->peers[s->target].down) && !atomic_load(&e->stop)) {
            /* The transport is full: again next turn, in order. */
            xtq__mutex_lock(&e->put_lock);
            s->state &= ~(uint32_t)SLOT_SENDING;
            if (s->state & SLOT_BUSY)
                trig_append(e, t, TRIG_READY);
            else if (!s->state)
                slot_release(e, s);
            pthread_mutex_unlock(&e->put_lock);
            atomic_store(&e->trig_kick, 1);
            continue;
        }
        slot_sent(e, s, rc, put_left_whole(s, &t->l));
        n++;
    }
    return n;
}

/* Arm a triggered put on its slot (caller holds put_lock; the slot is
 * BUSY). The trigger was allocated and its signal referenced. */
static void trig_arm(struct xtq__engine *e, struct put_slot *s, struct put_trigger *t,
                     const struct put_layout *l, const void *cmd, const struct iovec *piov,
                     size_t iovcnt)
{
    t->slot = s;
    t->l = *l;
    t->piovcnt = iovcnt;
    if (iovcnt)
        memcpy(t->piov, piov, iovcnt * sizeof(*piov));
    put_stage_cmd(l, s->stage, cmd);
    s->trig = t;
    s->state |= SLOT_ARMED;
    trig_append(e, t, TRIG_ARMED);
    atomic_fetch_add(&e->trig_count, 1);
    /* Before the caller's check of the value: a change after it sees the
     * watcher and kicks (signal.c). */
    atomic_fetch_add_explicit(&t->sig->watchers, 1, memory_order_seq_cst);
}

/* ---- the put ------------------------------------------------------------- */

int xtq__engine_put(struct xtq__engine *e, int target, const void *cmd, size_t cmd_len,
                    const void *payload, size_t payload_len, uint32_t flags, xtq_completion_t *comp)
{
    struct iovec one = {(void *)payload, payload_len};
    struct xtq__put_req req = {.flags = flags, .comp = comp};
    if (payload_len && !payload)
        return -XTQ_EINVAL;
    if (!comp && (flags & XTQ_PUT_REMOTE_COMPLETION))
        return -XTQ_EINVAL;
    return xtq__engine_putv(e, target, cmd, cmd_len, &one, payload_len ? 1 : 0, &req);
}

/* A trigger for the put, its signal referenced: 0, or -XTQ_EINVAL (a
 * signal destroyed, a condition HSA does not have), -XTQ_ENOMEM. */
static int trig_new(const struct xtq__put_req *req, size_t iovcnt, struct put_trigger **out)
{
    struct xtq_signal *sig = req->trigger;
    *out = NULL;
    if (!req->trigger)
        return 0;
    if (sig->magic != XTQ__SIGNAL_MAGIC || (unsigned)req->trigger_cond > XTQ_SIGNAL_GTE)
        return -XTQ_EINVAL;
    if (iovcnt > (SIZE_MAX - sizeof(struct put_trigger)) / sizeof(struct iovec))
        return -XTQ_EINVAL;
    struct put_trigger *t = calloc(1, sizeof(*t) + iovcnt * sizeof(struct iovec));
    if (!t)
        return -XTQ_ENOMEM;
    /* A signal an armed put watches cannot be destroyed under it. */
    if (xtq__refs_get(&sig->refs) != 0) {
        free(t);
        return -XTQ_EINVAL;
    }
    t->sig = sig;
    t->cond = req->trigger_cond;
    t->value = req->trigger_value;
    *out = t;
    return 0;
}

static void trig_discard(struct put_trigger *t)
{
    if (t) {
        xtq__refs_put(&t->sig->refs);
        free(t);
    }
}

int xtq__engine_putv(struct xtq__engine *e, int target, const void *cmd, size_t cmd_len,
                     const struct iovec *piov, size_t iovcnt, const struct xtq__put_req *req)
{
    xtq_ctx_t *ctx = e->ctx;
    uint32_t flags = req->flags;
    xtq_completion_t *comp = req->comp, local_comp;
    struct put_layout l;
    struct put_slot *s;
    struct put_trigger *trig;
    struct iovec iov[WIRE_IOV_MAX];
    int rc;

    if (!cmd || cmd_len < XTQ_AQL_PACKET_SIZE || (iovcnt && !piov))
        return -XTQ_EINVAL;
    if (flags & ~(uint32_t)(XTQ_PUT_REMOTE_COMPLETION | XTQ_PUT_NONBLOCKING | XTQ_PUT_LONG_TASK))
        return -XTQ_EINVAL;
    /* A fetching put is one with remote completion: the result comes
     * back with the finished task's ack. */
    if (req->result_len && !req->result)
        return -XTQ_EINVAL;
    if (req->result)
        flags |= XTQ_PUT_REMOTE_COMPLETION;
    if (!comp && !req->counter && (flags & XTQ_PUT_REMOTE_COMPLETION))
        return -XTQ_EINVAL;
    /* A triggered put reports to a completion or counter: the call does
     * not wait for it. */
    if (req->trigger && !comp && !req->counter)
        return -XTQ_EINVAL;
    if (req->result_len > e->max_msg || req->result_len > UINT32_MAX)
        return -XTQ_EMSGSIZE;
    if (target < 0 || target >= ctx->size)
        return -XTQ_ESRCRANK;
    rc = put_layout(e, cmd_len, piov, iovcnt, &l);
    if (rc)
        return rc;
    /* The command is copied now, whatever its size: the caller may reuse
     * its buffer at once (typically a stack array), though the message
     * leaves later (a triggered put, the progress thread's send queue, a
     * transport that reads gathered pieces after the call). */
    if (l.how == SEND_GATHER)
        l.how = SEND_GATHER_CMD;
    if (atomic_load(&e->stop))
        return -XTQ_EFINALIZED;
    rc = trig_new(req, iovcnt, &trig);
    if (rc)
        return rc;

    struct peer *p = &e->peers[target];
    uint32_t skipped = 0;
    xtq__mutex_lock(&e->put_lock);
    if (!p->slots) {
        /* This peer's first put (lifecycle.c makes none in advance). */
        p->slots = calloc(e->window, sizeof(struct put_slot));
        if (!p->slots) {
            pthread_mutex_unlock(&e->put_lock);
            trig_discard(trig);
            return -XTQ_ENOMEM;
        }
    }
    for (;;) {
        if (atomic_load(&p->down)) {
            pthread_mutex_unlock(&e->put_lock);
            trig_discard(trig);
            return -XTQ_EHOSTDOWN;
        }
        s = &p->slots[p->next_seq % e->window];
        if (!s->state)
            break;
        /* Held by the transport for a put that failed: skip its sequence
         * number (the target needs none in order), once around at most. */
        if (s->state == SLOT_HELD && skipped++ < e->window) {
            p->next_seq++;
            continue;
        }
        uint32_t seen = atomic_load_explicit(&e->slot_freed, memory_order_acquire);
        pthread_mutex_unlock(&e->put_lock);
        if (flags & XTQ_PUT_NONBLOCKING) {
            xtq__engine_progress(e);
            trig_discard(trig);
            return -XTQ_EAGAIN;
        }
        /* A short task running in a progress turn (XTQ_REGISTER_SHORT)
         * cannot wait: only its own turn would free the window, or (a
         * turn of another plane) the peer's plane that frees it may wait
         * on this one. */
        if (xtq__ctx_in_turn(ctx)) {
            XTQ_LOG_ONCE(ENGINE, WARN,
                         "a put from a task running in the progress turn found "
                         "the window full: -XTQ_EAGAIN instead of waiting");
            trig_discard(trig);
            return -XTQ_EAGAIN;
        }
        window_wait(e, seen);
        xtq__mutex_lock(&e->put_lock);
    }
    rc = slot_stage(s, put_stage_len(&l));
    if (rc) {
        pthread_mutex_unlock(&e->put_lock);
        trig_discard(trig);
        return rc;
    }
    uint64_t seq = p->next_seq++;
    struct xtq__wire_hdr *hdr = (struct xtq__wire_hdr *)s->stage;
    xtq__wire_hdr_init(hdr, XTQ__MSG_PUT, ctx->job_key, (uint32_t)ctx->rank, seq);
    hdr->flags = ((flags & XTQ_PUT_REMOTE_COMPLETION) ? XTQ__WIRE_REMOTE_COMPLETION : 0) |
                 ((flags & XTQ_PUT_LONG_TASK) ? XTQ__WIRE_LONG_TASK : 0);
    hdr->cmd_len = (uint32_t)cmd_len;
    hdr->payload_len = l.payload_len;
    hdr->result_len = (uint32_t)req->result_len;

    /* No completion and no counter: we return once the buffers are free,
     * watching a completion on our stack that the slot lets go at LOCAL.
     * A counter alone: no completion object at all. */
    bool wait_local = !comp && !req->counter;
    s->detach_at_local = wait_local;
    if (wait_local) {
        memset(&local_comp, 0, sizeof(local_comp));
        comp = &local_comp;
    }
    /* On one host a waiter (a completion wait or test, a flush) may learn
     * of the remote completion from the target's word (notify.c): a put
     * that reports to a completion object or a counter, and whose outcome
     * is all in that word (no fetched result). A triggered put asks too:
     * its word is looked at only once it has left (LOCAL). */
    bool notify = (comp || req->counter) && !wait_local && !req->result &&
                  (flags & XTQ_PUT_REMOTE_COMPLETION) && xtq__notify_word(e, target, seq);
    s->notify = notify;
    if (notify)
        hdr->flags |= XTQ__WIRE_NOTIFY;
    if (comp) {
        comp->state = notify ? XTQ__COMPLETION_NOTIFY : 0;
        /* Whose word: for xtq_completion_test/_state, which have no ctx. */
        comp->internal_[0] = notify ? (uint64_t)(uintptr_t)e : 0;
        comp->status = 0;
        comp->prov_errno = 0;
        comp->target = target;
        comp->seq = seq;
    }
    /* A message that fits goes into the target's inbox where it has one
     * with room (inbox.c), gathered there as it would be sent; a
     * triggered one leaves later, in no order with the puts after it:
     * the transport, counted when it fires. */
    s->inbox = false;
    s->inbox_sent = false;
    s->inbox_filled = false;
    s->fi_counted = false;
    if (!trig && e->inbox_peers.seg)
        s->inbox = xtq__inbox_reserve(e, target, l.total, &s->inbox_idx);
    if (!trig && !s->inbox) {
        s->fi_counted = true;
        atomic_fetch_add_explicit(&p->fi_unacked, 1, memory_order_acq_rel);
    }
    s->kind = CTX_PUT;
    s->state = SLOT_BUSY;
    s->target = target;
    s->flags = flags;
    s->seq = seq;
    s->status = 0;
    s->prov_errno = 0;
    s->comp = comp;
    s->result = req->result;
    s->result_len = req->result_len;
    s->counter = req->counter;
    s->txl = l;
    s->asks = 0;
    s->resends = 0;
    s->local_at = xtq__now_ns(); /* issued; LOCAL sets it again */
    if (s->counter)
        xtq__counter_attach(s->counter);
    if (p->busy++ == 0)
        atomic_store_explicit(&p->last_heard, xtq__now_ns(), memory_order_relaxed);
    atomic_fetch_add(&e->puts_outstanding, 1);
    XTQ__STAT_INC(ctx, puts_issued);
    XTQ__STAT_ADD(ctx, payload_bytes_sent, l.payload_len);
    if (trig) {
        trig_arm(e, s, trig, &l, cmd, piov, iovcnt);
        /* Read while we hold the lock: once it is dropped the put may
         * fire, complete and free its trigger. */
        bool holds = trig_holds(trig);
        pthread_mutex_unlock(&e->put_lock);
        trig_listen(e);
        /* A condition that holds already fires at once: this thread
         * takes the turn if it can, else the turn in progress does. */
        if (holds) {
            atomic_store(&e->trig_kick, 1);
            if (xtq__engine_progress(e) == 0)
                xtq__engine_wake(e);
        }
        return 0;
    }
    /* The slot is ours until we let go of it (SLOT_SENDING), whatever
     * completes meanwhile; send outside the window lock so acks and
     * completions keep flowing. */
    s->state |= SLOT_SENDING;
    /* An inbox put sent from this thread is written into the ring straight
     * from the caller's command and pieces, gathered as a transport would
     * (header, command, padding, pieces), and staged for a resend only
     * after that, off the way to the target: one copy of the payload
     * before the target has it, not two. */
    const bool gather_inbox = s->inbox && !e->owner_only && l.pieces + 4 <= WIRE_IOV_MAX;
    if (!gather_inbox)
        put_stage_cmd(&l, s->stage, cmd);
    pthread_mutex_unlock(&e->put_lock);
    XTQ_TRACE_POINT(XTQ_TRACE_PUT_ISSUED, XTQ_TRACE_KEY(ctx->rank, seq));
    size_t niov;
    if (gather_inbox) {
        /* Into the ring from the caller's buffers, then staged whole as
         * the layout says for a resend from the same (cached) bytes,
         * before the slot is published: once it is, the target may answer
         * and the caller's other threads reuse the buffers. */
        struct put_layout g = l;
        g.how = SEND_GATHER;
        niov = put_wire(&g, s->stage, cmd, piov, iovcnt, iov);
        xtq__inbox_fill(e, target, s->inbox_idx, iov, niov);
        put_stage_cmd(&l, s->stage, cmd);
        niov = put_wire(&l, s->stage, cmd, piov, iovcnt, iov);
        s->inbox_filled = true;
    } else {
        niov = put_wire(&l, s->stage, cmd, piov, iovcnt, iov);
    }

    if (e->owner_only) {
        /* XTQ_ENDPOINT_OWNER=progress: the progress turn sends it
         * (txq_flush) and lets go; it is awake or woken. */
        memcpy(s->txiov, iov, niov * sizeof(iov[0]));
        s->txniov = (uint8_t)niov;
        s->txl = l;
        mpsc_push(&e->txq, &s->txq);
        xtq__engine_wake(e);
    } else {
        ssize_t src;
        uint64_t refused_at = 0;
        for (;;) {
            src = put_transmit(e, s, &l, iov, niov);
            if (src != -FI_EAGAIN)
                break;
            /* The target died while we waited for room: xtq__peer_down()
             * has completed the slot with -XTQ_EHOSTDOWN. */
            if (atomic_load(&p->down))
                break;
            /* A transport that takes nothing for a whole peer timeout
             * from a peer not heard from as long is a peer gone: the call
             * returns, whether or not a progress turn got to the liveness
             * check. A peer that talks but takes nothing is overloaded
             * (its regions held by backlogged tasks): flow control. */
            uint64_t now = xtq__now_ns();
            /* Talking here means any message (liveness.c judges by answers
             * and pings first; this only bounds the wait for room). */
            uint64_t heard = atomic_load_explicit(&p->last_heard, memory_order_relaxed);
            uint64_t msg = atomic_load_explicit(&p->last_msg, memory_order_relaxed);
            heard = msg > heard ? msg : heard;
            if (!refused_at) {
                refused_at = now;
            } else if (e->peer_timeout_ns && now - refused_at >= e->peer_timeout_ns &&
                       now > heard && now - heard >= e->peer_timeout_ns) {
                xtq__peer_down(e, target, "took no message for XTQ_PEER_TIMEOUT_MS");
                break;
            }
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        }
        slot_sent(e, s, src, put_left_whole(s, &l));
        XTQ_TRACE_POINT(XTQ_TRACE_MSG_SENT, XTQ_TRACE_KEY(ctx->rank, seq));
        /* A gathered send completes in the CQ, which the progress thread
         * must read. An injected put is local already, and its ack rings
         * this rank's doorbell: a wake-up here would only cost a system
         * call on every small put while the thread sleeps. */
        if (!put_left_whole(s, &l) || !e->bells)
            xtq__engine_wake(e);
    }

    if (wait_local) {
        /* No completion object: return once the buffers are free. */
        struct comp_wait c = {e, (_Atomic uint32_t *)&local_comp.state, XTQ_COMPLETION_LOCAL, NULL};
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
 * condition (a completion word, flush's floor), the progress thread
 * waking it when the ack comes, takes the progress turns and sleeps on
 * the transport itself instead, so the ack wakes it directly (one
 * hand-off less on every round trip whose waiter sleeps). The progress
 * thread parks meanwhile (progress.c); every turn is a whole one, so this
 * rank's target side and other threads' completions keep moving. Called
 * with the claim held; releases it.
 */
static int lone_wait(struct xtq__engine *e, bool (*ready)(void *arg), void *arg, uint64_t deadline)
{
    int rc;

    /* A turn of the progress thread in flight ends before ours begin;
     * later ones see the claim under this lock and leave. */
    pthread_mutex_lock(&e->progress_lock);
    pthread_mutex_unlock(&e->progress_lock);
    for (;;) {
        if (ready(arg)) {
            rc = 0;
            break;
        }
        if (xtq__now_ns() >= deadline) {
            rc = -XTQ_ETIMEDOUT;
            break;
        }
        if (xtq__engine_progress(e) > 0)
            continue;
        if (ready(arg)) {
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

/*
 * How long a wait polls. XTQ_WAIT_SPIN_US (`base`) where waits are short;
 * where this context's completion waits have lately taken longer, 1.5 x
 * their running average, so that the ack of a round trip of a few hundred
 * microseconds (a large GPU task) finds its waiter polling, not asleep: on
 * the H200 host the 1 MiB CUDA round trip (about 150 us) slept after 50 us
 * and its ack then took 11 us to reach the waiter instead of 2 (docs/cuda.md,
 * Session 17). A wait expected to outlast `max` (XTQ_WAIT_SPIN_MAX_US)
 * sleeps after `base` as before: beside it the wake-up is small, and
 * polling it through would cost a core for nothing.
 */
uint64_t xtq__wait_spin_budget(uint64_t base, uint64_t max, uint64_t est)
{
    uint64_t want = est > UINT64_MAX / 2 ? UINT64_MAX : est + est / 2;
    return want > base && want <= max ? want : base;
}

/* A quarter of the way from the average to the last wait: a change of
 * pattern is followed within a few waits, one odd wait moves it little. */
uint64_t xtq__wait_est_update(uint64_t est, uint64_t took)
{
    return took >= est ? est + (took - est) / 4 : est - (est - took) / 4;
}

/*
 * An application thread's wait for a condition the engine makes true
 * (a completion, a flush): 0, or -XTQ_ETIMEDOUT past the deadline.
 * Poll first, progressing the engine ourselves (if the progress thread
 * is not): an ack that comes within the spin is seen without two thread
 * wake-ups (engine thread, then us). Then sleep on the transport as a
 * lone waiter, or on `sleep`'s futex word (the engine changes it when the
 * condition may have become true; its nap only a safety net), leaving the
 * engine to its thread.
 */
static int engine_wait_until(struct xtq__engine *e, bool (*ready)(void *arg),
                             bool (*ready_progress)(void *arg), void *arg,
                             const struct xtq__spin_wait *sleep, uint64_t deadline)
{
    if (e->manual || !e->thread_started) {
        /* Nobody else progresses: we do, until ready or the deadline. */
        for (;;) {
            if (ready(arg))
                return 0;
            if (xtq__now_ns() >= deadline)
                return -XTQ_ETIMEDOUT;
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        }
    }
    if (e->wait_spin_ns) {
        uint64_t now = xtq__now_ns();
        uint64_t spin = deadline > now ? deadline - now : 0;
        uint64_t budget =
            xtq__wait_spin_budget(e->wait_spin_ns, e->wait_spin_max_ns,
                                  atomic_load_explicit(&e->wait_est_ns, memory_order_relaxed));
        if (spin > budget)
            spin = budget;
        if (xtq__spin_until(ready_progress, arg, spin))
            return 0;
    }
    /* Not within the spin (none on a small host). */
    uint32_t free_claim = 0;
    if (e->lone_waiter_on && !ready(arg) &&
        atomic_compare_exchange_strong(&e->lone_waiter, &free_claim, 1))
        return lone_wait(e, ready, arg, deadline);
    return xtq__spin_wait(sleep, deadline) < 0 ? -XTQ_ETIMEDOUT : 0;
}

bool xtq__engine_lone_waiter_on(const struct xtq__engine *e)
{
    return e->lone_waiter_on;
}

bool xtq__engine_lone_waiting(struct xtq__engine *e)
{
    return atomic_load_explicit(&e->lone_waiter, memory_order_acquire) != 0;
}

int xtq__engine_wait(struct xtq__engine *e, xtq_completion_t *comp, uint32_t bits,
                     int64_t timeout_ns)
{
    struct comp_wait c = {e, (_Atomic uint32_t *)&comp->state, bits | XTQ_COMPLETION_DONE, comp};
    uint64_t deadline = xtq__deadline_ns(xtq__timeout_ns(timeout_ns));
    /* Naps of at most 100 ms on the completion word. */
    struct xtq__spin_wait sleep = {
        .ready = comp_ready,
        .arg = &c,
        .word = c.st,
        .sleeper_bit = XTQ__COMPLETION_SLEEPER,
        .nap_ns = 100000000,
    };
    uint64_t start = e->wait_spin_max_ns ? xtq__now_ns() : 0;
    int rc = engine_wait_until(e, comp_ready, comp_ready_progress, &c, &sleep, deadline);
    if (rc < 0)
        return rc;
    if (start) {
        /* What the next waits poll for (xtq__wait_spin_budget). */
        uint64_t est = atomic_load_explicit(&e->wait_est_ns, memory_order_relaxed);
        atomic_store_explicit(&e->wait_est_ns, xtq__wait_est_update(est, xtq__now_ns() - start),
                              memory_order_relaxed);
    }
    /* Woken by a wanted bit short of DONE: no status is final yet. */
    return atomic_load_explicit(c.st, memory_order_acquire) & XTQ_COMPLETION_DONE ? comp->status
                                                                                  : 0;
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

/* ---- flush --------------------------------------------------------------- */

/* Puts below snap[r - lo] to each rank r of [lo, hi) are DONE. */
struct flush_wait {
    struct xtq__engine *e;
    int lo, hi;
    const uint64_t *snap;
};

static bool flush_done(void *arg)
{
    struct flush_wait *f = arg;
    struct xtq__engine *e = f->e;
    bool done = true;
    xtq__mutex_lock(&e->put_lock);
    for (int r = f->lo; done && r < f->hi; r++) {
        struct peer *p = &e->peers[r];
        /* The oldest puts not DONE may be, by their targets' words
         * (notify.c): one look per put, oldest first, while they are. */
        while (p->done_below < f->snap[r - f->lo] && p->slots &&
               p->slots[p->done_below % e->window].seq == p->done_below &&
               slot_direct_locked(e, &p->slots[p->done_below % e->window]))
            ;
        done = p->done_below >= f->snap[r - f->lo];
    }
    pthread_mutex_unlock(&e->put_lock);
    return done;
}

static bool flush_done_progress(void *arg)
{
    struct flush_wait *f = arg;
    if (flush_done(f))
        return true;
    xtq__engine_progress(f->e);
    return flush_done(f);
}

int xtq__engine_flush(struct xtq__engine *e, int target, int64_t timeout_ns)
{
    int lo = target, hi = target + 1;
    uint64_t one, *snap = &one;
    int rc = 0;

    if (timeout_ns < 0)
        return -XTQ_EINVAL;
    if (target == XTQ_TARGET_ALL) {
        lo = 0;
        hi = e->ctx->size;
        snap = malloc((size_t)(hi - lo) * sizeof(*snap));
        if (!snap)
            return -XTQ_ENOMEM;
    } else if (target < 0 || target >= e->ctx->size) {
        return -XTQ_ESRCRANK;
    }
    /* What was issued before the call: every seq below next_seq. */
    xtq__mutex_lock(&e->put_lock);
    for (int r = lo; r < hi; r++)
        snap[r - lo] = e->peers[r].next_seq;
    pthread_mutex_unlock(&e->put_lock);

    /* Like a completion wait (a lone waiter included). Asleep, on the
     * window's word, which every DONE put's slot bumps when it frees
     * (slot_release); the 100 ms nap is only a safety net, as for a
     * completion. */
    struct flush_wait f = {e, lo, hi, snap};
    struct xtq__spin_wait sleep = {
        .ready = flush_done,
        .arg = &f,
        .word = &e->slot_freed,
        .waiters = &e->window_sleepers,
        .nap_ns = 100000000,
    };
    rc = engine_wait_until(e, flush_done, flush_done_progress, &f, &sleep,
                           deadline_after(timeout_ns));
    /* Their outcomes are in their completions and counters; a target
     * declared down is worth saying here too. */
    for (int r = lo; rc == 0 && r < hi; r++)
        if (atomic_load(&e->peers[r].down) && (target != XTQ_TARGET_ALL || snap[r - lo]))
            rc = -XTQ_EHOSTDOWN;
    if (snap != &one)
        free(snap);
    return rc;
}
