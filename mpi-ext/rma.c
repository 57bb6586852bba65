/*
 * The origin side of one-sided operations on accelerated windows.
 *
 * An operation becomes one XtqPut per chunk (a chunk fits the largest
 * put, xtq_put_max_size): the window's kernel at the target's queue for
 * this origin, the arguments of task.h, and a payload gathered from the
 * program's buffers without copying where the origin datatype is
 * contiguous. Every put asks for remote completion and is counted on the
 * window's counter; fetching puts name where their result lands (the
 * program's buffer, or a bounce buffer unpacked into a derived result
 * datatype when the epoch closes). Epoch calls (epoch.c) flush them.
 */
#include "xmpi.h"

#include <sys/uio.h>

#include <xtq/cuda.h>

/* Bound on bounce memory held per window before the layer flushes on its
 * own (MPI allows completing operations early). */
#define PENDING_LIMIT ((uint64_t)64 << 20)

struct op {
    int kind;
    struct xtq__mpi_win *w;
    int target;
    const void *obuf; /* operand (NULL for NO_OP and GET) */
    struct xtq__mpi_layout *ol;
    const void *cbuf; /* CAS compare */
    void *rbuf;       /* result (fetching kinds) */
    struct xtq__mpi_layout *rl;
    MPI_Aint tdisp;
    struct xtq__mpi_layout *tl;
    int xop, dt;
    size_t es;
    uint64_t nbytes;   /* data bytes (elements * es) */
    bool copy_operand; /* request forms: the request completes at once */
    bool wait;         /* request forms of fetching kinds: wait for results */
    struct xtq__mpi_pending *pend;
    uint64_t pend_bytes;
    xtq_completion_t **comps; /* each its own allocation: the engine holds them */
    size_t ncomps, capcomps;
};

struct spans {
    struct xtq__mpi_block *b;
    size_t n, cap;
    bool failed;
};

static void add_span(void *arg, int64_t off, uint64_t len)
{
    struct spans *s = arg;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct xtq__mpi_block *nb = realloc(s->b, cap * sizeof(*nb));
        if (!nb) {
            s->failed = true;
            return;
        }
        s->b = nb;
        s->cap = cap;
    }
    s->b[s->n].offset = (uint64_t)off; /* signed, rebased per chunk */
    s->b[s->n].count = len;            /* bytes here; elements on the wire */
    s->n++;
}

/* Every put's command, prefix, packed operand and bounce result. */
#define CMD_SPACE (XTQ_AQL_PACKET_SIZE + sizeof(struct xtq__mpi_args))
_Static_assert(CMD_SPACE % 16 == 0, "what follows the command stays 16-byte aligned");

struct xtq__mpi_pending *xtq__mpi_pending_new(int target, size_t len)
{
    struct xtq__mpi_pending *p = malloc(sizeof(*p) + len);
    if (!p)
        return NULL;
    memset(p, 0, sizeof(*p));
    p->target = target;
    p->len = len;
    return p;
}

void xtq__mpi_pending_add(struct xtq__mpi_win *w, struct xtq__mpi_pending *p)
{
    pthread_mutex_lock(&w->lock);
    p->next = w->pending;
    w->pending = p;
    w->pending_bytes += p->len;
    pthread_mutex_unlock(&w->lock);
}

static void add_pending(struct op *o, struct xtq__mpi_pending *p)
{
    o->pend_bytes += p->len;
    if (p->rbuf)
        atomic_fetch_add_explicit(&p->rl->refs, 1, memory_order_relaxed);
    p->next = o->pend;
    o->pend = p;
}

static void finish_pending(struct xtq__mpi_pending *p, bool unpack)
{
    if (unpack && p->rbuf)
        xtq__mpi_scatter(p->rbuf, p->rl, p->rfrom, p->rlen, p->data + p->roff);
    xtq__mpi_layout_put(p->rl);
    free(p);
}

