/*
 * Progress: one turn of the emulated NIC, and the thread that runs turns.
 *
 * A turn reposts receive regions, flushes queued acks, retries the backlog,
 * checks liveness and reads the CQ: send completions go to the initiator's
 * window (initiator.c), arrivals to the target path (target.c). Turns are
 * taken by the progress thread (placed with hwloc, polling for
 * XTQ_PROGRESS_SPIN_US before it blocks in wakeup.c), or by any thread that
 * waits (xtq_progress, completion waits, a full window); one at a time.
 * While another thread takes turns, the progress thread backs off
 * (XTQ_PROGRESS_BACKOFF_US).
 */
#include "internal.h"
#include "nic-emul/engine_int.h"
#include "bootstrap.h"

#include <hwloc.h>

/* Read the CQ until it is empty (*drained) or a sender wants the
 * endpoint (polite); returns the events handled. */
static int cq_poll(struct xtq__engine *e, bool polite, bool *drained)
{
    struct fi_cq_data_entry ent[16];
    fi_addr_t src[16];
    struct fi_cq_err_entry err;
    int n = 0;

    *drained = false;
    for (;;) {
        ssize_t got = xtq__ofi_cq_read(&e->ofi, ent, src, ARRAY_SIZE(ent), &err, polite);
        if (got == -FI_EBUSY)
            break;
        if (got == -FI_EAGAIN) {
            *drained = true;
            break;
        }
        if (got == -FI_EAVAIL) {
            uint32_t kind = err.op_context ? *(uint32_t *)err.op_context : 0;
            char buf[128] = "";
            fi_cq_strerror(e->ofi.cq, err.prov_errno, err.err_data, buf, sizeof(buf));
            if (kind == CTX_PUT) {
                struct put_slot *s = err.op_context;
                /* A connection reset or refused (tcp): the transport lets
                 * go of the message, which may or may not have arrived.
                 * LOCAL as if it left: the ASK finds out (acked, or
                 * MISSING: sent again, or failed knowing it did not run;
                 * initiator.c). A peer that is gone is declared down by
                 * the liveness timeout, not by one lost connection, which
                 * the transport replaces. rxm cancels (FI_ECANCELED) the
                 * sends queued on a connection its peer closed (a killed
                 * rank: multihost peer_death failed with -XTQ_EFABRIC for
                 * such a put, where -XTQ_EHOSTDOWN is the answer). */
                if (err.err == FI_ECONNRESET || err.err == FI_ECONNREFUSED ||
                    err.err == FI_ECONNABORTED || err.err == FI_ENOTCONN ||
                    err.err == FI_EHOSTUNREACH || err.err == FI_ECANCELED) {
                    XTQ_LOG_ONCE(OFI, WARN,
                                 "a put's connection to rank %d failed (%s); asking whether it "
                                 "arrived",
                                 s->target, fi_strerror(err.err));
                    xtq__slot_local(e, s, 0, 0);
                    n++;
                    continue;
                } else {
                    XTQ_LOG_ONCE(OFI, ERROR, "a put failed in the transport: %s (%s)",
                                 fi_strerror(err.err), buf);
                }
                xtq__slot_local(e, s, -XTQ_EFABRIC, err.prov_errno);
            } else if (kind == CTX_ACK) {
                xtq__ack_sent(e, err.op_context, err.err ? err.err : FI_EIO);
            } else if (kind == CTX_CTRL) {
                xtq__ctrl_recv(e, err.op_context, 0, FI_ADDR_NOTAVAIL, false);
            } else if (kind == CTX_REGION) {
                struct rx_region *r = err.op_context;
                XTQ_LOG_ONCE(OFI, ERROR, "receive error: %s (%s)", fi_strerror(err.err), buf);
                if (err.flags & FI_MULTI_RECV)
                    xtq__region_released(r, true);
            }
            n++;
            continue;
        }
        if (got < 0) {
            XTQ_LOG_ONCE(OFI, ERROR, "fi_cq_read: %s", fi_strerror((int)-got));
            return -XTQ_EFABRIC;
        }
        for (ssize_t i = 0; i < got; i++) {
            uint32_t kind = ent[i].op_context ? *(uint32_t *)ent[i].op_context : 0;
            if (kind == CTX_PUT) {
                xtq__slot_local(e, ent[i].op_context, 0, 0);
            } else if (kind == CTX_ACK) {
                xtq__ack_sent(e, ent[i].op_context, 0);
            } else if (kind == CTX_CTRL) {
                xtq__ctrl_recv(e, ent[i].op_context, ent[i].len, src[i], true);
            } else if (kind == CTX_REGION) {
                struct rx_region *r = ent[i].op_context;
                if ((ent[i].flags & FI_RECV) && ent[i].len) {
                    xtq__target_recv(e, r, ent[i].buf, ent[i].len, src[i]);
                    xtq__region_landed(r, ent[i].buf, ent[i].len);
                }
                if (ent[i].flags & FI_MULTI_RECV)
                    xtq__region_released(r, false);
            }
        }
        n += (int)got;
        if ((size_t)got < ARRAY_SIZE(ent)) {
            *drained = true;
            break;
        }
    }
    return n;
}

