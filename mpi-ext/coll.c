/*
 * MPI_Allreduce, MPI_Reduce, MPI_Iallreduce and MPI_Ireduce routed to
 * libxtq_coll (apps/allreduce, <xtq/coll.h>): reductions as schedules of
 * XtqPuts whose tasks reduce each piece on the receiver's agent.
 *
 * A call is routed when libxtq is up, the communicator is an
 * intracommunicator of two or more ranks of MPI_COMM_WORLD, the operation
 * is predefined and libxtq_coll reduces it on the datatype (one predefined
 * type, or contiguous copies of one), and the vector holds at least
 * XTQ_MPI_COLL_MIN bytes. Everything else goes to PMPI unchanged, and is
 * counted by reason (XTQ_MPI_STATS).
 *
 * Those conditions hold on every rank or on none (they depend on the
 * call's signature, which MPI requires to match). What may differ between
 * ranks (where the buffer lives, a datatype laid out differently for the
 * same signature, a team that could not be made) is agreed: a blocking
 * call first reduces a small vector of its arguments over the
 * communicator (one PMPI_Allreduce, against a megabyte by default), so
 * either every rank routes or none does, and ranks that disagree on count,
 * type, operation or root all get an error instead of a hang. Nonblocking
 * calls agree only when they make the team (their first call on the
 * communicator); after that a mismatch is caught by libxtq_coll itself
 * (-XTQ_EPROTO on every rank) at the request's completion.
 *
 * One team per communicator and memory kind, made at the first routed
 * call and cached on the communicator: destroyed when the communicator is
 * freed and at MPI_Finalize. Its table index is agreed like a window's.
 * A device buffer goes to a CUDA team whose task lives in the layer's own
 * CUDA module (one module per agent; xtq_coll_team_attr_t.cuda_task).
 *
 * Nonblocking calls return a generalized request; the layer's
 * MPI_Wait/Test family completes it once libxtq_coll has (the layer's
 * threads never call MPI).
 */
#include "xmpi.h"

#ifndef XTQ_MPI_NO_COLL

#include <inttypes.h>
#include <strings.h>
#include <time.h>

#include <xtq/coll.h>

/* X(id, text) */
#define XTQ__MPI_COLL_REASONS(X)                                                                   \
    X(ROUTED, "routed to libxtq_coll")                                                             \
    X(LAYER_OFF, "libxtq is not up (XTQ_MPI=off, or start-up failed)")                             \
    X(COLL_OFF, "XTQ_MPI_COLL=off")                                                                \
    X(SMALL, "below XTQ_MPI_COLL_MIN bytes")                                                       \
    X(COMM, "intercommunicator, one rank, or ranks outside MPI_COMM_WORLD")                        \
    X(OP, "user-defined operation, or one libxtq_coll does not reduce on the type")                \
    X(TYPE, "datatype not contiguous elements of one predefined type")                             \
    X(BUFFER, "buffers in GPU memory without a CUDA agent, or in host and GPU memory")             \
    X(ARGS, "arguments the MPI must judge (root, MPI_IN_PLACE)")                                   \
    X(PEER, "another rank could not route the call")                                               \
    X(TEAM, "no libxtq_coll team for the communicator")                                            \
    X(MISMATCH, "ranks disagreed on count, type, operation or root (an error on every rank)")

#define R_ENUM_(id, text) R_##id,
enum reason { XTQ__MPI_COLL_REASONS(R_ENUM_) R_COUNT };
#undef R_ENUM_
#define R_TEXT_(id, text) text,
static const char *const reason_text[] = {XTQ__MPI_COLL_REASONS(R_TEXT_)};
#undef R_TEXT_

enum kind { K_ALLREDUCE, K_REDUCE, K_IALLREDUCE, K_IREDUCE, K_COUNT };
static const char *const kind_name[] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Iallreduce",
                                        "MPI_Ireduce"};

enum { MEM_HOST, MEM_CUDA, MEM_COUNT };

/* The layer's state for one communicator (an attribute on it). */
struct xcomm {
    struct xcomm *next;  /* every live one, for MPI_Finalize */
    MPI_Comm comm;       /* the program's handle */
    enum reason refused; /* R_ROUTED: usable; else why never */
    int rank, size;
    int *xranks; /* world rank of each member */
    xtq_coll_team_t *team[MEM_COUNT];
    uint32_t index[MEM_COUNT];
    bool broken[MEM_COUNT]; /* a call failed: destroy and remake at the next call */
    int inflight;           /* requests not completed */
};