/* Done with everything on the window's list for `target` (-1: all). */
void xtq__mpi_pending_done(struct xtq__mpi_win *w, int target);
void xtq__mpi_pending_done(struct xtq__mpi_win *w, int target)
{
    struct xtq__mpi_pending *done = NULL, **pp;

    pthread_mutex_lock(&w->lock);
    for (pp = &w->pending; *pp;) {
        struct xtq__mpi_pending *p = *pp;
        if (target < 0 || p->target == target) {
            *pp = p->next;
            p->next = done;
            done = p;
            w->pending_bytes -= p->len < w->pending_bytes ? p->len : w->pending_bytes;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&w->lock);
    while (done) {
        struct xtq__mpi_pending *n = done->next;
        finish_pending(done, true);
        done = n;
    }
}

static xtq_completion_t *new_comp(struct op *o)
{
    xtq_completion_t *c;

    if (o->ncomps == o->capcomps) {
        size_t cap = o->capcomps ? o->capcomps * 2 : 4;
        xtq_completion_t **nc = realloc(o->comps, cap * sizeof(*nc));
        if (!nc)
            return NULL;
        o->comps = nc;
        o->capcomps = cap;
    }
    c = calloc(1, sizeof(*c));
    if (c)
        o->comps[o->ncomps++] = c;
    return c;
}

int xtq__mpi_wait(xtq_completion_t *comp)
{
    return xtq_completion_wait(xtq__mpi.ctx, comp, XTQ_TIMEOUT_INFINITE);
}

/* Work-groups a GPU window's dispatch may have: the target processor's
 * blocks (XTQ_CUDA_BLOCKS, read here as the job's setting: ranks share
 * their environment). More groups than blocks run one after another
 * (xtq_cuda_stride_groups). */
static uint32_t gpu_groups(void)
{
    static _Atomic uint32_t cached;
    uint32_t n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n)
        return n;
    long b = strtol(xtq__mpi_param("XTQ_CUDA_BLOCKS"), NULL, 10);
    n = b > 0 && b <= 1024 ? (uint32_t)b : 2;
    atomic_store_explicit(&cached, n, memory_order_relaxed);
    return n;
}

/* Command for the window's kernel at the target's queue for this origin. */
static int build_cmd(const struct xtq__mpi_peer *p, uint32_t kindex,
                     const struct xtq__mpi_args *args, bool barrier, uint8_t *cmd, size_t *cmd_len)
{
    xtq_dispatch_geometry_t g = {1, {1, 1, 1}, {1, 1, 1}};
    int rc;

    /* The CUDA task's work-items stride over the elements, at most one
     * work-group per processor block, 8 elements or more per work-item. */
    if (p->gpu && kindex != 0) {
        uint32_t grid, wg;
        xtq_cuda_stride_geometry(args->count, 256, 8, gpu_groups(), &grid, &wg);
        g.grid[0] = grid;
        g.workgroup[0] = (uint16_t)wg; /* HSA: <= grid */
    }
    rc = xtq_cmd_kernel(cmd, XTQ_AQL_PACKET_SIZE + sizeof(*args), kindex, p->queue, &g, args,
                        sizeof(*args), cmd_len);
    if (rc == 0 && barrier) {
        /* The agent finishes this queue's earlier packets first (HSA's
         * barrier bit): one origin's accumulates stay in order. */
        uint16_t h;
        memcpy(&h, cmd, sizeof(h));
        h |= (uint16_t)(1u << XTQ_PACKET_HEADER_BARRIER);
        memcpy(cmd, &h, sizeof(h));
    }
    return rc;
}

/* One chunk: `nb` target blocks (bytes, relative offsets already), data
 * bytes [from, from + len) of the operation. */