static int progress_locked(struct xtq__engine *e, bool polite)
{
    int n = 0, rc;
    bool drained;
    /* Puts that peers on this host wrote into our inbox (inbox.c): first,
     * before the transport's turn, which costs far more than this look. */
    n += xtq__inbox_poll(e);
    xtq__regions_repost(e);
    xtq__ctrl_repost(e);
    if (e->owner_only)
        n += xtq__txq_flush(e);
    n += xtq__acks_flush(e);
    n += xtq__backlog_drain(e);
    n += xtq__triggers_poll(e);
    xtq__puts_reask(e);
    rc = cq_poll(e, polite, &drained);
    if (rc < 0)
        return rc;
    n += rc;
    /* A GPU's finished tasks, retired (and acked) here rather than on the
     * agent's thread, which would pull every line of the task's state and
     * the endpoint's to its core and back (XTQ_AGENT_RETIRE). */
    n += xtq__agents_retire_poll(e->ctx);
    n += xtq__backlog_drain(e);
    /* Only once every arrival is read: a thread that did not run for a
     * while (a loaded host) finds its peers' answers waiting in the CQ,
     * and must not take its own silence for theirs. */
    if (drained) {
        uint64_t next = e->next_peer_check;
        xtq__peers_check(e);
        if (e->next_peer_check != next) /* its cadence: a few times a timeout */
            xtq__regions_stuck(e, xtq__now_ns(), e->peer_timeout_ns);
    }
    return n;
}

/* The engine whose progress thread this is (NULL on any other thread),
 * and the engine whose turn this thread is taking (NULL outside one). */
static _Thread_local struct xtq__engine *progress_thread_of;
static _Thread_local struct xtq__engine *turn_of;

bool xtq__engine_in_turn(const struct xtq__engine *e)
{
    return turn_of == e;
}

bool xtq__ctx_in_turn(const xtq_ctx_t *ctx)
{
    return turn_of && turn_of->ctx == ctx;
}

/* A thread other than the progress thread took a turn: the progress
 * thread backs off (progress_backoff). Stored a few times per back-off
 * rather than every turn, since the progress thread reads the line. */
static void app_turn_mark(struct xtq__engine *e)
{
    uint64_t now = xtq__now_ns();
    if (now - atomic_load_explicit(&e->app_turn_ns, memory_order_relaxed) > e->backoff_ns / 4)
        atomic_store_explicit(&e->app_turn_ns, now, memory_order_relaxed);
}

/* One turn. `polite`: the progress thread's busy poll, which leaves the
 * endpoint to a thread waiting to send rather than contend for it. */

static int engine_turn(struct xtq__engine *e, bool polite)
{
    int n;
    /* XTQ_ENDPOINT_OWNER=progress: the progress thread alone uses the
     * endpoint; a waiting thread leaves it alone (it woke the thread when
     * it queued work). */
    if (e->owner_only && progress_thread_of != e && e->thread_started)
        return 0;
    /* Another thread is progressing: that is progress too. */
    if (pthread_mutex_trylock(&e->progress_lock) != 0)
        return 0;
    /* A lone waiter has the turns (initiator.c): checked under the lock,
     * which the waiter takes once after it claims them. */
    if (progress_thread_of == e && atomic_load_explicit(&e->lone_waiter, memory_order_acquire)) {
        pthread_mutex_unlock(&e->progress_lock);
        return 0;
    }
    turn_of = e;
    n = progress_locked(e, polite);
    turn_of = NULL;
    pthread_mutex_unlock(&e->progress_lock);
    if (e->backoff_ns && progress_thread_of != e)
        app_turn_mark(e);
    return n;
}