/* A nonblocking call in flight: a generalized request of the MPI. */
struct xreq {
    struct xreq *next;
    MPI_Request greq;
    xtq_coll_req_t *creq;
    struct xcomm *xc;
    int code;   /* MPI error code once done */
    bool done;  /* completed (MPI_Grequest_complete called) */
    bool freed; /* the MPI freed the request before it was done */
};

static struct {
    bool off;
    uint64_t min_bytes;
    int keyval;
    pthread_mutex_t lock; /* comms, reqs */
    struct xcomm *comms;
    struct xreq *reqs; /* not yet done */
    _Atomic int nreqs;
    _Atomic uint64_t calls[K_COUNT][R_COUNT];
    _Atomic uint64_t bytes[K_COUNT];
    _Atomic uint64_t errors;
} C = {.keyval = MPI_KEYVAL_INVALID, .lock = PTHREAD_MUTEX_INITIALIZER};

static void count(enum kind k, enum reason r)
{
    atomic_fetch_add_explicit(&C.calls[k][r], 1, memory_order_relaxed);
}

/* ---- teams -------------------------------------------------------------------------- */

static int wait_req(struct xreq *x, bool block);

static void team_destroy(struct xcomm *xc, int mem)
{
    if (!xc->team[mem])
        return;
    int rc = xtq_coll_team_destroy(xc->team[mem]);
    if (rc)
        xmpi_log(WARN, "destroying the collective team of a communicator: %s", xtq_errname(rc));
    xtq__mpi_release_index(xc->index[mem]);
    xc->team[mem] = NULL;
    xc->broken[mem] = false;
}

/* Complete this communicator's requests (collective: no request may be
 * in flight when its team is destroyed). */
static void drain(struct xcomm *xc)
{
    for (;;) {
        struct xreq *x;
        pthread_mutex_lock(&C.lock);
        for (x = C.reqs; x && x->xc != xc; x = x->next)
            ;
        pthread_mutex_unlock(&C.lock);
        if (!x)
            return;
        wait_req(x, true);
    }
}

static void xcomm_free(struct xcomm *xc)
{
    drain(xc);
    for (int m = 0; m < MEM_COUNT; m++)
        team_destroy(xc, m);
    pthread_mutex_lock(&C.lock);
    for (struct xcomm **p = &C.comms; *p; p = &(*p)->next)
        if (*p == xc) {
            *p = xc->next;
            break;
        }
    pthread_mutex_unlock(&C.lock);
    free(xc->xranks);
    free(xc);
}

/* MPI_Comm_free (collective): the team goes with the communicator. */
static int comm_attr_delete(MPI_Comm comm, int keyval, void *val, void *extra)
{
    (void)comm, (void)keyval, (void)extra;
    xcomm_free(val);
    return MPI_SUCCESS;
}

/* The layer's record of `comm`, made at its first call (local work only). */
static struct xcomm *xcomm_get(MPI_Comm comm)
{
    struct xcomm *xc;
    MPI_Group g;
    int flag = 0, inter = 0, *mine;
    void *val;

    if (PMPI_Comm_get_attr(comm, C.keyval, &val, &flag) == MPI_SUCCESS && flag)
        return val;
    xc = calloc(1, sizeof(*xc));
    if (!xc)
        return NULL;
    xc->comm = comm;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &xc->rank);
    PMPI_Comm_size(comm, &xc->size);
    if (inter || xc->size < 2) {
        xc->refused = R_COMM;
    } else {
        xc->xranks = malloc((size_t)xc->size * sizeof(int));
        mine = malloc((size_t)xc->size * sizeof(int));
        if (!xc->xranks || !mine) {
            free(mine);
            free(xc->xranks);
            free(xc);
            return NULL;
        }
        for (int i = 0; i < xc->size; i++)
            mine[i] = i;
        PMPI_Comm_group(comm, &g);
        PMPI_Group_translate_ranks(g, xc->size, mine, xtq__mpi.world_group, xc->xranks);
        PMPI_Group_free(&g);
        free(mine);
        for (int i = 0; i < xc->size; i++)
            if (xc->xranks[i] == MPI_UNDEFINED)
                xc->refused = R_COMM;
    }
    if (PMPI_Comm_set_attr(comm, C.keyval, xc) != MPI_SUCCESS) {
        free(xc->xranks);
        free(xc);
        return NULL;
    }
    pthread_mutex_lock(&C.lock);
    xc->next = C.comms;
    C.comms = xc;
    pthread_mutex_unlock(&C.lock);
    return xc;
}