static int send_chunk(struct op *o, uint64_t offset, uint64_t extent,
                      const struct xtq__mpi_block *blk, size_t nb, uint64_t from, uint64_t len)
{
    struct xtq__mpi_win *w = o->w;
    struct xtq__mpi_pending *pe;
    struct xtq__mpi_held h;
    struct iovec iov[3];
    size_t niov = 0, prefix = nb * sizeof(struct xtq__mpi_block), memlen;
    bool has_operand = o->obuf && o->kind != XTQ__MPI_GET;
    bool pack = has_operand && (!o->ol->contiguous || o->copy_operand);
    bool fetch = o->kind == XTQ__MPI_GET_ACC || o->kind == XTQ__MPI_CAS || o->kind == XTQ__MPI_GET;
    bool bounce = fetch && (!o->rl->contiguous);
    size_t poff = CMD_SPACE, doff = CMD_SPACE + prefix, roff = doff + (pack ? len : 0);
    uint8_t *mem;
    int rc;

    memlen = roff + (bounce ? len : 0);
    pe = xtq__mpi_pending_new(o->target, memlen);
    if (!pe)
        return -XTQ_ENOMEM;
    mem = pe->data;
    for (size_t i = 0; i < nb; i++) {
        struct xtq__mpi_block b = {blk[i].offset, blk[i].count / o->es};
        memcpy(mem + poff + i * sizeof(b), &b, sizeof(b));
    }
    if (prefix) {
        iov[niov].iov_base = mem + poff;
        iov[niov++].iov_len = prefix;
    }
    if (has_operand) {
        if (pack) {
            xtq__mpi_gather(o->obuf, o->ol, from, len, mem + doff);
            iov[niov].iov_base = mem + doff;
        } else {
            iov[niov].iov_base = (uint8_t *)(uintptr_t)o->obuf + from;
        }
        iov[niov++].iov_len = len;
    }
    if (o->kind == XTQ__MPI_CAS) {
        iov[niov].iov_base = (void *)(uintptr_t)o->cbuf;
        iov[niov++].iov_len = o->es;
    }

    memset(&h, 0, sizeof(h));
    h.args.target = offset;
    h.args.extent = extent;
    h.args.count = len / o->es;
    h.args.nblocks = (uint32_t)nb;
    h.args.kind = (uint8_t)o->kind;
    h.args.op = (uint8_t)o->xop;
    h.args.dtype = (uint8_t)o->dt;
    h.args.origin = (uint32_t)w->rank;
    h.args.magic = XTQ__MPI_MAGIC;
    h.pe = pe;
    memcpy(h.iov, iov, niov * sizeof(iov[0]));
    h.niov = niov;
    h.barrier = w->ordered && o->kind != XTQ__MPI_PUT && o->kind != XTQ__MPI_GET;
    h.bytes = has_operand ? len : 0;

    h.param.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER;
    h.param.flags = XTQ_PUT_REMOTE_COMPLETION;
    h.param.counter = w->counter;
    if (fetch) {
        h.param.field_mask |= XTQ_PUT_PARAM_FIELD_RESULT;
        h.param.result = bounce ? mem + roff : (uint8_t *)o->rbuf + from;
        h.param.result_len = len;
    }
    if (o->wait) {
        h.param.comp = new_comp(o);
        if (!h.param.comp) {
            rc = -XTQ_ENOMEM;
            goto fail;
        }
        h.param.field_mask |= XTQ_PUT_PARAM_FIELD_COMPLETION;
    }
    if (bounce) {
        pe->rl = o->rl;
        pe->rbuf = o->rbuf;
        pe->roff = roff;
        pe->rfrom = from;
        pe->rlen = len;
    }
    /* Sent now, or kept back by a lock epoch (its memory is the pending
     * record, which lives until the epoch's completion). */
    rc = xtq__mpi_emit(w, o->target, &h, o->wait);
    if (rc) {
        if (o->wait)
            free(o->comps[--o->ncomps]);
        goto fail;
    }
    add_pending(o, pe);
    return 0;
fail:
    free(pe);
    return rc;
}

int xtq__mpi_fire(struct xtq__mpi_win *w, int target, struct xtq__mpi_held *h, uint8_t flags,
                  xtq_completion_t *comp)
{
    const struct xtq__mpi_peer *p = &w->peer[target];
    xtq_put_param_t param = h->param;
    size_t cmd_len;
    int rc;

    /* A release waits in the queue behind this origin's earlier commands
     * (barrier bit) even where accumulate_ordering is none. */
    h->args.flags = flags;
    rc = build_cmd(p, w->kindex, &h->args, h->barrier || XTQ__MPI_F_RELEASE_TYPE(flags),
                   h->pe->data, &cmd_len);
    if (rc)
        return rc;
    if (comp) {
        param.field_mask &= ~(uint64_t)XTQ_PUT_PARAM_FIELD_COUNTER;
        param.field_mask |= XTQ_PUT_PARAM_FIELD_COMPLETION;
        param.counter = NULL;
        param.comp = comp;
    }
    rc = xtq_putv(xtq__mpi.ctx, p->xrank, h->pe->data, cmd_len, h->iov, h->niov, &param);
    if (rc)
        return rc;
    xtq__mpi_wcount(w, XTQ__MPI_S_XTQ_PUTS, 1);
    xtq__mpi_wcount(w, XTQ__MPI_S_BYTES, h->bytes);
    return 0;
}