/* A turn of `e`; with manual progress a turn of every plane of its
 * context, which has no thread to serve the others: whichever wait or
 * xtq_progress call turns the engine serves every peer. */
int xtq__engine_progress(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    if (!e->manual || ctx->nplanes <= 1)
        return engine_turn(e, false);
    int n = 0;
    for (unsigned j = 0; j < ctx->nplanes; j++) {
        struct xtq__engine *f = ctx->planes[j];
        if (!f)
            continue; /* still being created */
        int rc = engine_turn(f, false);
        if (rc < 0)
            return rc;
        n += rc;
    }
    return n;
}

void xtq__engine_poll_cb(void *engine)
{
    xtq__engine_progress(engine);
}

static void place_thread(struct xtq__engine *e)
{
    hwloc_topology_t topo;
    /* Further planes go where the scheduler puts them unless told: pinned
     * below the ranks' first threads, they would meet other ranks' ones on
     * a host with fewer cores than threads. */
    if (e->plane > 0 && e->progress_cpu < 0)
        return;
    if (hwloc_topology_init(&topo))
        return;
    /* The x86 backend binds to every PU to run cpuid: seconds on a busy
     * 2-core machine. The Linux backend knows enough to place a thread. */
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
    if (hwloc_topology_load(topo)) {
        hwloc_topology_destroy(topo);
        XTQ_LOG_ONCE(ENGINE, WARN, "hwloc topology unavailable; progress thread not pinned");
        return;
    }
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_obj_type_t type = ncores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = hwloc_get_nbobjs_by_type(topo, type);
    int want = e->progress_cpu;
    if (n > 0) {
        if (want >= 0) {
            want += (int)e->plane;
        } else {
            /* Last core, then backwards for further ranks on the host. */
            int lr = e->ctx->bootstrap ? e->ctx->bootstrap->local_rank : 0;
            want = n - 1 - (lr % n);
        }
        hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, (unsigned)(want % n));
        if (obj && hwloc_set_cpubind(topo, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0)
            XTQ_LOG_ONCE(ENGINE, WARN, "could not bind the progress thread to core %d", want);
        xtq_dbg(ENGINE, "progress thread on %s %d", hwloc_obj_type_string(type), want % n);
    }
    hwloc_topology_destroy(topo);
}

static bool lone_waiter_gone(void *arg)
{
    struct xtq__engine *e = arg;
    return !atomic_load_explicit(&e->lone_waiter, memory_order_acquire) ||
           atomic_load_explicit(&e->stop, memory_order_acquire);
}

/* While a lone waiter takes the turns and sleeps on the transport, the
 * progress thread stands aside: it polls the claim as long as it would
 * poll the CQ, then sleeps on it (the waiter wakes it when it leaves),
 * in naps of 10 ms. Whether it parked. */
static bool progress_park(struct xtq__engine *e)
{
    if (!atomic_load_explicit(&e->lone_waiter, memory_order_acquire))
        return false;
    struct xtq__spin_wait w = {
        .ready = lone_waiter_gone,
        .arg = e,
        .word = &e->lone_waiter,
        .waiters = &e->parked,
        .spin_ns = e->progress_spin_ns,
        .nap_ns = 10000000,
    };
    (void)xtq__spin_wait(&w, xtq__deadline_ns(10000000));
    return true;
}

/*
 * XTQ_PROGRESS_BACKOFF_US: an application thread took a turn less than
 * backoff_ns ago (it polls in a wait, or calls xtq_progress), so it is
 * progressing the engine itself and its next put follows soon. Polling
 * beside it, this thread would meet that put on the endpoint's locks and
 * on every line the two share (slots, window, CQ); it keeps off them
 * until backoff_ns has passed without such a turn, a kick or queued ack
 * asks for one, a lone waiter claims the turns, or the engine stops.
 * What arrives meanwhile waits for the application's next turn, or for
 * the back-off to end. Whether it backed off; a turn follows either way.
 */