static bool all_true(MPI_Comm comm, bool mine)
{
    int v = mine, all = 0;
    PMPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, comm);
    return all != 0;
}

/* Make the team of `mem` (collective over the communicator). */
static int team_make(struct xcomm *xc, int mem)
{
    xtq_coll_team_attr_t attr;
    uint32_t index = 0;
    int rc;

    memset(&attr, 0, sizeof(attr));
    rc = xtq__mpi_choose_index(xc->comm, true, &index);
    if (rc) {
        xmpi_log(WARN, "no table index free for a collective team: %s", xtq_errname(rc));
        return rc;
    }
    attr.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_RANKS | XTQ_COLL_TEAM_ATTR_FIELD_MEM |
                      XTQ_COLL_TEAM_ATTR_FIELD_INDEX;
    attr.ranks = xc->xranks;
    attr.nranks = xc->size;
    attr.mem = mem == MEM_CUDA ? XTQ_COLL_MEM_CUDA : XTQ_COLL_MEM_HOST;
    attr.index = index;
    if (mem == MEM_CUDA && xtq__mpi_cuda_coll_task(&attr.cuda_task) == 0)
        attr.field_mask |= XTQ_COLL_TEAM_ATTR_FIELD_CUDA_TASK;
    if (mem == MEM_CUDA) {
        attr.field_mask |= XTQ_COLL_TEAM_ATTR_FIELD_CUDA_DEVICE;
        attr.cuda_device = xtq__mpi.cuda_device;
    }
    rc = xtq_coll_team_create(xtq__mpi.ctx, &attr, &xc->team[mem]);
    if (rc) {
        xmpi_log(WARN, "xtq_coll_team_create: %s", xtq_errname(rc));
        xc->team[mem] = NULL;
    }
    xc->index[mem] = index;
    if (!all_true(xc->comm, rc == 0)) {
        if (xc->team[mem])
            team_destroy(xc, mem);
        else
            xtq__mpi_release_index(index);
        return rc ? rc : -XTQ_EAGAIN;
    }
    return 0;
}

/* ---- deciding ----------------------------------------------------------------------- */

struct call {
    enum kind kind;
    const void *sbuf;
    void *rbuf;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    int root; /* reduce */
    MPI_Comm comm;
    /* decided */
    struct xcomm *xc;
    enum xtq_datatype dt;
    enum xtq_op xop;
    size_t n; /* elements of dt */
    int mem;
};

/* The conditions that hold on every rank or none (the call's signature). */
static enum reason qualify(struct call *c)
{
    int xop, tsize = 0;

    if (!xtq__mpi.ctx)
        return R_LAYER_OFF;
    if (C.off)
        return R_COLL_OFF;
    xop = xtq__mpi_op(c->op);
    if (xop < 0 || xop == XTQ_OP_REPLACE || xop == XTQ_OP_NO_OP)
        return R_OP;
    c->xop = (enum xtq_op)xop;
    if (c->count <= 0 || PMPI_Type_size(c->type, &tsize) != MPI_SUCCESS || tsize <= 0 ||
        (uint64_t)c->count * (uint64_t)tsize < C.min_bytes)
        return R_SMALL;
    c->xc = xcomm_get(c->comm);
    if (!c->xc)
        return R_TEAM;
    if (c->xc->refused != R_ROUTED)
        return c->xc->refused;
    return R_ROUTED;
}

/* Where a buffer is: MEM_HOST, MEM_CUDA, or -1 (no CUDA agent for it:
 * none at all, or the buffer is on another GPU than the layer's). */
static int mem_of(const void *p)
{
    if (!p || p == MPI_IN_PLACE || !xtq__mpi_is_device_ptr(p))
        return MEM_HOST;
    return xtq__mpi.cuda && xtq__mpi_device_of(p) == xtq__mpi.cuda_device ? MEM_CUDA : -1;
}