/* Split the operation into chunks that fit one put each. */
static int issue(struct op *o)
{
    struct xtq__mpi_win *w = o->w;
    const struct xtq__mpi_peer *p = &w->peer[o->target];
    size_t max_put = xtq__mpi.max_put - (XTQ_AQL_PACKET_SIZE + sizeof(struct xtq__mpi_args));
    /* payload bytes per data byte: operand (and compare) */
    unsigned per = (o->kind == XTQ__MPI_GET || !o->obuf) ? 0 : (o->kind == XTQ__MPI_CAS ? 2 : 1);
    int64_t base;
    int rc = 0;

    /* Where the target datatype's origin is in the target's window (an
     * overflow sends an offset the target refuses). */
    if (__builtin_mul_overflow((int64_t)o->tdisp, (int64_t)p->disp_unit, &base))
        base = INT64_MIN / 2;

    if (o->tl->contiguous) {
        uint64_t step = per ? max_put / per : xtq__mpi.max_put;
        step -= step % o->es;
        for (uint64_t from = 0; from < o->nbytes && rc == 0; from += step) {
            uint64_t len = o->nbytes - from < step ? o->nbytes - from : step;
            rc = send_chunk(o, (uint64_t)(base + (int64_t)from), len, NULL, 0, from, len);
        }
        return rc;
    }

    struct spans s = {0};
    xtq__mpi_spans(o->tl, 0, o->nbytes, add_span, &s);
    if (s.failed) {
        free(s.b);
        return -XTQ_ENOMEM;
    }
    /* Greedy: whole spans while the prefix and data fit (and a fetch's
     * result); a span larger than a put is split at element boundaries. */
    bool fetch = o->kind == XTQ__MPI_GET_ACC || o->kind == XTQ__MPI_CAS || o->kind == XTQ__MPI_GET;
    uint64_t cap = fetch ? xtq__mpi.max_put : UINT64_MAX;
    uint64_t from = 0;
    for (size_t i = 0; i < s.n && rc == 0;) {
        size_t first = i, nb = 0;
        uint64_t len = 0, budget = max_put;
        struct xtq__mpi_block one;
        while (i < s.n) {
            uint64_t cost = sizeof(struct xtq__mpi_block) + s.b[i].count * per;
            if (cost > budget || len + s.b[i].count > cap)
                break;
            budget -= cost;
            len += s.b[i].count;
            nb++;
            i++;
        }
        const struct xtq__mpi_block *blk = &s.b[first];
        if (nb == 0) {
            uint64_t room = budget - sizeof(one);
            uint64_t take = per ? room / per : room;
            if (take > cap)
                take = cap;
            take -= take % o->es;
            if (take == 0)
                take = o->es;
            one.offset = s.b[i].offset;
            one.count = take;
            s.b[i].offset += take;
            s.b[i].count -= take;
            if (s.b[i].count == 0)
                i++;
            blk = &one;
            nb = 1;
            len = take;
        }
        /* Rebase the chunk's blocks on its lowest byte. */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (size_t k = 0; k < nb; k++) {
            int64_t off = (int64_t)blk[k].offset;
            lo = off < lo ? off : lo;
            hi = off + (int64_t)blk[k].count > hi ? off + (int64_t)blk[k].count : hi;
        }
        struct xtq__mpi_block *rb = malloc(nb * sizeof(*rb));
        if (!rb) {
            rc = -XTQ_ENOMEM;
            break;
        }
        for (size_t k = 0; k < nb; k++) {
            rb[k].offset = (uint64_t)((int64_t)blk[k].offset - lo);
            rb[k].count = blk[k].count;
        }
        rc = send_chunk(o, (uint64_t)(base + lo), (uint64_t)(hi - lo), rb, nb, from, len);
        free(rb);
        from += len;
    }
    free(s.b);
    return rc;
}

/* After issue: wait (request forms) or hand the pending memory to the
 * window, flushing early when it holds too much. */
static int conclude(struct op *o, int rc)
{
    struct xtq__mpi_win *w = o->w;
    uint64_t bytes;

    if (o->wait) {
        for (size_t i = 0; i < o->ncomps; i++) {
            int st = xtq__mpi_wait(o->comps[i]);
            if (st && !rc)
                rc = st;
            free(o->comps[i]);
        }
        while (o->pend) {
            struct xtq__mpi_pending *n = o->pend->next;
            finish_pending(o->pend, rc == 0);
            o->pend = n;
        }
        free(o->comps);
        return rc;
    }
    if (o->pend) {
        struct xtq__mpi_pending *last = o->pend;
        while (last->next)
            last = last->next;
        pthread_mutex_lock(&w->lock);
        last->next = w->pending;
        w->pending = o->pend;
        w->pending_bytes += o->pend_bytes;
        bytes = w->pending_bytes;
        pthread_mutex_unlock(&w->lock);
        o->pend = NULL;
        if (bytes > PENDING_LIMIT)
            xtq__mpi_complete(w, o->target);
    }
    return rc;
}

static void op_release(struct op *o)
{
    xtq__mpi_layout_put(o->ol);
    xtq__mpi_layout_put(o->tl);
    xtq__mpi_layout_put(o->rl);
}

