/*
 * The engine, being split by concern (engine_int.h lists the files). The
 * sections below move one by one into their own files.
 */
#include "nic-emul/engine_int.h"
#include "registry/registry.h"
#include "bootstrap.h"

#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

/* ==== target ==== */

/* ---- receive regions ---------------------------------------------------- */

static int region_post(struct rx_region *r)
{
    int rc = xtq__ofi_post_multi_recv(&r->e->ofi, r->buf, r->len, r);
    if (rc == -FI_EAGAIN) {
        atomic_store(&r->needs_post, 1);
        xtq__engine_wake(r->e);
        return 0;
    }
    if (rc) {
        XTQ_LOG_ONCE(OFI, ERROR, "posting a receive region failed: %s", fi_strerror(-rc));
        return -XTQ_EFABRIC;
    }
    return 0;
}

void xtq__region_put(struct rx_region *r)
{
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&r->refs, 1, memory_order_relaxed);
        if (!atomic_load(&r->e->stop))
            region_post(r);
    }
}

void xtq__regions_repost(struct xtq__engine *e)
{
    for (unsigned i = 0; i < e->nregions; i++)
        if (atomic_load(&e->regions[i].needs_post) && atomic_exchange(&e->regions[i].needs_post, 0))
            region_post(&e->regions[i]);
}

int xtq__regions_open(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    int rc;

    /* Each holds at least a couple of the largest messages so
     * FI_OPT_MIN_MULTI_RECV never starves it. */
    size_t rlen = xtq__param_size(XTQ__PARAM_XTQ_RX_BUFFER_SIZE);
    if (rlen < 2 * e->max_wire)
        rlen = 2 * e->max_wire;
    rlen = XTQ_ALIGN_UP(rlen, (size_t)4096);
    int64_t nr = xtq__param_int(XTQ__PARAM_XTQ_RX_BUFFERS);
    e->nregions = nr < 2 ? 2 : (unsigned)nr;
    e->regions = calloc(e->nregions, sizeof(*e->regions));
    if (!e->regions)
        return -XTQ_ENOMEM;
    for (unsigned i = 0; i < e->nregions; i++) {
        struct rx_region *r = &e->regions[i];
        r->kind = CTX_REGION;
        r->e = e;
        r->len = rlen;
        r->buf = aligned_alloc(4096, rlen);
        if (!r->buf)
            return -XTQ_ENOMEM;
        /* Agents read payloads and arguments from here in place: a region
         * a GPU cannot read would fault it at the first task. */
        for (unsigned a = 0; a < ctx->nagents; a++) {
            xtq_agent_t *ag = ctx->agents[a];
            if (ag->ops->mem_register && (rc = ag->ops->mem_register(ag, r->buf, r->len))) {
                xtq_err(ENGINE, "agent %s cannot map a receive region: %s", ag->info.name,
                        xtq_errname(rc));
                return rc;
            }
        }
        atomic_store(&r->refs, 1);
        rc = region_post(r);
        if (rc)
            return rc;
    }
    return 0;
}

/* After the endpoint is closed: nothing lands in them any more. */
void xtq__regions_close(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    for (unsigned i = 0; e->regions && i < e->nregions; i++) {
        if (!e->regions[i].buf)
            continue;
        for (unsigned a = 0; a < ctx->nagents; a++) {
            xtq_agent_t *ag = ctx->agents[a];
            if (ag->ops->mem_deregister)
                ag->ops->mem_deregister(ag, e->regions[i].buf, e->regions[i].len);
        }
        free(e->regions[i].buf);
    }
    free(e->regions);
    e->regions = NULL;
}

/* ---- tasks ---------------------------------------------------------------- */