/* The conditions that may differ between ranks: R_ROUTED or why not. */
static enum reason local(struct call *c)
{
    struct xtq__mpi_layout *l;
    bool reduce = c->kind == K_REDUCE || c->kind == K_IREDUCE;
    bool root = !reduce || c->root == c->xc->rank;
    int err = 0, ms, mr;
    size_t es;

    if (reduce && (c->root < 0 || c->root >= c->xc->size))
        return R_ARGS;
    if (c->sbuf == MPI_IN_PLACE && !root)
        return R_ARGS;
    l = xtq__mpi_layout_get(c->type, &err);
    if (!l)
        return R_TYPE;
    es = l->dt >= 0 ? xtq_datatype_size((enum xtq_datatype)l->dt) : 0;
    /* One predefined type (its extent the element's size: pairs padded
     * as in C), or copies of a type with no gaps. */
    if (es == 0 || l->true_lb != 0 || (uint64_t)l->extent != l->size || l->size % es != 0) {
        bool named_pair = es && l->true_lb == 0 && (uint64_t)l->extent == es && l->size <= es;
        if (!named_pair) {
            xtq__mpi_layout_put(l);
            return R_TYPE;
        }
        c->n = (size_t)c->count;
    } else {
        c->n = (size_t)c->count * (size_t)(l->size / es);
    }
    c->dt = (enum xtq_datatype)l->dt;
    xtq__mpi_layout_put(l);
    if (!xtq_reduce_supported(c->xop, c->dt))
        return R_OP;
    ms = c->sbuf == MPI_IN_PLACE ? -2 : mem_of(c->sbuf);
    mr = root ? mem_of(c->rbuf) : -2;
    if (ms == -1 || mr == -1 || (ms >= 0 && mr >= 0 && ms != mr))
        return R_BUFFER;
    c->mem = ms >= 0 ? ms : mr >= 0 ? mr : MEM_HOST;
    return R_ROUTED;
}

/* Blocking calls (and a nonblocking call that makes the team): every rank
 * states its arguments and whether it can route; all decide alike.
 * Returns R_ROUTED, R_PEER / the local reason, or R_MISMATCH. */
static enum reason agree(struct call *c, enum reason mine)
{
    int64_t v[9], all[9];
    bool ok = mine == R_ROUTED;
    int64_t sig = ok ? ((int64_t)c->dt << 8 | (int64_t)c->xop) : 0;
    int64_t root = c->kind == K_REDUCE || c->kind == K_IREDUCE ? c->root : -1;

    /* Maxima of each value and of its negation: max and min in one call. */
    v[0] = !ok;
    v[1] = ok ? (int64_t)c->n : INT64_MIN + 1;
    v[2] = ok ? -(int64_t)c->n : INT64_MIN + 1;
    v[3] = ok ? sig : INT64_MIN + 1;
    v[4] = ok ? -sig : INT64_MIN + 1;
    v[5] = root;
    v[6] = -root;
    v[7] = ok ? c->mem : INT64_MIN + 1;
    v[8] = ok ? -c->mem : INT64_MIN + 1;
    PMPI_Allreduce(v, all, 9, MPI_INT64_T, MPI_MAX, c->comm);
    if (all[5] != -all[6])
        return R_MISMATCH;
    if (all[0])
        return ok ? R_PEER : mine;
    if (all[1] != -all[2] || all[3] != -all[4])
        return R_MISMATCH;
    if (all[7] != -all[8])
        return R_PEER;
    return R_ROUTED;
}

static int mismatch_error(const struct call *c)
{
    xmpi_log(WARN, "%s: ranks called it with different counts, types, operations or roots",
             kind_name[c->kind]);
    atomic_fetch_add_explicit(&C.errors, 1, memory_order_relaxed);
    PMPI_Comm_call_errhandler(c->comm, MPI_ERR_ARG);
    return MPI_ERR_ARG;
}

/* The MPI error class of a libxtq_coll error. */
static int coll_errclass(int rc)
{
    switch (rc) {
    case 0:
        return MPI_SUCCESS;
    case -XTQ_EPROTO:
        return MPI_ERR_ARG; /* ranks disagreed (libxtq_coll saw it) */
    default:
        return xtq__mpi_errclass(rc);
    }
}