/* Layouts and the element type; checks what MPI requires of the
 * arguments. Returns an MPI error class. */
static int prepare(struct op *o, const void *obuf, int ocount, MPI_Datatype otype, void *rbuf,
                   int rcount, MPI_Datatype rtype, int tcount, MPI_Datatype ttype, MPI_Op op)
{
    int err = MPI_SUCCESS;
    uint64_t tbytes;

    if (o->target < 0 || o->target >= o->w->size)
        return MPI_ERR_RANK;
    if (ocount < 0 || tcount < 0 || rcount < 0)
        return MPI_ERR_COUNT;
    o->tl = xtq__mpi_layout_get(ttype, &err);
    if (!o->tl)
        return err;
    tbytes = (uint64_t)tcount * o->tl->size;
    o->nbytes = tbytes;
    o->dt = o->tl->dt;
    if (o->kind == XTQ__MPI_PUT || o->kind == XTQ__MPI_GET) {
        o->dt = XTQ_DT_BYTE;
    } else {
        o->xop = xtq__mpi_op(op);
        if (o->xop < 0)
            return MPI_ERR_OP;
        /* REPLACE and NO_OP move bytes: any basic type will do. */
        if (o->dt == XTQ__MPI_DT_MIXED && (o->xop == XTQ_OP_REPLACE || o->xop == XTQ_OP_NO_OP))
            o->dt = XTQ_DT_BYTE;
        if (o->dt < 0)
            return MPI_ERR_TYPE;
        if (!xtq_reduce_supported((enum xtq_op)o->xop, (enum xtq_datatype)o->dt))
            return MPI_ERR_OP;
    }
    o->es = xtq_datatype_size((enum xtq_datatype)o->dt);
    if (o->kind != XTQ__MPI_GET &&
        !(o->xop == XTQ_OP_NO_OP && o->kind != XTQ__MPI_PUT && o->kind != XTQ__MPI_CAS)) {
        o->ol = xtq__mpi_layout_get(otype, &err);
        if (!o->ol)
            return err;
        if ((uint64_t)ocount * o->ol->size != tbytes)
            return MPI_ERR_COUNT;
        if (o->kind != XTQ__MPI_PUT && o->ol->dt != o->tl->dt)
            return MPI_ERR_TYPE;
        o->obuf = obuf;
    }
    if (o->kind == XTQ__MPI_GET_ACC || o->kind == XTQ__MPI_CAS || o->kind == XTQ__MPI_GET) {
        o->rl = xtq__mpi_layout_get(rtype, &err);
        if (!o->rl)
            return err;
        if ((uint64_t)rcount * o->rl->size != tbytes)
            return MPI_ERR_COUNT;
        o->rbuf = rbuf;
    }
    return MPI_SUCCESS;
}

/* A request that is complete already (the layer finished the operation,
 * or its local part, before returning). */