static void task_reject(struct xtq__engine *e, struct rx_task *t, int err)
{
    xtq_ctx_t *ctx = e->ctx;
    int idx = -err - XTQ_ENOKERNEL;
    XTQ__STAT_INC(ctx, msgs_rejected);
    if (idx >= 0 && idx < (int)ARRAY_SIZE(ctx->stats.rejected_by_reason))
        atomic_fetch_add_explicit(&ctx->stats.rejected_by_reason[idx], 1, memory_order_relaxed);
    XTQ_LOG_ONCE(ENGINE, WARN, "rejected a command from rank %u (seq %llu): %s", t->src,
                 (unsigned long long)t->seq, xtq_errname(err));
    xtq__ack_send(e, (int)t->src, t->seq, err);
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
    /* After xtq__engine_stop() (finalize) the initiator is told nothing:
     * its put was failed with -XTQ_EFINALIZED or it drained already. */
    if ((t->wire_flags & XTQ__WIRE_REMOTE_COMPLETION) && !atomic_load(&e->stop))
        xtq__ack_send(e, (int)t->src, t->seq, status);
    live_del(e, t);
    XTQ__STAT_INC(e->ctx, tasks_completed);
    xtq__region_put(t->region);
    free(t);
    atomic_fetch_sub_explicit(&e->tasks_inflight, 1, memory_order_release);
    if (atomic_load_explicit(&e->backlog_len, memory_order_relaxed))
        xtq__engine_wake(e);
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
    uint64_t idx;
    int rc;

    pthread_rwlock_rdlock(&reg->lock);
    rc = xtq__rewrite(reg, &pkt, t->kernarg, t->kernarg_len, t->payload, t->payload_len, &q);
    if (rc)
        goto out;
    rc = xtq_queue_reserve(q, 1, &idx);
    if (rc)
        goto out;
    /* Capture what the ack needs: the task may retire (and be freed) on
     * another thread as soon as it is published. */
    uint32_t src = t->src, wflags = t->wire_flags;
    uint64_t seq = t->seq;
    /* Hints for the CUDA agent in fields HSA reserves (the rewrite left
     * them zero): the payload's length, to decide where the task reads it
     * (XTQ_CUDA_COPY_MIN), and the arguments' length, to fetch them before
     * the kernel object is looked up (checked against it there). */
    if (q->agent->kind == XTQ_AGENT_CUDA &&
        xtq_aql_header_type(pkt.header) == XTQ_PACKET_TYPE_KERNEL_DISPATCH) {
        pkt.kernel.reserved2 = t->payload_len;
        pkt.kernel.reserved0 = (uint16_t)t->kernarg_len;
    }
    xtq_aql_packet_t *slot = xtq_queue_slot(q, idx);
    memcpy((uint8_t *)slot + 4, (const uint8_t *)&pkt + 4, sizeof(pkt) - 4);
    if (q->retire != engine_retire)
        q->retire = engine_retire;
    q->cookies[idx & q->mask] = t;
    live_add(e, t);
    atomic_fetch_add_explicit(&e->tasks_inflight, 1, memory_order_relaxed);
    XTQ__STAT_INC(e->ctx, tasks_enqueued);
    uint16_t rest;
    memcpy(&rest, (const uint8_t *)&pkt + 2, sizeof(rest));
    xtq_queue_publish(q, idx, pkt.header, rest);
    XTQ_TRACE_POINT(XTQ_TRACE_ENQUEUED, XTQ_TRACE_KEY(src, seq));
    xtq_queue_ring_doorbell(q, idx);
    XTQ_TRACE_POINT(XTQ_TRACE_DOORBELL, XTQ_TRACE_KEY(src, seq));
    pthread_rwlock_unlock(&reg->lock);
    if (!(wflags & XTQ__WIRE_REMOTE_COMPLETION))
        xtq__ack_send(e, (int)src, seq, 0);
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
        free(t);
    }
}

/* ---- arrival ------------------------------------------------------------- */