/*
 * Decide. Returns 1: routed (c->xc->team[c->mem] ready); 0: call PMPI;
 * < 0: -(MPI error code) already raised (a mismatch).
 */
static int route(struct call *c, bool blocking)
{
    enum reason r = qualify(c);
    if (r != R_ROUTED) {
        count(c->kind, r);
        return 0;
    }
    r = local(c);
    if (c->xc->broken[c->mem] || !c->xc->team[c->mem] || blocking) {
        r = agree(c, r);
        if (r == R_MISMATCH) {
            count(c->kind, r);
            return -mismatch_error(c);
        }
        if (r != R_ROUTED) {
            count(c->kind, r);
            return 0;
        }
        /* Every rank is here: a failed team can go, a new one be made. */
        if (c->xc->broken[c->mem]) {
            drain(c->xc);
            team_destroy(c->xc, c->mem);
        }
        if (!c->xc->team[c->mem] && team_make(c->xc, c->mem) != 0) {
            count(c->kind, R_TEAM);
            return 0;
        }
    } else if (r != R_ROUTED) {
        /* The team exists and no agreement is made: every rank must take
         * the same path, so a rank that cannot route fails the call. */
        count(c->kind, r);
        PMPI_Comm_call_errhandler(c->comm, MPI_ERR_ARG);
        return -MPI_ERR_ARG;
    }
    count(c->kind, R_ROUTED);
    atomic_fetch_add_explicit(&C.bytes[c->kind], c->n * xtq_datatype_size(c->dt),
                              memory_order_relaxed);
    return 1;
}

static const void *coll_sbuf(const struct call *c)
{
    return c->sbuf == MPI_IN_PLACE ? XTQ_COLL_IN_PLACE : c->sbuf;
}

static int finish(struct call *c, int rc)
{
    int code = coll_errclass(rc);
    if (rc) {
        xmpi_log(WARN, "%s over libxtq_coll: %s", kind_name[c->kind], xtq_errname(rc));
        atomic_fetch_add_explicit(&C.errors, 1, memory_order_relaxed);
        c->xc->broken[c->mem] = true; /* libxtq_coll's team is broken */
        PMPI_Comm_call_errhandler(c->comm, code);
    }
    return code;
}

/* ---- blocking ----------------------------------------------------------------------- */

XMPI_EXPORT int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm)
{
    struct call c = {.kind = K_ALLREDUCE,
                     .sbuf = sbuf,
                     .rbuf = rbuf,
                     .count = count,
                     .type = type,
                     .op = op,
                     .root = 0,
                     .comm = comm};
    int r = route(&c, true);

    if (r < 0)
        return -r;
    if (r == 0)
        return PMPI_Allreduce(sbuf, rbuf, count, type, op, comm);
    return finish(&c, xtq_coll_allreduce(c.xc->team[c.mem], coll_sbuf(&c), rbuf, c.n, c.dt, c.xop));
}

XMPI_EXPORT int MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                           int root, MPI_Comm comm)
{
    struct call c = {.kind = K_REDUCE,
                     .sbuf = sbuf,
                     .rbuf = rbuf,
                     .count = count,
                     .type = type,
                     .op = op,
                     .root = root,
                     .comm = comm};
    int r = route(&c, true);

    if (r < 0)
        return -r;
    if (r == 0)
        return PMPI_Reduce(sbuf, rbuf, count, type, op, root, comm);
    return finish(&c, xtq_coll_reduce(c.xc->team[c.mem], coll_sbuf(&c),
                                      root == c.xc->rank ? rbuf : NULL, c.n, c.dt, c.xop, root));
}

/* ---- nonblocking -------------------------------------------------------------------- */

static int req_query(void *extra, MPI_Status *st)
{
    struct xreq *x = extra;
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    st->MPI_ERROR = x->code;
    return x->code;
}

static int req_free(void *extra)
{
    struct xreq *x = extra;
    bool done;

    pthread_mutex_lock(&C.lock);
    done = x->done;
    x->freed = true;
    pthread_mutex_unlock(&C.lock);
    if (done)
        free(x);
    return MPI_SUCCESS;
}

/* A collective cannot be cancelled (MPI: erroneous); nothing to do. */
static int req_cancel(void *extra, int complete)
{
    (void)extra, (void)complete;
    return MPI_SUCCESS;
}