static int done_query(void *extra, MPI_Status *st)
{
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

static int done_free(void *extra)
{
    return MPI_SUCCESS;
}

static int done_cancel(void *extra, int complete)
{
    return MPI_SUCCESS;
}

static int done_request(MPI_Request *req)
{
    int rc = PMPI_Grequest_start(done_query, done_free, done_cancel, NULL, req);
    if (rc == MPI_SUCCESS)
        rc = PMPI_Grequest_complete(*req);
    return rc;
}

/* Run one operation; `req` non-NULL for the request forms. */
static int run(struct op *o, MPI_Request *req)
{
    int rc;

    if (req) {
        o->copy_operand = true;
        o->wait = o->kind == XTQ__MPI_GET_ACC || o->kind == XTQ__MPI_CAS || o->kind == XTQ__MPI_GET;
    }
    rc = issue(o);
    rc = conclude(o, rc);
    op_release(o);
    if (rc) {
        if (rc < 0) {
            xmpi_log(WARN, "%s on window %u to rank %d failed: %s", "operation", o->w->kindex,
                     o->target, xtq_errname(rc));
            rc = xtq__mpi_errclass(rc);
        }
        return xtq__mpi_win_error(o->w, rc);
    }
    return req ? done_request(req) : MPI_SUCCESS;
}

/* What the CUDA task runs: accumulates and puts of the types that have a
 * GPU type (no long double). Results from the CUDA agent need a result
 * buffer the API contract does not give CUDA tasks yet. */
static bool gpu_supported(const struct op *o)
{
    if (o->kind != XTQ__MPI_ACC && o->kind != XTQ__MPI_PUT)
        return false;
    return o->dt != XTQ_DT_LONG_DOUBLE && o->dt != XTQ_DT_C_LONG_DOUBLE_COMPLEX &&
           o->dt != XTQ_DT_LONG_DOUBLE_INT;
}

static int proc_null(MPI_Request *req)
{
    return req ? done_request(req) : MPI_SUCCESS;
}

static int accumulate(const void *obuf, int ocount, MPI_Datatype otype, void *rbuf, int rcount,
                      MPI_Datatype rtype, int target, MPI_Aint tdisp, int tcount,
                      MPI_Datatype ttype, MPI_Op op, struct xtq__mpi_win *w, int kind,
                      MPI_Request *req)
{
    struct op o;
    int rc;

    if (target == MPI_PROC_NULL)
        return proc_null(req);
    memset(&o, 0, sizeof(o));
    o.kind = kind;
    o.w = w;
    o.target = target;
    o.tdisp = tdisp;
    rc = prepare(&o, obuf, ocount, otype, rbuf, rcount, rtype, tcount, ttype, op);
    if (rc != MPI_SUCCESS) {
        op_release(&o);
        return xtq__mpi_win_error(w, rc);
    }
    if (o.nbytes == 0) {
        op_release(&o);
        return proc_null(req);
    }
    if (w->peer[target].gpu && !gpu_supported(&o)) {
        op_release(&o);
        xmpi_warn_once("fetching operations, MPI_Get and long double types are not supported "
                       "on windows in GPU memory yet (docs/mpi.md)");
        return xtq__mpi_win_error(w, MPI_ERR_UNSUPPORTED_OPERATION);
    }
    xtq__mpi_wcount(w,
                    kind == XTQ__MPI_ACC   ? XTQ__MPI_S_ACC
                    : kind == XTQ__MPI_PUT ? XTQ__MPI_S_PUT_XTQ
                    : kind == XTQ__MPI_GET ? XTQ__MPI_S_GET_XTQ
                                           : XTQ__MPI_S_FETCH,
                    1);
    return run(&o, req);
}

/* ---- accumulates ------------------------------------------------------------------- */

XMPI_EXPORT int MPI_Accumulate(const void *origin_addr, int origin_count,
                               MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp,
                               int target_count, MPI_Datatype target_datatype, MPI_Op op,
                               MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Accumulate(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                               target_count, target_datatype, op, win);
    if (op == MPI_NO_OP) /* for the fetching calls only (MPI 11.3.4) */
        return xtq__mpi_win_error(w, MPI_ERR_OP);
    return accumulate(origin_addr, origin_count, origin_datatype, NULL, 0, MPI_DATATYPE_NULL,
                      target_rank, target_disp, target_count, target_datatype, op, w, XTQ__MPI_ACC,
                      NULL);
}

XMPI_EXPORT int MPI_Raccumulate(const void *origin_addr, int origin_count,
                                MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp,
                                int target_count, MPI_Datatype target_datatype, MPI_Op op,
                                MPI_Win win, MPI_Request *request)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Raccumulate(origin_addr, origin_count, origin_datatype, target_rank,
                                target_disp, target_count, target_datatype, op, win, request);
    if (op == MPI_NO_OP)
        return xtq__mpi_win_error(w, MPI_ERR_OP);
    return accumulate(origin_addr, origin_count, origin_datatype, NULL, 0, MPI_DATATYPE_NULL,
                      target_rank, target_disp, target_count, target_datatype, op, w, XTQ__MPI_ACC,
                      request);
}

XMPI_EXPORT int MPI_Get_accumulate(const void *origin_addr, int origin_count,
                                   MPI_Datatype origin_datatype, void *result_addr,
                                   int result_count, MPI_Datatype result_datatype, int target_rank,
                                   MPI_Aint target_disp, int target_count,
                                   MPI_Datatype target_datatype, MPI_Op op, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Get_accumulate(origin_addr, origin_count, origin_datatype, result_addr,
                                   result_count, result_datatype, target_rank, target_disp,
                                   target_count, target_datatype, op, win);
    return accumulate(origin_addr, origin_count, origin_datatype, result_addr, result_count,
                      result_datatype, target_rank, target_disp, target_count, target_datatype, op,
                      w, XTQ__MPI_GET_ACC, NULL);
}