static bool progress_backoff(struct xtq__engine *e)
{
    bool waited = false;
    for (;;) {
        uint64_t t = atomic_load_explicit(&e->app_turn_ns, memory_order_relaxed);
        /* A kick is taken here (progress_block would take it): the turn
         * that follows is the one it asked for. */
        if (xtq__now_ns() - t >= e->backoff_ns ||
            (atomic_load_explicit(&e->kick, memory_order_relaxed) &&
             atomic_exchange(&e->kick, 0)) ||
            atomic_load_explicit(&e->acks_pending, memory_order_relaxed) ||
            atomic_load_explicit(&e->lone_waiter, memory_order_relaxed) ||
            atomic_load_explicit(&e->stop, memory_order_relaxed))
            return waited;
        waited = true;
        for (int i = 0; i < 32; i++)
            xtq__cpu_relax();
    }
}

/*
 * XTQ_SHM_INBOX_POLL_NS: between two empty turns the progress thread
 * watches its inbox alone (a few lines it holds in its cache until a peer
 * writes one) for up to inbox_poll_ns, and takes the next turn as soon as
 * a message is there: an inbox put waits for that look, not for the end
 * of a transport poll. What the transport brings meanwhile waits up to
 * that long; so does a kick, an ack to flush and a GPU's completion,
 * which end the watch too.
 */
static void inbox_watch(struct xtq__engine *e, uint64_t now)
{
    const uint64_t until = now + e->inbox_poll_ns;
    for (unsigned i = 0;; i++) {
        if (xtq__inbox_pending(e) || atomic_load_explicit(&e->kick, memory_order_relaxed) ||
            atomic_load_explicit(&e->acks_pending, memory_order_relaxed) ||
            atomic_load_explicit(&e->stop, memory_order_relaxed))
            return;
        if ((i & 15) == 15 && xtq__now_ns() >= until)
            return;
        xtq__cpu_relax();
    }
}

/*
 * Spin, then block, like every wait in libxtq, but not through
 * xtq__spin_wait: each poll here is a whole turn of the transport (the
 * clock is read after every one, and the spin starts again after every
 * event), and the sleep is on what can wake a NIC (the CQ's fd, the
 * eventfd, or a doorbell futex shared between processes: wakeup.c), not on
 * one futex word of this process.
 */
static void *progress_main(void *arg)
{
    struct xtq__engine *e = arg;
    uint64_t spin_ns = e->progress_spin_ns;
    uint64_t last = xtq__now_ns();

    progress_thread_of = e;
    place_thread(e);
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        if (e->lone_waiter_on && progress_park(e)) {
            last = xtq__now_ns();
            continue;
        }
        if (e->backoff_ns && progress_backoff(e))
            last = xtq__now_ns(); /* then poll a whole spin before blocking */
        int n = engine_turn(e, true);
        uint64_t now = xtq__now_ns();
        if (n > 0) {
            last = now;
            continue;
        }
        if (now - last < spin_ns) {
            /* Leave the transport lock free a moment between empty polls:
             * the application and agent workers send on the same endpoint.
             * A GPU's completion words are looked at meanwhile (no
             * transport lock): between two turns, not only in them. */
            if (e->ctx->nretire_agents && xtq__agents_retire_poll(e->ctx) > 0) {
                last = xtq__now_ns();
                continue;
            }
            for (int i = 0; i < 4; i++)
                xtq__cpu_relax();
            if (e->inbox_poll_ns)
                inbox_watch(e, now);
            continue;
        }
        xtq__progress_block(e);
        last = xtq__now_ns() - spin_ns / 2; /* a short spin after each wake */
    }
    return NULL;
}

int xtq__engine_start(struct xtq__engine *e)
{
    if (e->manual)
        return 0;
    int rc = pthread_create(&e->thread, NULL, progress_main, e);
    if (rc) {
        xtq_err(ENGINE, "cannot start the progress thread: %s", strerror(rc));
        return -XTQ_ENOMEM;
    }
    /* By name, so that tools (and the benchmarks' CPU accounting) can tell
     * the emulated NIC from the application's threads. */
    pthread_setname_np(e->thread, "xtq-progress");
    e->thread_started = true;
    return 0;
}