/* Test (or wait for) one request; on completion, complete the MPI's. */
static int wait_req(struct xreq *x, bool block)
{
    int done = 0, rc;
    bool freed;
    MPI_Request g;

    pthread_mutex_lock(&C.lock);
    /* Claim it: another thread may be on it. */
    struct xreq **p;
    for (p = &C.reqs; *p && *p != x; p = &(*p)->next)
        ;
    if (!*p) {
        pthread_mutex_unlock(&C.lock);
        return 0;
    }
    *p = x->next;
    pthread_mutex_unlock(&C.lock);

    if (block) {
        rc = xtq_coll_wait(x->creq, XTQ_TIMEOUT_INFINITE);
        done = 1;
    } else {
        rc = xtq_coll_test(x->creq, &done);
    }
    pthread_mutex_lock(&C.lock);
    if (!done) {
        x->next = C.reqs;
        C.reqs = x;
        pthread_mutex_unlock(&C.lock);
        return 0;
    }
    x->code = coll_errclass(rc);
    if (rc) {
        xmpi_log(WARN, "nonblocking reduction over libxtq_coll: %s", xtq_errname(rc));
        atomic_fetch_add_explicit(&C.errors, 1, memory_order_relaxed);
        for (int m = 0; m < MEM_COUNT; m++)
            if (x->xc->team[m])
                x->xc->broken[m] = true;
    }
    x->xc->inflight--;
    x->done = true;
    freed = x->freed;
    g = x->greq;
    atomic_fetch_sub_explicit(&C.nreqs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&C.lock);
    PMPI_Grequest_complete(g);
    if (freed)
        free(x);
    return 1;
}

static struct xreq *find(MPI_Request r)
{
    struct xreq *x;
    pthread_mutex_lock(&C.lock);
    for (x = C.reqs; x && x->greq != r; x = x->next)
        ;
    pthread_mutex_unlock(&C.lock);
    return x;
}

/* Move the layer's requests among reqs[0..n) along (all of them with
 * reqs NULL); block: wait for each. Returns how many of them are ours and
 * still running. */
static int progress(const MPI_Request *reqs, int n, bool block)
{
    int running = 0;

    if (atomic_load_explicit(&C.nreqs, memory_order_relaxed) == 0)
        return 0;
    if (!reqs) {
        struct xreq *x;
        pthread_mutex_lock(&C.lock);
        x = C.reqs;
        pthread_mutex_unlock(&C.lock);
        while (x && wait_req(x, block)) {
            pthread_mutex_lock(&C.lock);
            x = C.reqs;
            pthread_mutex_unlock(&C.lock);
        }
        return 0;
    }
    for (int i = 0; i < n; i++) {
        struct xreq *x = reqs[i] == MPI_REQUEST_NULL ? NULL : find(reqs[i]);
        if (x && !wait_req(x, block))
            running++;
    }
    return running;
}