XMPI_EXPORT int MPI_Rget_accumulate(const void *origin_addr, int origin_count,
                                    MPI_Datatype origin_datatype, void *result_addr,
                                    int result_count, MPI_Datatype result_datatype, int target_rank,
                                    MPI_Aint target_disp, int target_count,
                                    MPI_Datatype target_datatype, MPI_Op op, MPI_Win win,
                                    MPI_Request *request)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Rget_accumulate(origin_addr, origin_count, origin_datatype, result_addr,
                                    result_count, result_datatype, target_rank, target_disp,
                                    target_count, target_datatype, op, win, request);
    return accumulate(origin_addr, origin_count, origin_datatype, result_addr, result_count,
                      result_datatype, target_rank, target_disp, target_count, target_datatype, op,
                      w, XTQ__MPI_GET_ACC, request);
}

XMPI_EXPORT int MPI_Fetch_and_op(const void *origin_addr, void *result_addr, MPI_Datatype datatype,
                                 int target_rank, MPI_Aint target_disp, MPI_Op op, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Fetch_and_op(origin_addr, result_addr, datatype, target_rank, target_disp, op,
                                 win);
    return accumulate(origin_addr, 1, datatype, result_addr, 1, datatype, target_rank, target_disp,
                      1, datatype, op, w, XTQ__MPI_GET_ACC, NULL);
}

XMPI_EXPORT int MPI_Compare_and_swap(const void *origin_addr, const void *compare_addr,
                                     void *result_addr, MPI_Datatype datatype, int target_rank,
                                     MPI_Aint target_disp, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    struct op o;
    int rc;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Compare_and_swap(origin_addr, compare_addr, result_addr, datatype, target_rank,
                                     target_disp, win);
    if (target_rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    memset(&o, 0, sizeof(o));
    o.kind = XTQ__MPI_CAS;
    o.w = w;
    o.target = target_rank;
    o.tdisp = target_disp;
    rc = prepare(&o, origin_addr, 1, datatype, result_addr, 1, datatype, 1, datatype, MPI_REPLACE);
    if (rc == MPI_SUCCESS && o.tl->nblocks != 1)
        rc = MPI_ERR_TYPE;
    if (rc != MPI_SUCCESS) {
        op_release(&o);
        return xtq__mpi_win_error(w, rc);
    }
    /* Compared bitwise on the target; the type only sets the width. */
    o.dt = XTQ_DT_BYTE;
    o.cbuf = compare_addr;
    {
        /* CAS moves one element of `es` bytes: the task sees it as bytes
         * of one element of a type that wide. */
        static const int by_width[17] = {[1] = XTQ_DT_UINT8,
                                         [2] = XTQ_DT_UINT16,
                                         [4] = XTQ_DT_UINT32,
                                         [8] = XTQ_DT_UINT64,
                                         [16] = XTQ_DT_C_DOUBLE_COMPLEX};
        size_t es = o.tl->size;
        if (es > 16 || !by_width[es]) {
            op_release(&o);
            return xtq__mpi_win_error(w, MPI_ERR_TYPE);
        }
        o.dt = by_width[es];
        o.es = es;
    }
    xtq__mpi_wcount(w, XTQ__MPI_S_FETCH, 1);
    return run(&o, NULL);
}

/* ---- put and get ---------------------------------------------------------------------- */

/* The MPI's own put/get on an accelerated window: inside a lock epoch
 * the layer's lock is taken first (it is taken lazily, with the first
 * accumulate), and the MPI's operation is completed at the epoch's close.
 * Returns an MPI error code (raised already). */
static int mark_mpi(struct xtq__mpi_win *w, int target)
{
    int rc;

    if (target < 0 || target >= w->size)
        return MPI_SUCCESS; /* the MPI judges the rank */
    rc = xtq__mpi_epoch_need_lock(w, target);
    if (rc)
        return xtq__mpi_win_error(w, xtq__mpi_errclass(rc));
    pthread_mutex_lock(&w->lock);
    w->peer[target].mpi_dirty = 1;
    w->any_mpi_dirty = true;
    pthread_mutex_unlock(&w->lock);
    xtq__mpi_wcount(w, XTQ__MPI_S_RMA_MPI, 1);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Put(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                        int target_rank, MPI_Aint target_disp, int target_count,
                        MPI_Datatype target_datatype, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w) || !w->put_get_xtq) {
        if (w && w->accelerated) {
            int rc = mark_mpi(w, target_rank);
            if (rc != MPI_SUCCESS)
                return rc;
        }
        return PMPI_Put(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                        target_count, target_datatype, win);
    }
    return accumulate(origin_addr, origin_count, origin_datatype, NULL, 0, MPI_DATATYPE_NULL,
                      target_rank, target_disp, target_count, target_datatype, MPI_REPLACE, w,
                      XTQ__MPI_PUT, NULL);
}