static void handle_put(struct xtq__engine *e, struct rx_region *r, const struct xtq__wire_hdr *hdr,
                       const void *cmd, const void *payload)
{
    struct rx_task *t = malloc(sizeof(*t));
    XTQ__STAT_INC(e->ctx, msgs_received);
    XTQ_TRACE_POINT(XTQ_TRACE_ENGINE_RECV, XTQ_TRACE_KEY(hdr->src_rank, hdr->seq));
    if (!t) {
        XTQ_LOG_ONCE(ENGINE, ERROR, "out of memory for a task; rejecting");
        xtq__ack_send(e, (int)hdr->src_rank, hdr->seq, -XTQ_ENOMEM);
        return;
    }
    t->e = e;
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

void xtq__target_recv(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len)
{
    const struct xtq__wire_hdr *hdr = NULL;
    const void *cmd = NULL, *payload = NULL;
    xtq_ctx_t *ctx = e->ctx;
    int rc = xtq__wire_validate(buf, len, ctx->job_key, (uint32_t)ctx->size, e->max_msg, &hdr, &cmd,
                                &payload);
    if (rc) {
        const struct xtq__wire_hdr *raw = buf;
        int idx = -rc - XTQ_ENOKERNEL;
        XTQ__STAT_INC(ctx, msgs_rejected);
        if (idx >= 0 && idx < (int)ARRAY_SIZE(ctx->stats.rejected_by_reason))
            atomic_fetch_add_explicit(&ctx->stats.rejected_by_reason[idx], 1, memory_order_relaxed);
        XTQ_LOG_ONCE(ENGINE, WARN, "dropped an invalid message of %zu bytes: %s", len,
                     xtq_errname(rc));
        /* Answer only a peer of this job that we can name. */
        if (len >= sizeof(*raw) && raw->magic == XTQ_WIRE_MAGIC && raw->type == XTQ__MSG_PUT &&
            raw->job_key == ctx->job_key && raw->src_rank < (uint32_t)ctx->size)
            xtq__ack_send(e, (int)raw->src_rank, raw->seq, rc);
        return;
    }
    xtq__peer_heard(e, hdr->src_rank);
    if (xtq__probe_recv(e, hdr))
        ; /* liveness only */
    else if (hdr->type == XTQ__MSG_ACK)
        xtq__initiator_ack(e, hdr);
    else
        handle_put(e, r, hdr, cmd, payload);
}

/* ==== progress ==== */

static int cq_poll(struct xtq__engine *e, bool polite)
{
    struct fi_cq_data_entry ent[16];
    struct fi_cq_err_entry err;
    int n = 0;

    for (;;) {
        ssize_t got = xtq__ofi_cq_read(&e->ofi, ent, ARRAY_SIZE(ent), &err, polite);
        if (got == -FI_EAGAIN)
            break;
        if (got == -FI_EAVAIL) {
            uint32_t kind = err.op_context ? *(uint32_t *)err.op_context : 0;
            char buf[128] = "";
            fi_cq_strerror(e->ofi.cq, err.prov_errno, err.err_data, buf, sizeof(buf));
            if (kind == CTX_PUT) {
                struct put_slot *s = err.op_context;
                /* A connection the peer reset or refused (tcp) is the peer
                 * gone, seen before the liveness timeout: fail its puts the
                 * same way, -XTQ_EHOSTDOWN. */
                if (err.err == FI_ECONNRESET || err.err == FI_ECONNREFUSED ||
                    err.err == FI_ECONNABORTED || err.err == FI_ENOTCONN ||
                    err.err == FI_EHOSTUNREACH) {
                    xtq__peer_down(e, s->target, fi_strerror(err.err));
                } else {
                    XTQ_LOG_ONCE(OFI, ERROR, "a put failed in the transport: %s (%s)",
                                 fi_strerror(err.err), buf);
                }
                xtq__slot_local(e, s, -XTQ_EFABRIC, err.prov_errno);
            } else if (kind == CTX_REGION) {
                struct rx_region *r = err.op_context;
                XTQ_LOG_ONCE(OFI, ERROR, "receive error: %s (%s)", fi_strerror(err.err), buf);
                if (err.flags & FI_MULTI_RECV)
                    xtq__region_put(r);
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
            } else if (kind == CTX_REGION) {
                struct rx_region *r = ent[i].op_context;
                if ((ent[i].flags & FI_RECV) && ent[i].len)
                    xtq__target_recv(e, r, ent[i].buf, ent[i].len);
                if (ent[i].flags & FI_MULTI_RECV)
                    xtq__region_put(r);
            }
        }
        n += (int)got;
        if ((size_t)got < ARRAY_SIZE(ent))
            break;
    }
    return n;
}

static int progress_locked(struct xtq__engine *e, bool polite)
{
    int n = 0, rc;
    xtq__regions_repost(e);
    n += xtq__acks_flush(e);
    n += xtq__backlog_drain(e);
    xtq__peers_check(e);
    rc = cq_poll(e, polite);
    if (rc < 0)
        return rc;
    n += rc;
    n += xtq__backlog_drain(e);
    return n;
}

/* One turn. `polite`: the progress thread's busy poll, which leaves the
 * endpoint to a thread waiting to send rather than contend for it. */
static int engine_turn(struct xtq__engine *e, bool polite)
{
    int n;
    /* Another thread is progressing: that is progress too. */
    if (pthread_mutex_trylock(&e->progress_lock) != 0)
        return 0;
    n = progress_locked(e, polite);
    pthread_mutex_unlock(&e->progress_lock);
    return n;
}

int xtq__engine_progress(struct xtq__engine *e)
{
    return engine_turn(e, false);
}

void xtq__engine_poll_cb(void *engine)
{
    xtq__engine_progress(engine);
}

static void place_thread(struct xtq__engine *e)
{
    hwloc_topology_t topo;
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
        if (want < 0) {
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

static void *progress_main(void *arg)
{
    struct xtq__engine *e = arg;
    uint64_t spin_ns = e->progress_spin_ns;
    uint64_t last = xtq__now_ns();

    place_thread(e);
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        int n = engine_turn(e, true);
        uint64_t now = xtq__now_ns();
        if (n > 0) {
            last = now;
            continue;
        }
        if (now - last < spin_ns) {
            /* Leave the transport lock free a moment between empty polls:
             * the application and agent workers send on the same endpoint. */
            for (int i = 0; i < 4; i++)
                xtq__cpu_relax();
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
    e->thread_started = true;
    return 0;
}

/* ==== lifecycle ==== */

/* Free whatever create() got to; also the tail of destroy(). */
static void engine_free(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    if (e->ofi_open)
        xtq__ofi_close(&e->ofi);
    xtq__regions_close(e);
    for (int r = 0; e->peers && r < ctx->size; r++) {
        for (uint32_t i = 0; e->peers[r].slots && i < e->window; i++)
            free(e->peers[r].slots[i].stage);
        free(e->peers[r].slots);
    }
    free(e->peers);
    xtq__wakeup_close(e);
    pthread_mutex_destroy(&e->put_lock);
    pthread_mutex_destroy(&e->progress_lock);
    pthread_mutex_destroy(&e->ack_lock);
    xtq__live_free(e);
    pthread_mutex_destroy(&e->live_lock);
    free(e);
}

int xtq__engine_create(xtq_ctx_t *ctx, const char *provider, enum xtq_progress_mode mode,
                       struct xtq__engine **out)
{
    struct xtq__engine *e = calloc(1, sizeof(*e));
    struct xtq__bootstrap *bs = ctx->bootstrap;
    const size_t stride = XTQ__OFI_ADDR_MAX + sizeof(uint32_t);
    char *blob = NULL, *all = NULL;
    int rc;

    if (!e)
        return -XTQ_ENOMEM;
    e->ctx = ctx;
    e->manual = mode == XTQ_PROGRESS_MANUAL;
    e->wake_fd = -1;
    e->progress_cpu = (int)xtq__param_int(XTQ__PARAM_XTQ_PROGRESS_CPU);
    int64_t w = xtq__param_int(XTQ__PARAM_XTQ_PUT_WINDOW);
    e->window = w < 1 ? 1 : (w > 65536 ? 65536 : (uint32_t)w);
    e->max_msg = xtq__param_size(XTQ__PARAM_XTQ_MAX_MSG_SIZE);
    if (e->max_msg < XTQ_AQL_PACKET_SIZE)
        e->max_msg = XTQ_AQL_PACKET_SIZE;
    e->max_wire = XTQ_ALIGN_UP(e->max_msg + sizeof(struct xtq__wire_hdr) + 128, (size_t)64);
    int64_t pt = xtq__param_int(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS);
    e->peer_timeout_ns = pt > 0 ? (uint64_t)pt * 1000000ull : 0;
    unsigned local = (unsigned)ctx->bootstrap->local_size;
    e->wait_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_WAIT_SPIN_US, local, 50, 0);
    e->progress_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_PROGRESS_SPIN_US, local, 100, 20);
    /* Contended data-path locks poll as long as a waiter would. */
    atomic_store(&xtq__lock_spin_ns, e->wait_spin_ns);
    pthread_mutex_init(&e->put_lock, NULL);
    pthread_mutex_init(&e->progress_lock, NULL);
    pthread_mutex_init(&e->ack_lock, NULL);
    pthread_mutex_init(&e->live_lock, NULL);

    if (!provider || !*provider || strcmp(provider, "auto") == 0)
        provider = (bs->same_host) ? "shm" : "tcp";
    rc = xtq__ofi_open(&e->ofi, provider, e->max_wire);
    if (rc)
        goto err_engine;
    e->ofi_open = true;

    rc = xtq__wakeup_open(e, bs->same_host);
    if (rc)
        goto err_engine;

    /* Address exchange. */
    blob = calloc(1, stride);
    all = calloc((size_t)ctx->size, stride);
    if (!blob || !all) {
        rc = -XTQ_ENOMEM;
        goto err_engine;
    }
    size_t alen = XTQ__OFI_ADDR_MAX;
    rc = xtq__ofi_getname(&e->ofi, blob + sizeof(uint32_t), &alen);
    if (rc)
        goto err_engine;
    uint32_t alen32 = (uint32_t)alen;
    memcpy(blob, &alen32, sizeof(alen32));
    rc = xtq__bootstrap_allgather(bs, "xtq.addr", blob, stride, all);
    if (rc)
        goto err_engine;
    rc = xtq__ofi_insert(&e->ofi, all, stride, ctx->size);
    if (rc)
        goto err_engine;
    xtq__wakeup_connect(e);

    e->peers = calloc((size_t)ctx->size, sizeof(*e->peers));
    if (!e->peers) {
        rc = -XTQ_ENOMEM;
        goto err_engine;
    }
    for (int r = 0; r < ctx->size; r++) {
        e->peers[r].slots = calloc(e->window, sizeof(struct put_slot));
        if (!e->peers[r].slots) {
            rc = -XTQ_ENOMEM;
            goto err_engine;
        }
    }

    rc = xtq__regions_open(e);
    if (rc)
        goto err_engine;
    free(blob);
    free(all);
    xtq_info(ENGINE, "rank %d: engine on %s, %u regions of %zu bytes, window %u, %s progress",
             ctx->rank, e->ofi.prov_name, e->nregions, e->regions[0].len, e->window,
             e->manual ? "manual" : "thread");
    *out = e;
    return 0;

err_engine:
    free(blob);
    free(all);
    engine_free(e);
    return rc;
}

void xtq__engine_destroy(struct xtq__engine *e)
{
    if (!e)
        return;
    xtq__engine_stop(e);
    engine_free(e);
}

void xtq__engine_stop(struct xtq__engine *e)
{
    if (!e || e->stopped)
        return;
    e->stopped = true;
    atomic_store(&e->stop, true);
    if (e->thread_started) {
        xtq__wakeup_interrupt(e);
        pthread_join(e->thread, NULL);
    }
    /* Fail what never completed. */
    xtq__puts_fail_all(e, -XTQ_EFINALIZED);
    /* Backlogged commands never ran. */
    xtq__backlog_drop(e);
    xtq__acks_drop(e);
}

int xtq__engine_drain_tasks(struct xtq__engine *e, uint64_t deadline)
{
    while (atomic_load(&e->tasks_inflight) || atomic_load(&e->backlog_len) ||
           atomic_load(&e->acks_pending)) {
        if (xtq__now_ns() >= deadline)
            return -XTQ_ETIMEDOUT;
        if (e->manual || !e->thread_started) {
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        } else {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

const char *xtq__engine_provider(const struct xtq__engine *e)
{
    return e->ofi.prov_name;
}

size_t xtq__engine_max_put(const struct xtq__engine *e)
{
    return e->max_msg;
}

bool xtq__engine_manual(const struct xtq__engine *e)
{
    return e->manual;
}

int xtq__engine_getname(struct xtq__engine *e, void *addr, size_t *len)
{
    return xtq__ofi_getname(&e->ofi, addr, len);
}

int xtq__engine_retarget(struct xtq__engine *e, int rank, const void *addr)
{
    return xtq__ofi_retarget(&e->ofi, rank, addr);
}