static int start(struct call *c, MPI_Request *req, int rc_post, xtq_coll_req_t *creq)
{
    struct xreq *x;
    int rc;

    if (rc_post)
        return finish(c, rc_post);
    x = calloc(1, sizeof(*x));
    if (!x) {
        xtq_coll_wait(creq, XTQ_TIMEOUT_INFINITE);
        PMPI_Comm_call_errhandler(c->comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    x->creq = creq;
    x->xc = c->xc;
    rc = PMPI_Grequest_start(req_query, req_free, req_cancel, x, &x->greq);
    if (rc != MPI_SUCCESS) {
        xtq_coll_wait(creq, XTQ_TIMEOUT_INFINITE);
        free(x);
        return rc;
    }
    *req = x->greq;
    pthread_mutex_lock(&C.lock);
    x->next = C.reqs;
    C.reqs = x;
    c->xc->inflight++;
    atomic_fetch_add_explicit(&C.nreqs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&C.lock);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Iallreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type,
                               MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    struct call c = {.kind = K_IALLREDUCE,
                     .sbuf = sbuf,
                     .rbuf = rbuf,
                     .count = count,
                     .type = type,
                     .op = op,
                     .root = 0,
                     .comm = comm};
    xtq_coll_req_t *creq = NULL;
    int r = route(&c, false), rc;

    if (r < 0)
        return -r;
    if (r == 0)
        return PMPI_Iallreduce(sbuf, rbuf, count, type, op, comm, req);
    rc = xtq_coll_iallreduce(c.xc->team[c.mem], coll_sbuf(&c), rbuf, c.n, c.dt, c.xop, &creq);
    return start(&c, req, rc, creq);
}

XMPI_EXPORT int MPI_Ireduce(const void *sbuf, void *rbuf, int count, MPI_Datatype type, MPI_Op op,
                            int root, MPI_Comm comm, MPI_Request *req)
{
    struct call c = {.kind = K_IREDUCE,
                     .sbuf = sbuf,
                     .rbuf = rbuf,
                     .count = count,
                     .type = type,
                     .op = op,
                     .root = root,
                     .comm = comm};
    xtq_coll_req_t *creq = NULL;
    int r = route(&c, false), rc;

    if (r < 0)
        return -r;
    if (r == 0)
        return PMPI_Ireduce(sbuf, rbuf, count, type, op, root, comm, req);
    rc = xtq_coll_ireduce(c.xc->team[c.mem], coll_sbuf(&c), root == c.xc->rank ? rbuf : NULL, c.n,
                          c.dt, c.xop, root, &creq);
    return start(&c, req, rc, creq);
}

/* ---- the MPI's completion calls, for the layer's requests ----------------------------- */

/* Sleep after a bounded spin (the machine may be shared). */
static void backoff(unsigned *i)
{
    if (++*i < 64)
        return;
    unsigned us = *i < 1024 ? 1 : *i < 4096 ? 50 : 1000;
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

XMPI_EXPORT int MPI_Wait(MPI_Request *req, MPI_Status *st)
{
    progress(req, 1, true);
    return PMPI_Wait(req, st);
}

XMPI_EXPORT int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st)
{
    /* The MPI still progresses its own requests: an unfinished one of
     * ours just reads as not complete. */
    progress(req, 1, false);
    return PMPI_Test(req, flag, st);
}

XMPI_EXPORT int MPI_Request_get_status(MPI_Request req, int *flag, MPI_Status *st)
{
    /* The MPI still progresses its own requests: an unfinished one of
     * ours just reads as not complete. */
    progress(&req, 1, false);
    return PMPI_Request_get_status(req, flag, st);
}

XMPI_EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[])
{
    progress(reqs, n, true);
    return PMPI_Waitall(n, reqs, sts);
}

XMPI_EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[])
{
    /* The MPI still progresses its own requests: an unfinished one of
     * ours just reads as not complete. */
    progress(reqs, n, false);
    return PMPI_Testall(n, reqs, flag, sts);
}

XMPI_EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st)
{
    progress(reqs, n, false);
    return PMPI_Testany(n, reqs, index, flag, st);
}

XMPI_EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                             MPI_Status sts[])
{
    progress(reqs, n, false);
    return PMPI_Testsome(n, reqs, outcount, indices, sts);
}

XMPI_EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st)
{
    unsigned i = 0;
    int rc, flag = 0;

    if (!progress(reqs, n, false))
        return PMPI_Waitany(n, reqs, index, st);
    for (;;) {
        rc = PMPI_Testany(n, reqs, index, &flag, st);
        if (rc != MPI_SUCCESS || flag)
            return rc;
        backoff(&i);
        progress(reqs, n, false);
    }
}

XMPI_EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                             MPI_Status sts[])
{
    unsigned i = 0;
    int rc;

    if (!progress(reqs, n, false))
        return PMPI_Waitsome(n, reqs, outcount, indices, sts);
    for (;;) {
        rc = PMPI_Testsome(n, reqs, outcount, indices, sts);
        if (rc != MPI_SUCCESS || *outcount != 0)
            return rc;
        backoff(&i);
        progress(reqs, n, false);
    }
}

XMPI_EXPORT int MPIX_Xtq_coll_counts(uint64_t *routed, uint64_t *passed, uint64_t *failed)
{
    uint64_t r = 0, p = 0, f = 0;
    for (int k = 0; k < K_COUNT; k++)
        for (int i = 0; i < R_COUNT; i++) {
            uint64_t n = atomic_load(&C.calls[k][i]);
            if (i == R_ROUTED)
                r += n;
            else if (i != R_MISMATCH)
                p += n;
        }
    f = atomic_load(&C.errors);
    if (routed)
        *routed = r;
    if (passed)
        *passed = p;
    if (failed)
        *failed = f;
    return MPI_SUCCESS;
}