XMPI_EXPORT int MPI_Rput(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                         int target_rank, MPI_Aint target_disp, int target_count,
                         MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w) || !w->put_get_xtq) {
        if (w && w->accelerated) {
            int rc = mark_mpi(w, target_rank);
            if (rc != MPI_SUCCESS)
                return rc;
        }
        return PMPI_Rput(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                         target_count, target_datatype, win, request);
    }
    return accumulate(origin_addr, origin_count, origin_datatype, NULL, 0, MPI_DATATYPE_NULL,
                      target_rank, target_disp, target_count, target_datatype, MPI_REPLACE, w,
                      XTQ__MPI_PUT, request);
}

XMPI_EXPORT int MPI_Get(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                        int target_rank, MPI_Aint target_disp, int target_count,
                        MPI_Datatype target_datatype, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w) || !w->put_get_xtq) {
        if (w && w->accelerated) {
            int rc = mark_mpi(w, target_rank);
            if (rc != MPI_SUCCESS)
                return rc;
        }
        return PMPI_Get(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                        target_count, target_datatype, win);
    }
    return accumulate(NULL, 0, MPI_DATATYPE_NULL, origin_addr, origin_count, origin_datatype,
                      target_rank, target_disp, target_count, target_datatype, MPI_NO_OP, w,
                      XTQ__MPI_GET, NULL);
}

XMPI_EXPORT int MPI_Rget(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                         int target_rank, MPI_Aint target_disp, int target_count,
                         MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w) || !w->put_get_xtq) {
        if (w && w->accelerated) {
            int rc = mark_mpi(w, target_rank);
            if (rc != MPI_SUCCESS)
                return rc;
        }
        return PMPI_Rget(origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                         target_count, target_datatype, win, request);
    }
    return accumulate(NULL, 0, MPI_DATATYPE_NULL, origin_addr, origin_count, origin_datatype,
                      target_rank, target_disp, target_count, target_datatype, MPI_NO_OP, w,
                      XTQ__MPI_GET, request);
}

/* ---- window locks (the sync task, kernel index 0) ---------------------------------- */

int xtq__mpi_sync_op(struct xtq__mpi_win *w, int target, int kind, int type, uint64_t *granted,
                     xtq_completion_t *comp)
{
    struct xtq__mpi_peer cpu_peer = w->peer[target];
    struct xtq__mpi_pending *pe;
    struct xtq__mpi_args args;
    xtq_put_param_t param;
    size_t cmd_len;
    int rc;

    /* Locks live on the host: the sync task runs on the CPU agent, in the
     * queue this origin's CPU accumulates use (the barrier bit then keeps
     * an unlock behind them). The command lives until the put is done. */
    cpu_peer.gpu = 0;
    cpu_peer.queue = (uint32_t)xtq__mpi.xrank % xtq__mpi.nq;
    pe = xtq__mpi_pending_new(target, CMD_SPACE);
    if (!pe)
        return -XTQ_ENOMEM;
    memset(&args, 0, sizeof(args));
    args.count = w->kindex; /* which window */
    args.kind = (uint8_t)kind;
    args.op = (uint8_t)type;
    args.origin = (uint32_t)w->rank;
    args.magic = XTQ__MPI_MAGIC;
    rc = build_cmd(&cpu_peer, 0, &args, kind == XTQ__MPI_UNLOCK, pe->data, &cmd_len);
    if (rc) {
        free(pe);
        return rc;
    }
    memset(&param, 0, sizeof(param));
    param.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS;
    param.flags = XTQ_PUT_REMOTE_COMPLETION;
    if (comp) {
        param.field_mask |= XTQ_PUT_PARAM_FIELD_COMPLETION;
        param.comp = comp;
    } else {
        param.field_mask |= XTQ_PUT_PARAM_FIELD_COUNTER;
        param.counter = w->counter;
    }
    if (granted) {
        *granted = 0;
        param.field_mask |= XTQ_PUT_PARAM_FIELD_RESULT;
        param.result = granted;
        param.result_len = sizeof(*granted);
    }
    rc = xtq_putv(xtq__mpi.ctx, cpu_peer.xrank, pe->data, cmd_len, NULL, 0, &param);
    if (rc) {
        free(pe);
        return rc;
    }
    xtq__mpi_wcount(w, XTQ__MPI_S_XTQ_PUTS, 1);
    xtq__mpi_wcount(w, XTQ__MPI_S_LOCK_PUTS, 1);
    xtq__mpi_pending_add(w, pe);
    return 0;
}