/* ---- life ------------------------------------------------------------------------------ */

int xtq__mpi_coll_init(void)
{
    const char *s = xtq__mpi_param("XTQ_MPI_COLL");
    char *end;

    C.off = strcasecmp(s, "off") == 0 || strcmp(s, "0") == 0 || strcasecmp(s, "no") == 0 ||
            strcasecmp(s, "false") == 0;
    C.min_bytes = strtoull(xtq__mpi_param("XTQ_MPI_COLL_MIN"), &end, 0);
    switch (*end) {
    case 'k':
    case 'K':
        C.min_bytes <<= 10;
        break;
    case 'm':
    case 'M':
        C.min_bytes <<= 20;
        break;
    case 'g':
    case 'G':
        C.min_bytes <<= 30;
        break;
    default:
        break;
    }
    return PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_attr_delete, &C.keyval, NULL);
}

/* Before libxtq goes down (collective over MPI_COMM_WORLD): every request
 * completed, every team destroyed, in the order they were made. */
void xtq__mpi_coll_fini(void)
{
    progress(NULL, 0, true);
    for (;;) {
        struct xcomm *xc, *last = NULL;
        pthread_mutex_lock(&C.lock);
        for (xc = C.comms; xc; xc = xc->next)
            last = xc;
        pthread_mutex_unlock(&C.lock);
        if (!last)
            break;
        /* Deleting the attribute frees the record (comm_attr_delete). */
        if (PMPI_Comm_delete_attr(last->comm, C.keyval) != MPI_SUCCESS)
            xcomm_free(last);
    }
    if (C.keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&C.keyval);
}

void xtq__mpi_coll_stats(void)
{
    uint64_t mine[K_COUNT * R_COUNT + K_COUNT + 1], sum[XMPI_ARRAY_SIZE(mine)];
    uint64_t any = 0;

    for (int k = 0; k < K_COUNT; k++) {
        for (int r = 0; r < R_COUNT; r++)
            mine[k * R_COUNT + r] = atomic_load(&C.calls[k][r]);
        mine[K_COUNT * R_COUNT + k] = atomic_load(&C.bytes[k]);
    }
    mine[K_COUNT * R_COUNT + K_COUNT] = atomic_load(&C.errors);
    PMPI_Reduce(mine, sum, (int)XMPI_ARRAY_SIZE(mine), MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (xtq__mpi.xrank != 0)
        return;
    for (int k = 0; k < K_COUNT; k++) {
        uint64_t total = 0;
        for (int r = 0; r < R_COUNT; r++)
            total += sum[k * R_COUNT + r];
        if (!total)
            continue;
        any += total;
        fprintf(stderr,
                "xtq-mpi: %s (summed over ranks): %" PRIu64 ", routed to libxtq_coll %" PRIu64
                " (%" PRIu64 " bytes)\n",
                kind_name[k], total, sum[k * R_COUNT + R_ROUTED], sum[K_COUNT * R_COUNT + k]);
        for (int r = 1; r < R_COUNT; r++)
            if (sum[k * R_COUNT + r])
                fprintf(stderr, "xtq-mpi:   %s (%s): %" PRIu64 "\n",
                        r == R_MISMATCH ? "failed" : "passed through", reason_text[r],
                        sum[k * R_COUNT + r]);
    }
    if (any && sum[K_COUNT * R_COUNT + K_COUNT])
        fprintf(stderr, "xtq-mpi: reductions that failed: %" PRIu64 "\n",
                sum[K_COUNT * R_COUNT + K_COUNT]);
}

#else /* built without libxtq_coll (XTQ_BUILD_APPS off): every call passes through */

int xtq__mpi_coll_init(void)
{
    return MPI_SUCCESS;
}
void xtq__mpi_coll_fini(void) {}
void xtq__mpi_coll_stats(void) {}
XMPI_EXPORT int MPIX_Xtq_coll_counts(uint64_t *routed, uint64_t *passed, uint64_t *failed)
{
    if (routed)
        *routed = 0;
    if (passed)
        *passed = 0;
    if (failed)
        *failed = 0;
    return MPI_SUCCESS;
}

#endif
