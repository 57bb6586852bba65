/*
 * libxtq_coll's runtime for host memory (include/xtq/coll.h).
 *
 * A team registers one CPU kernel (the receive task) and one queue at its
 * coordinated index, and a table of slots: instance j of the team's
 * collectives lives in slot j % S, S = 2 * XTQ_COLL_INFLIGHT. A step is an
 * XtqPut of a kernel dispatch whose arguments carry a coll_hdr and whose
 * payload is the piece; the task checks the header against its own call,
 * then hands the message to the receive side (coll_exec.c), which reduces
 * it into the buffer now or, when the step's local inputs are not done,
 * stashes it for the completion that makes them so. The completions of a
 * step decrement the trigger of every send that reads what it wrote; a
 * send fires when its trigger reaches 0 (the engine's triggered put, or the
 * task itself where libxtq has none yet: XTQ_COLL_TRIGGERS).
 *
 * Receivers ready before data arrives, without a handshake on the common
 * path: a message for an instance this rank has not posted yet is kept
 * in the slot (its bytes in the stash, a record in the slot's list); the
 * post runs the kept ones. Slot reuse needs no credit: a rank posts
 * instance j only after j - M completed (M = XTQ_COLL_INFLIGHT), every
 * completion of an allreduce or reduce needs every rank's post, so a
 * message for j reaches a rank that has completed j - 2M = j - S and
 * reaped its slot. Only where the stash could overflow (large vectors:
 * the ring) do receivers send one credit per sender at the post
 * (coll_sched.c's handshake), as the paper's zero-length handshake.
 *
 * Errors (mismatched calls, a failed put, a full stash) fail the instance;
 * its rank marks the team broken, tells every member (ABORT, waiting for
 * each to have run it, so that they ignore what follows), cancels the
 * triggered puts still armed (engine mode) or fires what it still owed
 * (task mode; no peer waits for it either way), and returns the error.
 * A member that learns of it does the same.
 *
 * Same-host teams (the shm provider) move pieces larger than
 * XTQ_COLL_CMA_MIN the way Open MPI's vader does: the put carries only the
 * header with the piece's address in the sender, and the receiving task
 * reads it with process_vm_readv (CMA) straight into place (allgather
 * steps: one copy instead of the transport's plus ours) or a cache-sized
 * chunk at a time into the reduction. Such puts ask for remote
 * completion: the sender's instance ends only once every reader has read.
 */
#include "coll_int.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "coll_cuda.h"
#include "coll_exec.h"
#include "coll_sched.h"

#define COLL_EARLY_MAX  512u
#define COLL_CACHE      16u
#define COLL_CTL_POSTED (1ull << 63)
#define COLL_QUEUE_SIZE 1024u
#define COLL_MAX_ROUNDS 32

#define coll_err(...) fprintf(stderr, "xtq_coll: " __VA_ARGS__)

/* ---- parameters ------------------------------------------------------------- */

static const char *param_value(const char *name)
{
    xtq_param_info_t info;
    for (unsigned i = 0, n = xtq_param_count(); i < n; i++)
        if (xtq_param_get_info(i, &info) == 0 && strcmp(info.name, name) == 0)
            return info.value && *info.value ? info.value : info.default_value;
    return NULL;
}

/* A BOOL parameter (1, on, true, yes) at its value or default. */
static int param_on(const char *name)
{
    const char *v = param_value(name);
    return v && (strcmp(v, "1") == 0 || strcasecmp(v, "on") == 0 || strcasecmp(v, "true") == 0 ||
                 strcasecmp(v, "yes") == 0);
}

static uint64_t param_size(const char *name, uint64_t dflt)
{
    const char *v = param_value(name);
    char *end;
    unsigned long long x;

    if (!v)
        return dflt;
    errno = 0;
    x = strtoull(v, &end, 0);
    if (errno || end == v)
        return dflt;
    switch (*end) {
    case 'k':
    case 'K':
        x <<= 10;
        break;
    case 'm':
    case 'M':
        x <<= 20;
        break;
    case 'g':
    case 'G':
        x <<= 30;
        break;
    default:
        break;
    }
    return x;
}

static enum xtq_coll_alg param_alg(void)
{
    const char *v = param_value("XTQ_COLL_ALG");
    for (int a = XTQ_COLL_ALG_RD; v && a < XTQ_COLL_ALG_COUNT; a++)
        if (strcmp(v, xtq_coll_alg_name((enum xtq_coll_alg)a)) == 0)
            return (enum xtq_coll_alg)a;
    return XTQ_COLL_ALG_AUTO;
}

/* ---- state -------------------------------------------------------------------- */

/* A message that came before its instance was posted here. */
struct coll_early {
    _Atomic uint32_t ready;
    struct coll_hdr h;
    const void *data; /* in the slot's stash */
};

/* One instance's place. The task finds it through the header's slot (and,
 * with a bounded registration, the engine checked that index for it). */
struct coll_slot {
    _Atomic uint64_t ctl;      /* POSTED | messages kept before the post */
    _Atomic uint64_t expect;   /* the instance this slot takes next */
    _Atomic int32_t busy;      /* tasks inside this slot now */
    struct xtq_coll_req *inst; /* the posted instance (under POSTED) */
    struct coll_exec exec;     /* receive side; its stash holds early bytes */
    uint32_t exec_cap;         /* receives the exec arrays hold */
    uint8_t *scratch;          /* host, or device memory (CUDA teams) */
    uint64_t scratch_cap;
    uint8_t *mscratch;   /* CUDA teams: its pinned host mirror */
    /* Per slot, not per team: instances in other slots run at the same
     * time (the shim keeps two in flight), and a shared vector mixed their
     * data (shim.device_staged.xtq on the H100: an int64 call received a
     * double call's bits). */
    uint8_t *rwork; /* a reduce's working vector on non-root ranks */
    size_t rwork_cap;
    /* CUDA teams: sends leave from pinned host mirrors of WORK and SEND
     * (SCRATCH's is mscratch) that the reductions also write. */
    uint8_t *mirror[COLL_BUF_COUNT];
    size_t mirror_cap[COLL_BUF_COUNT];
    /* CUDA teams with peer reads: one device buffer in place of the three
     * mirrors (at poff[buf]), which peers map (generation pgen). */
    uint8_t *pmirror;
    uint64_t pmirror_cap, poff[COLL_BUF_COUNT];
    uint32_t pgen;
    xtq_signal_t **trig; /* engine triggers, reused */
    struct xtq_coll_cuda_args *chain_args; /* CUDA teams: the chained copies' (pinned) */
    /* Peer reads: what the ready word's copies decrement (nobody waits:
     * peers wait for the word itself), and the word's value once every
     * copy posted so far ran (elements written to the buffer). */
    xtq_signal_t *ready_sig;
    uint64_t ready_total;
    uint64_t *ready_host; /* pinned: the total the stream copies to the word */
    uint32_t ntrig;
    struct coll_early early[COLL_EARLY_MAX];
};

enum { REQ_QUEUED, REQ_ACTIVE, REQ_DONE };

struct xtq_coll_req {
    struct xtq_coll_team *team;
    struct xtq_coll_req *next;
    uint64_t instance;
    unsigned slot;
    int state, status;
    enum xtq_coll_kind kind;
    const void *sendbuf;
    void *recvbuf;
    uint64_t count;
    enum xtq_datatype type;
    enum xtq_op op;
    int root;
    struct coll_cached *sched;
    xtq_completion_t *comp; /* per send */
    uint8_t *cmd;           /* per send: the command (valid until LOCAL) */
    size_t cmd_len;
    _Atomic uint32_t *send_left; /* task triggers: dependencies left */
    _Atomic uint8_t *issued;     /* per send: handed to xtq_put(v) */
    uint8_t *gated;              /* per send: armed on its mirror copy's completion */
    uint8_t *ready;              /* per send: goes at once, the peer waits for the ready word */
    int ready_path;              /* enum coll_ready: the post's copies advance the ready word */
    uint64_t ready_val;          /* ... to this */
    struct gpu_copy *copies;     /* CUDA teams: the copies the post chains */
    unsigned ncopies;
    uint32_t send_cursor;        /* sends known DONE below this */
    _Atomic int64_t recvs_left;
    int aborted;
    /* XTQ_COLL_PROFILE: when the call started, was posted, met its first
     * message, and took its last one (ns, CLOCK_MONOTONIC; 0: not yet). */
    int64_t t_start, t_posted;
    _Atomic int64_t t_first_msg, t_recvs_done;
};

/* XTQ_COLL_PROFILE's stages, summed per team and printed at destroy. */
enum {
    PROF_CALL,      /* start() to the call's completion seen by its caller */
    PROF_POST,      /* post(): the GPU's copies, then the sends handed on */
    PROF_PREPARE,   /* CUDA teams: the copies to device and to the mirrors */
    PROF_TO_MSG,    /* posted to its first message's task */
    PROF_TASK,      /* one message's task, start to end */
    PROF_GPU,       /* CUDA teams: one reduction dispatched and seen done */
    PROF_TO_DONE,   /* last message reduced to the call seen complete */
    PROF_STASH,     /* bytes of one call kept because they came early (not ns) */
    PROF_COUNT
};
static const char *const prof_names[PROF_COUNT] = {
    "call", "post", "gpu copies", "posted->first message", "message task", "gpu reduction",
    "last message->done", "stashed"};

struct coll_cached {
    struct coll_params p;
    struct coll_sched s;
    unsigned refs;
    uint64_t used;
};

struct coll_deferred {
    struct xtq_coll_req *req;
    uint32_t send;
};

/* A peer's slot buffer, mapped here (generation 0: none yet). */
struct coll_peer_map {
    _Atomic uint32_t gen;
    uint64_t size;
    uint8_t *base;
};

/* A completed call's puts whose acknowledgements have not come yet: the
 * completion objects must live until DONE (XTQ_COLL_ACK_LATER). */
struct coll_linger {
    struct coll_linger *next;
    uint64_t instance;
    uint32_t n;
    xtq_completion_t *comp;
    _Atomic uint8_t *issued;
};

struct xtq_coll_team {
    xtq_ctx_t *ctx;
    int rank, size;
    int *ranks;
    uint32_t id, index;
    enum xtq_coll_mem mem;
    xtq_agent_t *agent;
    xtq_queue_t *queue;
    xtq_kernel_t *kernel;
    int bounded, engine;
    /* Same host: per peer, whether it reads our pieces itself (CMA). */
    uint8_t *cma_peer;
    int cma_peers;
    /* Receiving side: whether this rank reads peers' memory at all (the
     * shm provider, host memory, not XTQ_COLL_CMA=off), and each peer's
     * pid as its probe showed it (0: none); a piece that names another
     * process is refused. */
    int cma_recv;
    _Atomic int32_t *peer_pid;
    uint64_t cma_min;   /* bytes: larger pieces go by CMA */
    uint64_t cma_probe; /* what a peer's probe reads here */
    unsigned inflight, nslots;
    struct coll_slot *slots;
    uint64_t next_instance;
    struct xtq_coll_req *head, *tail;
    xtq_signal_t *event;
    _Atomic int broken;         /* the first error, from broken_at on */
    _Atomic uint64_t broken_at; /* instances from here fail (UINT64_MAX: none) */
    _Atomic int64_t active_tasks;
    _Atomic uint64_t hello[COLL_MAX_ROUNDS];
    uint64_t hello_epoch;
    pthread_mutex_t defer_lock;
    struct coll_deferred *deferred;
    size_t ndeferred, capdeferred;
    struct coll_cached cache[COLL_CACHE];
    uint64_t cache_clock;
    struct coll_thresholds th;
    uint64_t piece_bytes, stash_cap;
    uint64_t inline_max; /* bytes: larger pieces' tasks are put XTQ_PUT_LONG_TASK */
    /* XTQ_COLL_ACK_LATER: a call completes once its eager sends are LOCAL;
     * their completions wait here for their acknowledgements. */
    int ack_later;
    struct coll_linger *linger;
    uint64_t chained; /* sends armed on a copy's completion (tests) */
    uint64_t readied; /* sends that went before their copy, with the ready word (tests) */
    /* Peer reads (XTQ_COLL_GPU_PEER): this rank's pieces stay in its GPU
     * and every peer maps them (`peer`); what this rank has mapped of each
     * peer's slots (pmap[sender * nslots + slot]). */
    int peer;
    int ready;      /* XTQ_COLL_GPU_READY: enum coll_ready */
    int drop_ready; /* tests: the ready word is never stored */
    uint64_t claim_extra; /* tests: GPU handles claim this much more than is there */
    struct coll_peer_map *pmap;
    _Atomic int32_t peer_votes, peer_yes; /* team creation: peers' verdicts */
    enum xtq_coll_alg alg;
    int64_t timeout_ns;
    /* CUDA teams: device memory reduced by the CUDA agent (each slot's
     * pinned host mirrors hold what the sends read). */
    struct coll_gpu *gpu;
    /* XTQ_COLL_SPIN_US: how long a waiting caller polls before it sleeps. */
    int64_t spin_ns;
    int prof; /* XTQ_COLL_PROFILE */
    _Atomic uint64_t prof_ns[PROF_COUNT], prof_n[PROF_COUNT];
    _Atomic uint64_t prof_max[PROF_COUNT]; /* the longest: a first call maps buffers (ms) */
    _Atomic int why_taken; /* the first failure's explanation, printed once: */
    _Atomic int why_ready; /* claimed, then written */
    int why_printed;
    char why[256];
};

static unsigned teams_created;

/* CUDA teams: the pinned host copy of a slot's buffer that sends read. */
static uint8_t *gpu_mirror(struct coll_slot *slot, unsigned buf)
{
    if (slot->pmirror)
        return slot->pmirror + slot->poff[buf];
    return buf == COLL_BUF_SCRATCH ? slot->mscratch : slot->mirror[buf];
}

/* ---- small helpers -------------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void wake(struct xtq_coll_team *t)
{
    xtq_signal_add(t->event, 1);
}

static void prof_add(struct xtq_coll_team *t, int stage, int64_t from, int64_t to)
{
    if (!t->prof || !from || to < from)
        return;
    uint64_t d = (uint64_t)(to - from), m = atomic_load_explicit(&t->prof_max[stage], memory_order_relaxed);
    atomic_fetch_add_explicit(&t->prof_ns[stage], d, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->prof_n[stage], 1, memory_order_relaxed);
    while (d > m && !atomic_compare_exchange_weak_explicit(&t->prof_max[stage], &m, d,
                                                           memory_order_relaxed,
                                                           memory_order_relaxed))
        ;
}

static void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Why the first failure happened, for the message the failing call prints. */
static void note(struct xtq_coll_team *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct xtq_coll_team *t, const char *fmt, ...)
{
    va_list ap;
    int zero = 0;
    if (!atomic_compare_exchange_strong(&t->why_taken, &zero, 1))
        return;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof(t->why), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&t->why_ready, 1, memory_order_release);
}

/* Instances from `instance` on fail with `err` (the first error stays). */
static void team_break(struct xtq_coll_team *t, uint64_t instance, int err)
{
    int zero = 0;
    uint64_t at = atomic_load(&t->broken_at);
    while (instance < at && !atomic_compare_exchange_weak(&t->broken_at, &at, instance))
        ;
    atomic_compare_exchange_strong(&t->broken, &zero, err);
    /* A GPU task waiting for a peer's ready word would hold the processor
     * until its bound (for ever with XTQ_COLL_TIMEOUT_MS=0): it ends now,
     * and the failed call returns without waiting for it. */
    if (t->gpu)
        coll_gpu_cancel_waits(t->gpu);
    wake(t);
}

/* The team's error if `instance` is one that fails, else 0. */
static int broken_for(struct xtq_coll_team *t, uint64_t instance)
{
    if (instance < atomic_load_explicit(&t->broken_at, memory_order_acquire))
        return 0;
    int err = atomic_load(&t->broken);
    return err ? err : -XTQ_EPROTO;
}

static void fail_inst(struct xtq_coll_req *req, int err)
{
    coll_exec_fail(&req->team->slots[req->slot].exec, err);
    wake(req->team);
}

static int hdr_same_call(const struct coll_hdr *h, const struct xtq_coll_req *req)
{
    const struct coll_params *p = &req->sched->p;
    return h->count == req->count && h->type == req->type && h->op == req->op && h->alg == p->alg &&
           h->ckind == req->kind && h->handshake == p->handshake && h->piece == p->piece_elems &&
           (req->kind != XTQ_COLL_REDUCE || h->root == req->root);
}

/* ---- schedules ------------------------------------------------------------------- */

static int need_handshake(struct xtq_coll_team *t, const struct coll_params *p)
{
    /* The same answer on every rank: the worst rank's needs. */
    if (p->alg == XTQ_COLL_ALG_RING)
        return 1;
    for (int r = 0; r < p->nranks; r++) {
        struct coll_params q = *p;
        struct coll_sched s;
        int big;

        q.rank = r;
        q.handshake = 0;
        q.inplace = 0;
        if (coll_sched_build(&q, &s))
            return 1;
        big = s.stash_bound > t->stash_cap || s.nrecvs > COLL_EARLY_MAX;
        coll_sched_free(&s);
        if (big)
            return 1;
    }
    return 0;
}

static void fill_params(struct xtq_coll_team *t, struct coll_params *p, enum xtq_coll_kind kind,
                        uint64_t count, enum xtq_datatype type, int root, int inplace)
{
    uint32_t es = (uint32_t)xtq_datatype_size(type);
    uint64_t maxput = xtq_put_max_size(t->ctx);
    uint64_t cmd = XTQ_AQL_PACKET_SIZE + sizeof(struct coll_kargs) + 64;
    uint64_t piece = t->piece_bytes;

    if (maxput > cmd && piece > maxput - cmd)
        piece = maxput - cmd;
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->nranks = t->size;
    p->rank = t->rank;
    p->root = kind == XTQ_COLL_REDUCE ? root : 0;
    p->count = count;
    p->elem_size = es;
    p->piece_elems = piece / es ? piece / es : 1;
    p->inplace = inplace;
    p->alg =
        t->alg != XTQ_COLL_ALG_AUTO ? t->alg : coll_choose_alg(kind, t->size, count, es, &t->th);
}

/* Same call shape (the handshake follows from the rest). */
static int params_equal(const struct coll_params *a, const struct coll_params *b)
{
    return a->kind == b->kind && a->alg == b->alg && a->nranks == b->nranks && a->rank == b->rank &&
           a->root == b->root && a->count == b->count && a->elem_size == b->elem_size &&
           a->piece_elems == b->piece_elems && a->inplace == b->inplace;
}

static struct coll_cached *sched_get(struct xtq_coll_team *t, struct coll_params *p, int *rc)
{
    struct coll_cached *victim = NULL;

    for (unsigned i = 0; i < COLL_CACHE; i++) {
        struct coll_cached *c = &t->cache[i];
        if (c->used) {
            if (params_equal(&c->p, p)) {
                c->refs++;
                c->used = ++t->cache_clock;
                *p = c->p;
                return c;
            }
        }
        if (c->refs == 0 && (!victim || c->used < victim->used))
            victim = c;
    }
    if (!victim) {
        *rc = -XTQ_ENOMEM;
        return NULL;
    }
    coll_sched_free(&victim->s);
    memset(victim, 0, sizeof(*victim));
    p->handshake = need_handshake(t, p);
    *rc = coll_sched_build(p, &victim->s);
    if (*rc)
        return NULL;
    victim->p = *p;
    victim->refs = 1;
    victim->used = ++t->cache_clock;
    return victim;
}

/* ---- sending ------------------------------------------------------------------------ */

static void hdr_init(const struct xtq_coll_team *t, struct coll_hdr *h, unsigned kind)
{
    memset(h, 0, sizeof(*h));
    h->magic = COLL_MAGIC;
    h->kind = (uint8_t)kind;
    h->team = t->id;
    h->sender = (uint32_t)t->rank;
}

/* A command to team rank `peer`'s task, arguments from `h`. */
static int build_cmd(const struct xtq_coll_team *t, const struct coll_hdr *h, void *cmd, size_t cap,
                     size_t *len)
{
    struct coll_kargs a;

    memset(&a, 0, sizeof(a));
    a.h = *h;
    if (t->bounded) {
        a.target = (uint64_t)h->slot * sizeof(struct coll_slot);
        a.extent = sizeof(struct coll_slot);
    }
    return xtq_cmd_kernel(cmd, cap, t->index, t->index, NULL, &a, sizeof(a), len);
}

static int put_now(struct xtq_coll_team *t, int peer, const void *cmd, size_t cmd_len,
                   const void *payload, size_t len, uint32_t flags, xtq_completion_t *comp,
                   xtq_signal_t *trigger)
{
    if (t->engine) {
        struct iovec iov = {(void *)payload, len};
        xtq_put_param_t prm;
        memset(&prm, 0, sizeof(prm));
        prm.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION;
        prm.flags = flags;
        prm.comp = comp;
        if (trigger) {
            /* A count-down of the send's inputs: fires once it is below 1
             * (level-triggered: an abort's store of 0 followed by a late
             * decrement still meets LT, where EQ 0 could be missed). */
            prm.field_mask |= XTQ_PUT_PARAM_FIELD_TRIGGER;
            prm.trigger = trigger;
            prm.trigger_cond = XTQ_SIGNAL_LT;
            prm.trigger_value = 1;
        }
        return xtq_putv(t->ctx, t->ranks[peer], cmd, cmd_len, len ? &iov : NULL, len ? 1 : 0, &prm);
    }
    return xtq_put(t->ctx, t->ranks[peer], cmd, cmd_len, payload, len, flags, comp);
}

/* Whether send `op` leaves its piece in place for the peer to read. */
static int send_by_cma(const struct xtq_coll_team *t, const struct coll_op *op, size_t esize)
{
    return t->cma_peer && op->type == COLL_OP_SEND && t->cma_peer[op->peer] &&
           op->cnt * esize > t->cma_min;
}

/* Whether send `op` leaves its piece in this rank's GPU for the peer's GPU
 * to read (peer reads: every data send of such a team). */
static int send_by_peer(const struct xtq_coll_team *t, const struct coll_op *op)
{
    return t->peer && op->type == COLL_OP_SEND && op->cnt;
}

/* Read `bytes` at `addr` in process `pid` into `dst` (CMA). */
static int cma_read(pid_t pid, uint64_t addr, void *dst, size_t bytes)
{
    while (bytes > 0) {
        struct iovec l = {dst, bytes}, r = {(void *)(uintptr_t)addr, bytes};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EFAULT;
            return err == ESRCH                    ? -XTQ_EHOSTDOWN
                   : err == EPERM || err == EACCES ? -XTQ_EPERM
                   : err == ENOSYS                 ? -XTQ_ENOSYS
                   : err == ENOMEM                 ? -XTQ_ENOMEM
                                                   : -XTQ_ERANGE;
        }
        dst = (uint8_t *)dst + n;
        addr += (uint64_t)n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* coll_src.read of a DATA_CMA message: its header says where. */
static int cma_src_read(const struct coll_src *src, uint64_t off, void *dst, size_t bytes)
{
    const struct coll_hdr *h = src->ctx;
    return cma_read((pid_t)h->src_pid, src->addr + off, dst, bytes);
}

/* A CMA probe from a peer: read its word; remember its pid if it reads. */
static int cma_probe_task(struct xtq_coll_team *t, const struct coll_hdr *h)
{
    uint64_t word = 0;
    int rc;

    if (!t->cma_recv || h->src_pid <= 0)
        return -XTQ_ENOSYS;
    rc = cma_read((pid_t)h->src_pid, h->src_addr, &word, sizeof(word));
    if (rc == 0 && word != h->count)
        rc = -XTQ_EPROTO;
    if (rc == 0)
        atomic_store_explicit(&t->peer_pid[h->sender], h->src_pid, memory_order_release);
    return rc;
}

/* A DATA_CMA piece names the process its probe named, on a team that
 * reads peers at all. */
static int cma_src_ok(struct xtq_coll_team *t, const struct coll_hdr *h)
{
    return t->cma_recv && h->src_pid > 0 &&
           atomic_load_explicit(&t->peer_pid[h->sender], memory_order_acquire) == h->src_pid;
}

static void defer_send(struct xtq_coll_req *req, uint32_t si)
{
    struct xtq_coll_team *t = req->team;
    pthread_mutex_lock(&t->defer_lock);
    if (t->ndeferred == t->capdeferred) {
        size_t cap = t->capdeferred ? t->capdeferred * 2 : 64;
        struct coll_deferred *d = realloc(t->deferred, cap * sizeof(*d));
        if (!d) {
            pthread_mutex_unlock(&t->defer_lock);
            fail_inst(req, -XTQ_ENOMEM);
            return;
        }
        t->deferred = d;
        t->capdeferred = cap;
    }
    t->deferred[t->ndeferred++] = (struct coll_deferred){req, si};
    pthread_mutex_unlock(&t->defer_lock);
    wake(t);
}

/* Hand send `si` of `req` to the transport (engine mode: armed on its
 * trigger unless it has no dependency). From a task or from the caller's
 * thread; never blocks: a full window defers it to the waiting thread. */
static void issue(struct xtq_coll_req *req, uint32_t si)
{
    struct xtq_coll_team *t = req->team;
    const struct coll_sched *s = &req->sched->s;
    const struct coll_op *op = &s->ops[s->send_op[si]];
    struct coll_slot *slot = &t->slots[req->slot];
    const void *payload = NULL;
    size_t len = 0;
    xtq_signal_t *trig = NULL;
    int rc;

    uint32_t flags = XTQ_PUT_NONBLOCKING;

    /* A host team's task is registered short in engine mode: a large
     * piece's reduction would hold the receiving (progress) thread, one
     * piece at a time, while the workers idle. */
    if (t->engine && !t->gpu && op->cnt * slot->exec.esize > t->inline_max)
        flags |= XTQ_PUT_LONG_TASK;
    if (send_by_cma(t, op, slot->exec.esize) || send_by_peer(t, op)) {
        /* The header says where the piece is; the reader's task must
         * have run before this send counts as done. */
        flags |= XTQ_PUT_REMOTE_COMPLETION;
    } else if (op->type == COLL_OP_SEND && op->cnt) {
        const uint8_t *base =
            t->gpu ? gpu_mirror(slot, op->buf)
                   : (const uint8_t *)slot->exec.buf[op->buf];
        payload = base + op->off * slot->exec.esize;
        len = op->cnt * slot->exec.esize;
    }
    if (t->engine && (op->ndeps || req->gated[si]) && !req->aborted)
        trig = slot->trig[si];
    rc = put_now(t, op->peer, req->cmd + (size_t)si * req->cmd_len, req->cmd_len, payload, len,
                 flags, &req->comp[si], trig);
    if (rc == -XTQ_EAGAIN) {
        defer_send(req, si);
        return;
    }
    atomic_store_explicit(&req->issued[si], 1, memory_order_release);
    if (rc) {
        note(t, "put to rank %d: %s", op->peer, xtq_strerror(rc));
        fail_inst(req, rc);
    }
}

/* ---- the receive side's callbacks ------------------------------------------------------ */

static void on_dep_done(struct coll_exec *e, uint32_t si)
{
    struct xtq_coll_req *req = e->user;

    if (req->team->engine) {
        xtq_signal_add(req->team->slots[req->slot].trig[si], -1);
        return;
    }
    if (atomic_fetch_sub_explicit(&req->send_left[si], 1, memory_order_acq_rel) == 1)
        issue(req, si);
}

static void on_recv_done(struct coll_exec *e, uint32_t ri)
{
    struct xtq_coll_req *req = e->user;
    (void)ri;
    if (atomic_fetch_sub_explicit(&req->recvs_left, 1, memory_order_acq_rel) == 1) {
        if (req->team->prof)
            atomic_store_explicit(&req->t_recvs_done, now_ns(), memory_order_relaxed);
        wake(req->team);
    }
}

static const struct coll_exec_ops exec_ops = {on_dep_done, on_recv_done};

/* ---- the receive task ------------------------------------------------------------------- */

static void task_fail(struct xtq_coll_team *t, int err)
{
    xtq_task_fail(err);
    (void)t;
}

/* A message for a posted instance. */
static int deliver(struct xtq_coll_req *req, const struct coll_hdr *h, const struct coll_src *src,
                   int stashed)
{
    const struct coll_sched *s = &req->sched->s;
    struct coll_slot *slot = &req->team->slots[req->slot];
    int64_t ri;

    if (req->team->prof) {
        int64_t zero = 0; /* a kept message counts as come at the post */
        atomic_compare_exchange_strong(&req->t_first_msg, &zero,
                                       stashed ? req->t_posted : now_ns());
    }
    if (!hdr_same_call(h, req)) {
        note(req->team,
             "rank %u called it with count %llu, %s %s, %s root %d (this rank: count %llu, %s %s, "
             "%s root %d)",
             h->sender, (unsigned long long)h->count, xtq_datatype_name(h->type),
             xtq_op_name(h->op), xtq_coll_alg_name(h->alg), h->root, (unsigned long long)req->count,
             xtq_datatype_name(req->type), xtq_op_name(req->op),
             xtq_coll_alg_name(req->sched->p.alg), req->root);
        return -XTQ_EPROTO;
    }
    ri = coll_sched_lookup(s, (int)h->sender, h->seq);
    const struct coll_op *op = ri < 0 ? NULL : &s->ops[s->recv_op[ri]];
    /* (h->off is the sender's offset: its buffers need not be laid out
     * like ours, e.g. in place on one side only.) */
    if (!op || (h->kind == COLL_MSG_CREDIT) != (op->type == COLL_OP_RECV_CREDIT) ||
        op->cnt != h->cnt) {
        note(req->team, "message %u from rank %u (%llu elements) matches no step here", h->seq,
             h->sender, (unsigned long long)h->cnt);
        return -XTQ_EPROTO;
    }
    int rc = stashed ? coll_exec_arrive(&slot->exec, (uint32_t)ri, src->local, 1)
                     : coll_exec_arrive_src(&slot->exec, (uint32_t)ri, src);
    if (rc)
        note(req->team, "message %u from rank %u (%llu elements): %s", h->seq, h->sender,
             (unsigned long long)h->cnt,
             rc == -XTQ_ENOSPC   ? "stash full"
             : rc == -XTQ_EPROTO ? "arrived twice"
                                 : xtq_strerror(rc));
    else if (src->read && atomic_load(&slot->exec.error))
        note(req->team, "message %u from rank %u: reading it from rank %u's memory: %s", h->seq,
             h->sender, h->sender, xtq_strerror(atomic_load(&slot->exec.error)));
    return rc;
}

/* Keep a message for an instance not posted yet; 1 when the post came
 * first after all (deliver it now). */
static int keep_early(struct xtq_coll_team *t, struct coll_slot *slot, const struct coll_hdr *h,
                      const struct coll_src *src)
{
    uint64_t c = atomic_load_explicit(&slot->ctl, memory_order_acquire), bytes;
    struct coll_early *rec;
    void *copy = NULL;

    do {
        if (c & COLL_CTL_POSTED)
            return 1;
        if (c >= COLL_EARLY_MAX) {
            note(t, "more than %u messages came before the post", COLL_EARLY_MAX);
            return -XTQ_ENOSPC;
        }
    } while (!atomic_compare_exchange_weak_explicit(&slot->ctl, &c, c + 1, memory_order_acq_rel,
                                                    memory_order_acquire));
    rec = &slot->early[c];
    rec->h = *h;
    rec->data = NULL;
    bytes = h->cnt * xtq_datatype_size((enum xtq_datatype)h->type);
    if ((h->kind == COLL_MSG_DATA || h->kind == COLL_MSG_DATA_CMA ||
         h->kind == COLL_MSG_DATA_GPU) &&
        bytes) {
        if (h->type >= XTQ_DT_COUNT || bytes / h->cnt != xtq_datatype_size(h->type)) {
            atomic_store_explicit(&rec->ready, 2, memory_order_release);
            return -XTQ_EPROTO;
        }
        copy = coll_exec_stash_alloc(&slot->exec, bytes);
        if (!copy) {
            atomic_store_explicit(&rec->ready, 2, memory_order_release);
            note(t,
                 "%llu bytes from rank %u came before the post and do not fit the stash "
                 "(XTQ_COLL_STASH %llu)",
                 (unsigned long long)bytes, h->sender, (unsigned long long)t->stash_cap);
            return -XTQ_ENOSPC;
        }
        int rc = coll_src_copy(src, 0, copy, bytes);
        if (rc) {
            atomic_store_explicit(&rec->ready, 2, memory_order_release);
            note(t, "%llu bytes from rank %u: reading them from its memory: %s",
                 (unsigned long long)bytes, h->sender, xtq_strerror(rc));
            return rc;
        }
        rec->data = copy;
    }
    atomic_store_explicit(&rec->ready, 1, memory_order_release);
    return 0;
}

/* A member failed instance h->instance: so do we, and every later one.
 * (An earlier instance this rank is still finishing is not affected.) */
static void on_abort(struct xtq_coll_team *t, const struct coll_hdr *h)
{
    struct coll_slot *slot = &t->slots[h->slot];
    int err = h->status < 0 ? h->status : -XTQ_EPROTO;

    note(t, "rank %u failed it (%s)", h->sender, xtq_strerror(err));
    if (atomic_load(&slot->expect) == h->instance)
        coll_exec_fail(&slot->exec, err);
    team_break(t, h->instance, err);
}

/* A step's payload is exactly its elements (credits carry none). */
static int payload_fits(const struct coll_hdr *h, size_t len)
{
    size_t es;

    if (h->kind == COLL_MSG_CREDIT)
        return len == 0;
    if (h->kind == COLL_MSG_DATA_CMA || h->kind == COLL_MSG_DATA_GPU) /* left with the sender */
        return len == 0 && (unsigned)h->type < XTQ_DT_COUNT && h->cnt <= h->count &&
               h->cnt <= (UINT64_MAX >> 8);
    if ((unsigned)h->type >= XTQ_DT_COUNT || !(es = xtq_datatype_size((enum xtq_datatype)h->type)))
        return 0;
    return h->cnt <= len / es && h->cnt * es == len;
}

/* ---- peer reads (CUDA teams on one host) ---------------------------------------- */

/* The start of a peer-read buffer: the ready word (COLL_HDR_READY). */
#define COLL_READY_BYTES 256

/* Who advances the ready word (XTQ_COLL_GPU_READY). */
enum coll_ready {
    COLL_READY_OFF,    /* nobody: a send waits for its copy (chained, or waited for) */
    COLL_READY_COPY,   /* the processor's copies (small calls) */
    COLL_READY_STREAM, /* out of place: the stream's copies, then a copy of the total */
    COLL_READY_AUTO,   /* COPY where the copies run on the processor, else STREAM */
};

static int64_t gpu_timeout(const struct xtq_coll_team *t);

static int put_sync_data(struct xtq_coll_team *t, int peer, const struct coll_hdr *h,
                         const void *payload, size_t len, int64_t deadline);

/* Peer reads: the slot's device buffer starts with its ready word (the
 * elements the copies of calls so far wrote to it, in the first
 * COLL_READY_BYTES), then holds WORK's, SEND's and SCRATCH's ranges that
 * sends read. A larger one replaces it: every peer maps the
 * new one (its handle, synchronously) before anything of this call is
 * sent, then the old one goes. A slot is reused only after its previous
 * call's sends were read (they complete remotely), so no peer still reads
 * the old buffer. */
static int peer_fit(struct xtq_coll_req *req, const struct coll_sched *s)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    uint64_t es = slot->exec.esize, n = (req->count * es + 255) & ~(uint64_t)255;
    uint64_t sb = (s->scratch_elems * s->p.elem_size + 255) & ~(uint64_t)255;
    uint64_t need = COLL_READY_BYTES + 2 * n + sb;
    static const uint64_t zero[COLL_READY_BYTES / 8];

    slot->poff[COLL_BUF_WORK] = COLL_READY_BYTES;
    slot->poff[COLL_BUF_SEND] = COLL_READY_BYTES + n;
    slot->poff[COLL_BUF_SCRATCH] = COLL_READY_BYTES + 2 * n;
    if (slot->pmirror && slot->pmirror_cap >= need)
        return 0;
    uint8_t handle[COLL_GPU_IPC_HANDLE];
    void *p = NULL;
    /* Grow by half again: a vector that creeps up maps once, not per call. */
    uint64_t cap = need + need / 2 > 4096 ? need + need / 2 : 4096;
    int rc = coll_gpu_ipc_alloc(t->gpu, cap, &p, handle);
    if (rc == 0) /* nothing written yet */
        rc = coll_gpu_copy(t->gpu, p, zero, sizeof(zero), 1);
    if (rc) {
        coll_gpu_ipc_free(t->gpu, p);
        return rc;
    }
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);
    uint32_t gen = slot->pgen + 1 ? slot->pgen + 1 : 1;
    for (int q = 0; q < t->size && rc == 0; q++) {
        struct coll_hdr h;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_GPU_HANDLE);
        h.slot = (uint16_t)req->slot;
        h.count = cap + t->claim_extra;
        h.status = (int32_t)gen;
        rc = put_sync_data(t, q, &h, handle, sizeof(handle), deadline);
        if (rc)
            note(t, "rank %d could not map this rank's GPU buffer: %s", q, xtq_strerror(rc));
    }
    if (rc) {
        /* Peers that mapped it keep a mapping of freed memory they never
         * read: a later handle for the slot replaces it. */
        coll_gpu_ipc_free(t->gpu, p);
        return rc;
    }
    coll_gpu_ipc_free(t->gpu, slot->pmirror);
    slot->pmirror = p;
    slot->pmirror_cap = cap;
    slot->pgen = gen;
    slot->ready_total = 0;
    return 0;
}

/* The receiving side of a peer's handle: map it for (sender, slot). The
 * sender waits for this task, and its earlier buffer of the slot is no
 * longer read by anyone (above): unmapped here. The buffer must be as
 * large as the sender says: pieces are read up to that size. */
static int gpu_handle_task(struct xtq_coll_team *t, const struct coll_hdr *h, const void *payload,
                           size_t len)
{
    if (!t->pmap || !t->gpu || len != COLL_GPU_IPC_HANDLE || h->status <= 0 || h->count == 0)
        return -XTQ_EBADMSG;
    struct coll_peer_map *m = &t->pmap[(size_t)h->sender * t->nslots + h->slot];
    void *p = NULL;
    uint64_t mapped = 0;
    int rc = coll_gpu_ipc_open(t->gpu, payload, h->count, &p, &mapped);
    if (rc == -XTQ_ERANGE)
        note(t,
             "rank %u's GPU buffer %d of slot %u: %llu bytes expected, %llu mapped here "
             "(refused)",
             h->sender, (int)h->status, h->slot, (unsigned long long)h->count,
             (unsigned long long)mapped);
    if (rc)
        return rc;
    atomic_store_explicit(&m->gen, 0, memory_order_release);
    coll_gpu_ipc_close(t->gpu, m->base);
    m->base = p;
    m->size = h->count;
    atomic_store_explicit(&m->gen, (uint32_t)h->status, memory_order_release);
    return 0;
}

/* Team creation: map the sender's probe buffer, read its first word. */
static int gpu_probe_task(struct xtq_coll_team *t, const struct coll_hdr *h, const void *payload,
                          size_t len)
{
    uint64_t word = 0;
    void *p = NULL;

    if (!t->gpu || len != COLL_GPU_IPC_HANDLE)
        return -XTQ_ENOSYS;
    int rc = coll_gpu_ipc_open(t->gpu, payload, sizeof(word), &p, NULL);
    if (rc)
        return rc;
    rc = coll_gpu_copy(t->gpu, &word, p, sizeof(word), 1);
    coll_gpu_ipc_close(t->gpu, p);
    return rc ? rc : word == h->count ? 0 : -XTQ_EPROTO;
}

/* A DATA_GPU piece: where it is mapped here, or NULL when it names a buffer
 * this rank has not mapped (or not that generation) or reaches past it. */
static const uint8_t *gpu_src_at(struct xtq_coll_team *t, const struct coll_hdr *h)
{
    if (!t->pmap)
        return NULL;
    const struct coll_peer_map *m = &t->pmap[(size_t)h->sender * t->nslots + h->slot];
    uint32_t gen = atomic_load_explicit(&m->gen, memory_order_acquire);
    uint64_t bytes = h->cnt * xtq_datatype_size((enum xtq_datatype)h->type);
    if (gen == 0 || gen != (uint32_t)h->src_pid || h->src_addr > m->size ||
        bytes > m->size - h->src_addr)
        return NULL;
    return m->base + h->src_addr;
}

/* A DATA_GPU piece sent before the sender's GPU wrote it (COLL_HDR_READY):
 * the sender's ready word, where it is mapped here (the buffer's first
 * bytes; gpu_src_at checked the mapping's generation). */
static const void *gpu_ready_at(struct xtq_coll_team *t, const struct coll_hdr *h)
{
    return t->pmap[(size_t)h->sender * t->nslots + h->slot].base;
}

/* How long a GPU task waits for a peer's ready word. */
static int64_t gpu_ready_ns(const struct xtq_coll_team *t)
{
    return t->timeout_ns ? t->timeout_ns : INT64_MAX;
}

/* How long the host waits for such a task: longer than the task's own
 * bound, so that the task ends first and says why (-XTQ_ETIMEDOUT from
 * the GPU), and its slot is free again, rather than a host timeout
 * leaving a task that still waits on the processor. */
static int64_t gpu_wait_timeout(const struct xtq_coll_team *t)
{
    return t->timeout_ns ? t->timeout_ns + t->timeout_ns / 2 + 1000000000 : XTQ_TIMEOUT_INFINITE;
}

/* A piece kept before the post: copied out once the sender's GPU wrote it. */
static int gpu_src_read(const struct coll_src *src, uint64_t off, void *dst, size_t bytes)
{
    struct xtq_coll_team *t = src->ctx;
    if (src->ready) {
        int rc = coll_gpu_wait_ready(t->gpu, src->ready, src->ready_val, gpu_ready_ns(t),
                                     gpu_wait_timeout(t));
        if (rc)
            return rc;
    }
    return coll_gpu_copy(t->gpu, dst, (const uint8_t *)src->local + off, bytes, 1);
}

static void coll_task(const xtq_dispatch_t *d, void *kernarg)
{
    struct xtq_coll_team *t = d->user_data;
    const struct coll_kargs *a = kernarg;
    const struct coll_hdr *h = &a->h;
    const void *payload = (const void *)(uintptr_t)a->payload;
    struct coll_slot *slot, *in_slot = NULL;
    int64_t t0 = t->prof ? now_ns() : 0;
    int rc = 0;

    atomic_fetch_add_explicit(&t->active_tasks, 1, memory_order_acq_rel);
    if (h->magic != COLL_MAGIC || h->team != t->id || h->slot >= t->nslots ||
        h->sender >= (uint32_t)t->size) {
        rc = -XTQ_EBADMSG;
        goto out;
    }
    slot = &t->slots[h->slot];
    if (t->bounded && a->target != (uint64_t)(uintptr_t)slot) {
        rc = -XTQ_ERANGE;
        goto out;
    }
    /* The caller's thread retires an instance only once no task is in its
     * slot (the last one may still be returning from its completion). */
    atomic_fetch_add_explicit(&slot->busy, 1, memory_order_acq_rel);
    in_slot = slot;
    switch (h->kind) {
    case COLL_MSG_HELLO:
        if (h->status >= 0 && h->status < COLL_MAX_ROUNDS)
            atomic_fetch_add_explicit(&t->hello[h->status], 1, memory_order_acq_rel);
        wake(t);
        goto out;
    case COLL_MSG_ABORT:
        on_abort(t, h);
        goto out;
    case COLL_MSG_CMA_PROBE:
        rc = cma_probe_task(t, h);
        goto out;
    case COLL_MSG_GPU_VOTE:
        atomic_fetch_add_explicit(&t->peer_yes, h->status == 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->peer_votes, 1, memory_order_acq_rel);
        wake(t);
        goto out;
    case COLL_MSG_GPU_PROBE:
    case COLL_MSG_GPU_HANDLE: {
        size_t plen = 0;
        (void)xtq_task_payload(&plen);
        rc = h->kind == COLL_MSG_GPU_PROBE ? gpu_probe_task(t, h, payload, plen)
                                           : gpu_handle_task(t, h, payload, plen);
        goto out;
    }
    case COLL_MSG_DATA:
    case COLL_MSG_DATA_CMA:
    case COLL_MSG_DATA_GPU:
    case COLL_MSG_CREDIT:
        break;
    default:
        rc = -XTQ_EBADMSG;
        goto out;
    }
    /* A failed instance takes nothing more: its buffers may be the
     * caller's again already. */
    if (broken_for(t, h->instance))
        goto out;
    uint64_t expect = atomic_load_explicit(&slot->expect, memory_order_acquire);
    if (h->instance != expect) {
        rc = -XTQ_EPROTO; /* a call this rank never made, or a peer far ahead */
        note(t, "rank %u sent a message of call %llu; this rank's slot takes call %llu", h->sender,
             (unsigned long long)h->instance, (unsigned long long)expect);
        team_break(t, h->instance < expect ? h->instance : expect, rc);
        goto out;
    }
    /* The piece is read for h->cnt elements: it must be that long (the
     * engine says how much came; a peer's header alone is not trusted). */
    size_t plen = 0;
    const uint8_t *peer_at = NULL; /* DATA_GPU: the piece, mapped here */
    (void)xtq_task_payload(&plen);
    if (!payload_fits(h, plen)) {
        rc = -XTQ_EBADMSG;
        note(t, "message %u from rank %u: %llu elements of %s, but %zu bytes came", h->seq,
             h->sender, (unsigned long long)h->cnt, xtq_datatype_name(h->type), plen);
    } else if (h->kind == COLL_MSG_DATA_CMA && !cma_src_ok(t, h)) {
        rc = -XTQ_EBADMSG;
        note(t, "message %u from rank %u points into process %d, which this rank may not read",
             h->seq, h->sender, (int)h->src_pid);
    } else if ((h->flags & ~(uint32_t)COLL_HDR_READY) ||
               ((h->flags & COLL_HDR_READY) && (h->kind != COLL_MSG_DATA_GPU || h->ready == 0))) {
        rc = -XTQ_EBADMSG;
        note(t, "message %u from rank %u: flags 0x%x", h->seq, h->sender, h->flags);
    } else if (h->kind == COLL_MSG_DATA_GPU && !(peer_at = gpu_src_at(t, h))) {
        rc = -XTQ_EBADMSG;
        note(t,
             "message %u from rank %u points at byte %llu of its GPU buffer %d of slot %u, "
             "which this rank has not mapped that far",
             h->seq, h->sender, (unsigned long long)h->src_addr, (int)h->src_pid, h->slot);
    } else {
        struct coll_src src = {.local = payload};
        if (h->kind == COLL_MSG_DATA_CMA) {
            src.read = cma_src_read;
            src.ctx = (void *)h;
            src.addr = h->src_addr;
        } else if (h->kind == COLL_MSG_DATA_GPU) {
            src.local = peer_at;
            src.read = gpu_src_read;
            src.ctx = t;
            src.device = 1;
            if (h->flags & COLL_HDR_READY) {
                src.ready = gpu_ready_at(t, h);
                src.ready_val = h->ready;
            }
        }
        rc = keep_early(t, slot, h, &src);
        if (rc == 1)
            rc = deliver(slot->inst, h, &src, 0);
    }
    if (rc) {
        if (atomic_load_explicit(&slot->ctl, memory_order_acquire) & COLL_CTL_POSTED)
            fail_inst(slot->inst, rc);
        else
            coll_exec_fail(&slot->exec, rc), wake(t);
    }
out:
    if (rc)
        task_fail(t, rc);
    if (t0 && h->kind != COLL_MSG_HELLO)
        prof_add(t, PROF_TASK, t0, now_ns());
    if (in_slot)
        atomic_fetch_sub_explicit(&in_slot->busy, 1, memory_order_acq_rel);
    atomic_fetch_sub_explicit(&t->active_tasks, 1, memory_order_acq_rel);
}

/* ---- posting ------------------------------------------------------------------------------ */

static int slot_fit(struct coll_slot *slot, const struct coll_sched *s, uint32_t nsends, int engine,
                    struct coll_gpu *gpu)
{
    if (slot->exec_cap < s->nrecvs || !slot->exec.rstate) {
        uint32_t n = s->nrecvs > 64 ? s->nrecvs : 64;
        void *st = realloc((void *)slot->exec.rstate, n * sizeof(*slot->exec.rstate));
        if (!st)
            return -XTQ_ENOMEM;
        slot->exec.rstate = st;
        void *sh = realloc((void *)slot->exec.rstash, n * sizeof(*slot->exec.rstash));
        if (!sh)
            return -XTQ_ENOMEM;
        slot->exec.rstash = sh;
        slot->exec_cap = n;
    }
    uint64_t sbytes = s->scratch_elems * s->p.elem_size;
    if (slot->scratch_cap < sbytes && gpu) {
        coll_gpu_free(gpu, slot->scratch);
        coll_gpu_host_free(gpu, slot->mscratch);
        slot->scratch = coll_gpu_alloc(gpu, sbytes);
        slot->mscratch = coll_gpu_host_alloc(gpu, sbytes);
        slot->scratch_cap = slot->scratch && slot->mscratch ? sbytes : 0;
        if (!slot->scratch_cap)
            return -XTQ_ENOMEM;
    } else if (slot->scratch_cap < sbytes) {
        void *sc = realloc(slot->scratch, sbytes);
        if (!sc)
            return -XTQ_ENOMEM;
        slot->scratch = sc;
        slot->scratch_cap = sbytes;
    }
    /* With the handshake nothing arrives before the post: the stash may
     * grow here for the steps that arrive before their inputs are done. */
    if (s->stash_bound > slot->exec.stash_cap) {
        if (!s->p.handshake)
            return -XTQ_ENOSPC;
        if (gpu)
            coll_gpu_deregister(gpu, slot->exec.stash, slot->exec.stash_cap);
        void *st = realloc(slot->exec.stash, s->stash_bound);
        if (!st)
            return -XTQ_ENOMEM;
        slot->exec.stash = st;
        slot->exec.stash_cap = s->stash_bound;
        if (gpu && coll_gpu_register(gpu, st, s->stash_bound))
            return -XTQ_ENOMEM;
    }
    if (engine && slot->ntrig < nsends) {
        xtq_signal_t **tr = realloc(slot->trig, nsends * sizeof(*tr));
        if (!tr)
            return -XTQ_ENOMEM;
        slot->trig = tr;
        for (uint32_t i = slot->ntrig; i < nsends; i++) {
            int rc = xtq_signal_create(0, &slot->trig[i]);
            if (rc) {
                slot->ntrig = i;
                return rc;
            }
        }
        slot->ntrig = nsends;
    }
    return 0;
}

/* Send everything at once: ABORT a rank's peers, fire what is left. */
static void fire_rest(struct xtq_coll_req *req);

/* ---- CUDA teams ---------------------------------------------------------------------- */

static int64_t gpu_timeout(const struct xtq_coll_team *t)
{
    return t->timeout_ns ? t->timeout_ns : XTQ_TIMEOUT_INFINITE;
}

/* The receive's data operation on the CUDA agent, from an agent worker. */
static int gpu_apply(struct coll_exec *e, const struct coll_op *op, const void *in,
                     const struct coll_src *dsrc)
{
    struct xtq_coll_req *req = e->user;
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    struct xtq_coll_cuda_args a;
    uint8_t *m = gpu_mirror(slot, op->buf);

    memset(&a, 0, sizeof(a));
    a.dst = (uint64_t)(uintptr_t)((uint8_t *)e->buf[op->buf] + op->off * e->esize);
    a.in = (uint64_t)(uintptr_t)in;
    a.mirror = m ? (uint64_t)(uintptr_t)(m + op->off * e->esize) : 0;
    a.count = op->cnt;
    a.type = (uint32_t)e->type;
    a.op = (uint32_t)e->op;
    a.esize = (uint32_t)e->esize;
    switch (op->type) {
    case COLL_OP_RECV_REDUCE:
        a.mode = XTQ_COLL_CUDA_REDUCE;
        break;
    case COLL_OP_RECV_REDUCE_TO:
        a.mode = op->in_first ? XTQ_COLL_CUDA_REDUCE_IN_A : XTQ_COLL_CUDA_REDUCE_A_IN;
        a.a = (uint64_t)(uintptr_t)((uint8_t *)e->buf[op->abuf] + op->aoff * e->esize);
        break;
    default:
        a.mode = XTQ_COLL_CUDA_COPY;
        break;
    }
    int64_t t0 = t->prof ? now_ns() : 0;
    /* The piece is in host memory (where it landed, the stash or a
     * bounce buffer): small ones may travel with the packet. Or it is
     * still in the sender's GPU (peer reads), read there in place. */
    if (dsrc && dsrc->ready) { /* sent before the sender's GPU wrote it */
        a.ready = (uint64_t)(uintptr_t)dsrc->ready;
        a.ready_val = dsrc->ready_val;
        a.ready_ns = (uint64_t)gpu_ready_ns(t);
    }
    int rc = coll_gpu_apply(t->gpu, &a, dsrc ? 0 : op->cnt * e->esize,
                            a.ready ? gpu_wait_timeout(t) : gpu_timeout(t));
    if (t0)
        prof_add(t, PROF_GPU, t0, now_ns());
    return rc;
}

static int grow_mirror(struct xtq_coll_team *t, struct coll_slot *slot, unsigned buf, size_t need)
{
    if (slot->mirror_cap[buf] >= need)
        return 0;
    coll_gpu_host_free(t->gpu, slot->mirror[buf]);
    slot->mirror[buf] = coll_gpu_host_alloc(t->gpu, need);
    slot->mirror_cap[buf] = slot->mirror[buf] ? need : 0;
    return slot->mirror[buf] ? 0 : -XTQ_ENOMEM;
}

/* The sends that read their range before any receive wrote it: their
 * mirror is copied before the post (later ones the reductions write). */
static int send_reads_input(const struct coll_sched *s, const struct coll_op *op)
{
    if (op->type != COLL_OP_SEND || op->cnt == 0)
        return 0;
    for (uint32_t k = 0; k < op->ndeps; k++)
        if (s->ops[s->recv_op[s->deps[op->dep_first + k]]].type != COLL_OP_RECV_CREDIT)
            return 0;
    return 1;
}

/* One copy of a call's prologue: src to dst and, where a send reads the
 * same range before any receive, to its mirror too (one task writes both). */
struct gpu_copy {
    void *dst, *mirror;
    const void *src;
    uint64_t cnt;
    int64_t send; /* the send that reads what it writes to a mirror, or -1 */
};

#define GPU_COPIES_MAX 16

/* The task arguments of one copy. */
static void gpu_copy_args(const struct coll_exec *e, const struct gpu_copy *c,
                          struct xtq_coll_cuda_args *a)
{
    memset(a, 0, sizeof(*a));
    a->dst = (uint64_t)(uintptr_t)c->dst;
    a->in = (uint64_t)(uintptr_t)c->src;
    a->mirror = (uint64_t)(uintptr_t)c->mirror;
    a->count = c->cnt;
    a->type = (uint32_t)e->type;
    a->op = (uint32_t)e->op;
    a->esize = (uint32_t)e->esize;
    a->mode = XTQ_COLL_CUDA_COPY;
}

/* Wait for every held ticket (each is a slot the reductions share). */
static int gpu_tickets_finish(struct xtq_coll_team *t, const int *ticket, unsigned *held)
{
    int rc = 0;
    for (unsigned k = 0; k < *held; k++) {
        int r = coll_gpu_finish(t->gpu, ticket[k], gpu_timeout(t));
        rc = rc ? rc : r;
    }
    *held = 0;
    return rc;
}

/* The copies as tasks on the processor, in order (a copy may read what an
 * earlier one wrote), a few tickets at a time (reductions share the slots). */
static int gpu_copies_run(struct xtq_coll_team *t, const struct coll_exec *e,
                          const struct gpu_copy *c, unsigned n)
{
    int ticket[4], rc = 0;
    unsigned held = 0;

    for (unsigned i = 0; i < n && rc == 0; i++) {
        struct xtq_coll_cuda_args a;
        gpu_copy_args(e, &c[i], &a);
        if (held == sizeof(ticket) / sizeof(ticket[0]))
            rc = gpu_tickets_finish(t, ticket, &held);
        int tk = rc ? rc : coll_gpu_start(t->gpu, &a, 0, gpu_timeout(t));
        if (tk >= 0)
            ticket[held++] = tk;
        else
            rc = tk;
    }
    int w = gpu_tickets_finish(t, ticket, &held);
    return rc ? rc : w;
}

/* The copies gpu_prepare left to the post, on the processor in queue
 * order; nobody here waits for them.
 * - Chained (engine mode, CUDA teams): each decrements the trigger of the
 *   send that reads what it wrote, and the engine sends it once the GPU
 *   wrote it, with no host thread between.
 * - Ready word (peer reads, req->ready_path): those that write what a
 *   send reads (in the buffer peers map) advance its ready word by the
 *   elements they wrote, and the sends carry the word's total after them
 *   (req->ready_val). Submitted before any of the call's sends goes out,
 *   so a peer's task that waits for the word never waits for a task
 *   queued behind one of this GPU's own waits. */
static int gpu_copies_signal(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    const struct coll_exec *e = &slot->exec;

    if (!slot->chain_args)
        slot->chain_args = coll_gpu_host_alloc(t->gpu, GPU_COPIES_MAX * sizeof(*slot->chain_args));
    if (req->ready_path && !slot->ready_sig && xtq_signal_create(0, &slot->ready_sig) != 0)
        slot->ready_sig = NULL;
    if (!slot->chain_args || (req->ready_path && !slot->ready_sig))
        return -XTQ_ENOMEM;
    for (unsigned k = 0; k < req->ncopies; k++) {
        const struct gpu_copy *c = &req->copies[k];
        struct xtq_coll_cuda_args a;
        xtq_signal_t *sig;
        gpu_copy_args(e, c, &a);
        if (req->ready_path) {
            sig = slot->ready_sig; /* nobody waits: peers wait for the word */
            if (c->send >= 0 && !t->drop_ready)
                a.mirror_count = (uint64_t)(uintptr_t)slot->pmirror;
        } else {
            sig = slot->trig[(uint32_t)c->send];
        }
        int rc = coll_gpu_start_signal(t->gpu, &a, &slot->chain_args[k], sig, gpu_timeout(t));
        if (rc) {
            /* Those before it run; the sends after it wait for nothing. */
            req->ncopies = k;
            return rc;
        }
    }
    return 0;
}

/* Send `si` goes with the call, its receiver waiting for the ready word to
 * count the `cnt` elements its copy writes (gpu_prepare sets the total,
 * req->ready_val, after its last send). */
static void ready_send(struct xtq_coll_req *req, uint32_t si, uint64_t cnt)
{
    req->team->slots[req->slot].ready_total += cnt;
    req->ready[si] = 1;
    req->team->readied++;
}

/* XTQ_COLL_GPU_READY=stream, out of place: no prologue, and every send that
 * reads the input reads SEND, which no receive writes. Then those sends go
 * with the call, and after them the stream copies their ranges to the
 * buffer peers read and the ready word's new total after that
 * (gpu_copies_stream); nothing here waits, and no processor task runs
 * before a receiver's reduction. 1 when the call goes this way. */
static int gpu_prepare_stream_ready(struct xtq_coll_req *req, const struct coll_sched *s)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    struct coll_exec *e = &slot->exec;
    size_t es = e->esize;
    unsigned nc = 0;

    if (!e->buf[COLL_BUF_SEND])
        return 0;
    for (unsigned k = 0; k < s->nprologue; k++)
        if (s->prologue[k].cnt)
            return 0;
    for (uint32_t si = 0; si < s->nsends; si++) {
        const struct coll_op *op = &s->ops[s->send_op[si]];
        if (!send_reads_input(s, op))
            continue;
        if (op->buf != COLL_BUF_SEND || nc == GPU_COPIES_MAX)
            return 0;
        nc++;
    }
    if (nc == 0)
        return 0;
    if (!slot->ready_host && !(slot->ready_host = coll_gpu_host_alloc(t->gpu, 64)))
        return 0;
    nc = 0;
    for (uint32_t si = 0; si < s->nsends; si++) {
        const struct coll_op *op = &s->ops[s->send_op[si]];
        if (!send_reads_input(s, op))
            continue;
        req->copies[nc++] = (struct gpu_copy){gpu_mirror(slot, op->buf) + op->off * es, NULL,
                                              (uint8_t *)e->buf[op->buf] + op->off * es, op->cnt,
                                              si};
        ready_send(req, si, op->cnt);
    }
    req->ncopies = nc;
    req->ready_path = COLL_READY_STREAM;
    req->ready_val = slot->ready_total;
    return 1;
}

/* The stream's copies of a call that went with XTQ_COLL_GPU_READY=stream,
 * after its sends: each range to the buffer peers read, then the ready
 * word's new total (from pinned memory, in stream order after them). */
static int gpu_copies_stream(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    size_t es = slot->exec.esize;
    int rc = 0;

    for (unsigned k = 0; k < req->ncopies && rc == 0; k++)
        rc = coll_gpu_copy(t->gpu, req->copies[k].dst, req->copies[k].src,
                           req->copies[k].cnt * es, 0);
    if (rc == 0 && !t->drop_ready) {
        *slot->ready_host = req->ready_val;
        rc = coll_gpu_copy(t->gpu, slot->pmirror, slot->ready_host, sizeof(uint64_t), 0);
    }
    return rc;
}

/* Before a CUDA team's post: the prologue's copies in device memory, and
 * the host mirror of every range a send reads before any receive wrote it.
 * Small ones (none over coll_gpu_copy_max) run as tasks on the processor,
 * a mirror copy folded into the prologue copy that reads or writes the
 * same range; otherwise all go on the stream, waited for once. Never
 * mixed: a copy reads what an earlier one wrote only within one order. */
static int gpu_prepare(struct xtq_coll_req *req, const struct coll_sched *s)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    struct coll_exec *e = &slot->exec;
    size_t es = e->esize, n = req->count * es;
    struct gpu_copy *c = req->copies;
    unsigned nc = 0;
    int rc, stream = 0;

    if (t->peer)
        rc = peer_fit(req, s);
    else if ((rc = grow_mirror(t, slot, COLL_BUF_WORK, n)) == 0)
        rc = grow_mirror(t, slot, COLL_BUF_SEND, n);
    if (rc)
        return rc;
    if ((t->ready == COLL_READY_STREAM ||
         (t->ready == COLL_READY_AUTO && n > coll_gpu_copy_max(t->gpu))) &&
        gpu_prepare_stream_ready(req, s))
        return 0;
    for (unsigned k = 0; k < s->nprologue && !stream; k++) {
        const struct coll_copy *p = &s->prologue[k];
        stream = nc == GPU_COPIES_MAX || p->cnt * es > coll_gpu_copy_max(t->gpu);
        if (!stream && p->cnt)
            c[nc++] = (struct gpu_copy){(uint8_t *)e->buf[p->dst] + p->dst_off * es, NULL,
                                        (uint8_t *)e->buf[p->src] + p->src_off * es, p->cnt, -1};
    }
    for (uint32_t si = 0; si < s->nsends && !stream; si++) {
        const struct coll_op *op = &s->ops[s->send_op[si]];
        if (!send_reads_input(s, op))
            continue;
        void *from = (uint8_t *)e->buf[op->buf] + op->off * es;
        void *to = gpu_mirror(slot, op->buf) + op->off * es;
        unsigned k = 0;
        while (k < nc &&
               !(c[k].cnt == op->cnt && !c[k].mirror && (c[k].src == from || c[k].dst == from)))
            k++;
        if (k < nc)
            c[k].mirror = to, c[k].send = si;
        else if (nc < GPU_COPIES_MAX && op->cnt * es <= coll_gpu_copy_max(t->gpu))
            c[nc++] = (struct gpu_copy){to, NULL, from, op->cnt, si};
        else
            stream = 1;
    }
    if (!stream && nc > 0 && (t->ready == COLL_READY_COPY || t->ready == COLL_READY_AUTO) &&
        coll_gpu_can_chain(t->gpu)) {
        /* Peer reads: the sends that read a copy go with the call; their
         * receivers' GPUs wait for this slot's ready word, which the
         * copies advance (gpu_copies_signal). */
        req->ncopies = nc;
        req->ready_path = COLL_READY_COPY;
        for (unsigned k = 0; k < nc; k++)
            if (c[k].send >= 0) /* it writes the range the send reads */
                ready_send(req, (uint32_t)c[k].send, c[k].cnt);
        req->ready_val = slot->ready_total;
        return 0;
    }
    if (!stream && t->engine && coll_gpu_can_chain(t->gpu)) {
        /* Every copy fills what a send reads: the post arms those sends
         * on their copy's completion instead of waiting here. */
        unsigned k = 0;
        while (k < nc && c[k].send >= 0)
            k++;
        if (k == nc && nc > 0) {
            req->ncopies = nc;
            for (k = 0; k < nc; k++)
                req->gated[c[k].send] = 1;
            t->chained += nc;
            return 0;
        }
    }
    if (!stream)
        return gpu_copies_run(t, e, c, nc);

    for (unsigned k = 0; k < s->nprologue && rc == 0; k++) {
        const struct coll_copy *p = &s->prologue[k];
        rc = coll_gpu_copy(t->gpu, (uint8_t *)e->buf[p->dst] + p->dst_off * es,
                           (uint8_t *)e->buf[p->src] + p->src_off * es, p->cnt * es, 0);
    }
    for (uint32_t si = 0; si < s->nsends && rc == 0; si++) {
        const struct coll_op *op = &s->ops[s->send_op[si]];
        if (send_reads_input(s, op))
            rc = coll_gpu_copy(t->gpu, gpu_mirror(slot, op->buf) + op->off * es,
                               (uint8_t *)e->buf[op->buf] + op->off * es, op->cnt * es, 0);
    }
    /* One wait for all of them (in stream order: a mirror copied from a
     * prologue's result follows it). */
    return rc ? rc : coll_gpu_copy(t->gpu, NULL, NULL, 0, 1);
}

static int post(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    const struct coll_sched *s = &req->sched->s;
    struct coll_exec *e = &slot->exec;
    uint32_t ns = s->nsends;
    uint64_t early;
    int64_t t0 = t->prof ? now_ns() : 0;
    int rc;

    rc = slot_fit(slot, s, ns, t->engine, t->gpu);
    if (rc)
        return rc;
    req->cmd_len = XTQ_AQL_PACKET_SIZE + sizeof(struct coll_kargs);
    req->comp = calloc(ns + 1, sizeof(*req->comp));
    req->cmd = malloc((ns + 1) * req->cmd_len);
    req->send_left = calloc(ns + 1, sizeof(*req->send_left));
    req->issued = calloc(ns + 1, 1);
    req->gated = calloc(ns + 1, 1);
    req->ready = calloc(ns + 1, 1);
    req->ready_path = 0;
    req->copies = t->gpu ? calloc(GPU_COPIES_MAX, sizeof(*req->copies)) : NULL;
    req->ncopies = 0;
    if (!req->comp || !req->cmd || !req->send_left || !req->issued || !req->gated || !req->ready ||
        (t->gpu && !req->copies))
        return -XTQ_ENOMEM;
    /* Buffers. A reduce's non-root ranks work in the team's vector. */
    e->s = s;
    e->ops = &exec_ops;
    e->user = req;
    e->type = req->type;
    e->op = req->op;
    e->esize = xtq_datatype_size(req->type);
    e->buf[COLL_BUF_WORK] = req->recvbuf;
    if (req->kind == XTQ_COLL_REDUCE && t->rank != req->root) {
        size_t need = req->count * e->esize;
        if (slot->rwork_cap < need) {
            void *w;
            if (t->gpu) {
                coll_gpu_free(t->gpu, slot->rwork);
                w = coll_gpu_alloc(t->gpu, need);
            } else {
                w = realloc(slot->rwork, need);
            }
            if (!w)
                return -XTQ_ENOMEM;
            slot->rwork = w;
            slot->rwork_cap = need;
        }
        e->buf[COLL_BUF_WORK] = slot->rwork;
    }
    e->buf[COLL_BUF_SEND] = req->sendbuf == XTQ_COLL_IN_PLACE ? NULL : (void *)req->sendbuf;
    e->buf[COLL_BUF_SCRATCH] = slot->scratch;
    e->apply_hook = t->gpu ? gpu_apply : NULL;
    if (t->gpu) {
        int64_t tp = t->prof ? now_ns() : 0;
        rc = gpu_prepare(req, s);
        if (rc)
            return rc;
        if (tp)
            prof_add(t, PROF_PREPARE, tp, now_ns());
    } else {
        for (unsigned k = 0; k < s->nprologue; k++) {
            const struct coll_copy *c = &s->prologue[k];
            if (c->cnt)
                memmove((uint8_t *)e->buf[c->dst] + c->dst_off * e->esize,
                        (uint8_t *)e->buf[c->src] + c->src_off * e->esize, c->cnt * e->esize);
        }
    }
    for (uint32_t si = 0; si < ns; si++) {
        const struct coll_op *op = &s->ops[s->send_op[si]];
        struct coll_hdr h;
        size_t len;

        hdr_init(t, &h, op->type == COLL_OP_SEND_CREDIT ? COLL_MSG_CREDIT : COLL_MSG_DATA);
        h.type = (uint8_t)req->type;
        h.op = (uint8_t)req->op;
        h.alg = (uint8_t)req->sched->p.alg;
        h.ckind = (uint8_t)req->kind;
        h.handshake = (uint8_t)req->sched->p.handshake;
        h.slot = (uint16_t)req->slot;
        h.seq = op->seq;
        h.root = req->kind == XTQ_COLL_REDUCE ? req->root : 0;
        h.instance = req->instance;
        h.count = req->count;
        h.piece = req->sched->p.piece_elems;
        h.off = op->off;
        h.cnt = op->cnt;
        if (send_by_cma(t, op, e->esize)) {
            h.kind = COLL_MSG_DATA_CMA;
            h.src_pid = (int32_t)getpid();
            h.src_addr = (uint64_t)(uintptr_t)((uint8_t *)e->buf[op->buf] + op->off * e->esize);
        } else if (send_by_peer(t, op)) {
            h.kind = COLL_MSG_DATA_GPU;
            h.src_pid = (int32_t)slot->pgen;
            h.src_addr = (uint64_t)(gpu_mirror(slot, op->buf) - slot->pmirror) + op->off * e->esize;
            if (req->ready[si]) {
                h.flags |= COLL_HDR_READY;
                h.ready = req->ready_val;
            }
        }
        rc = build_cmd(t, &h, req->cmd + (size_t)si * req->cmd_len, req->cmd_len, &len);
        if (rc)
            return rc;
        atomic_store_explicit(&req->send_left[si], op->ndeps, memory_order_relaxed);
        if (t->engine)
            xtq_signal_store(slot->trig[si], op->ndeps + req->gated[si]);
    }
    /* The triggers hold their counts: the copies may decrement them now. */
    if (req->ncopies && req->ready_path != COLL_READY_STREAM &&
        (rc = gpu_copies_signal(req)) != 0) {
        (void)coll_gpu_fence(t->gpu, gpu_timeout(t));
        req->ncopies = 0;
        return rc;
    }

    int kept_err = atomic_load(&e->error);
    coll_exec_reset(e);
    if (kept_err)
        coll_exec_fail(e, kept_err); /* a message kept before the post failed */
    atomic_store_explicit(&req->recvs_left, s->nrecvs, memory_order_relaxed);
    slot->inst = req;
    req->state = REQ_ACTIVE;

    /* From here tasks deliver directly. */
    if (t0)
        req->t_posted = now_ns(); /* before a task can see it: then only read */
    early = atomic_fetch_or_explicit(&slot->ctl, COLL_CTL_POSTED, memory_order_acq_rel);
    for (uint32_t si = 0; si < ns; si++)
        if (s->ops[s->send_op[si]].ndeps == 0 || t->engine)
            issue(req, si);
    /* The sends that read the input went first: their receivers get ready
     * while the stream copies what they will read. */
    if (req->ready_path == COLL_READY_STREAM && (rc = gpu_copies_stream(req)) != 0) {
        note(t, "copying the input to the buffer peers read: %s", xtq_strerror(rc));
        fail_inst(req, rc);
    }
    for (uint64_t k = 0; k < early; k++) {
        struct coll_early *rec = &slot->early[k];
        uint32_t ready;
        /* A task that reserved the record may still be copying. */
        while ((ready = atomic_load_explicit(&rec->ready, memory_order_acquire)) == 0)
            xtq_progress(t->ctx);
        if (ready != 1)
            continue;
        struct coll_src kept = {.local = rec->data};
        rc = deliver(req, &rec->h, &kept, 1);
        if (rc)
            fail_inst(req, rc);
    }
    if (s->nrecvs == 0)
        wake(t);
    if (t0)
        prof_add(t, PROF_POST, t0, now_ns());
    return 0;
}

static int put_sync(struct xtq_coll_team *t, int peer, const struct coll_hdr *h, int64_t deadline);
static void reap(struct xtq_coll_req *req);

/* Fail `instance` (in `slot`) and every later one here and at every
 * member: they would wait for this rank's messages. */
static void abort_everywhere(struct xtq_coll_team *t, unsigned slot, uint64_t instance, int rc)
{
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);

    team_break(t, instance, rc);
    for (int q = 0; q < t->size; q++) {
        struct coll_hdr h;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_ABORT);
        h.slot = (uint16_t)slot;
        h.instance = instance;
        h.status = rc;
        (void)put_sync(t, q, &h, deadline);
    }
}

/* A post that failed before its messages went out: tell every member (they
 * would wait for ours), fail this and every later instance here. */
static void post_failed(struct xtq_coll_req *r, int rc)
{
    abort_everywhere(r->team, r->slot, r->instance, rc);
    r->status = rc;
    reap(r);
}

/* The earliest queued requests, in order, as their slots allow. */
static void post_queued(struct xtq_coll_team *t)
{
    for (struct xtq_coll_req *r = t->head; r; r = r->next) {
        if (r->state != REQ_QUEUED)
            continue;
        /* j may start once j - M is reaped (and so its slot, j - 2M). */
        uint64_t j = r->instance;
        if (j >= t->inflight) {
            struct coll_slot *old = &t->slots[(j - t->inflight) % t->nslots];
            if (atomic_load(&old->expect) <= j - t->inflight)
                return;
        }
        if (atomic_load(&t->slots[r->slot].expect) != j)
            return;
        int rc = broken_for(t, j);
        if (rc) {
            /* Never posted: nothing of it is in flight here. Its slot
             * still goes on to j + S (reap), or the calls queued behind it
             * would wait for that slot for ever. */
            r->status = rc;
            reap(r);
            continue;
        }
        rc = post(r);
        if (rc)
            post_failed(r, rc);
    }
}

/* ---- completing ------------------------------------------------------------------------------ */

static void drain_deferred(struct xtq_coll_team *t)
{
    struct coll_deferred *d;
    size_t n;

    pthread_mutex_lock(&t->defer_lock);
    n = t->ndeferred;
    if (!n) {
        pthread_mutex_unlock(&t->defer_lock);
        return;
    }
    d = malloc(n * sizeof(*d));
    if (d)
        memcpy(d, t->deferred, n * sizeof(*d));
    t->ndeferred = 0;
    pthread_mutex_unlock(&t->defer_lock);
    for (size_t i = 0; d && i < n; i++)
        issue(d[i].req, d[i].send);
    free(d);
}

/* Sends of `req` all DONE? (Their status joins the instance's.) */
/* Whether the call may complete before send `si`'s acknowledgement: its
 * piece travelled in the put (LOCAL: the transport has it), rather than
 * being left for the receiver to read from this rank's memory. */
static int send_acked_later(const struct xtq_coll_req *req, uint32_t si)
{
    const struct xtq_coll_team *t = req->team;
    const struct coll_sched *s = &req->sched->s;
    const struct coll_op *op = &s->ops[s->send_op[si]];
    return t->ack_later && !send_by_cma(t, op, t->slots[req->slot].exec.esize) &&
           !send_by_peer(t, op);
}

/* Every send handed on and DONE, or LOCAL where its ack may come later. */
static int sends_done(struct xtq_coll_req *req)
{
    const struct coll_sched *s = &req->sched->s;
    while (req->send_cursor < s->nsends) {
        uint32_t si = req->send_cursor;
        if (!atomic_load_explicit(&req->issued[si], memory_order_acquire))
            return 0;
        uint32_t st = xtq_completion_state(&req->comp[si]);
        if (!(st & XTQ_COMPLETION_DONE)) {
            if (!(st & XTQ_COMPLETION_LOCAL) || !send_acked_later(req, si))
                return 0;
            req->send_cursor++;
            continue;
        }
        if (req->comp[si].status) {
            note(req->team, "put to rank %d: %s", (int)req->comp[si].target,
                 xtq_strerror(req->comp[si].status));
            fail_inst(req, req->comp[si].status);
        }
        req->send_cursor++;
    }
    return 1;
}

static int broadcast_abort(struct xtq_coll_req *req, int err);

/* Keep a call's completion objects while a put it issued is not DONE. */
static void linger_or_free(struct xtq_coll_team *t, struct xtq_coll_req *req)
{
    const struct coll_sched *s = &req->sched->s;
    struct coll_linger *l = NULL;

    for (uint32_t si = 0; req->issued && req->comp && si < s->nsends; si++)
        if (atomic_load(&req->issued[si]) && !xtq_completion_test(&req->comp[si])) {
            l = malloc(sizeof(*l));
            break;
        }
    if (l) {
        *l = (struct coll_linger){t->linger, req->instance, s->nsends, req->comp, req->issued};
        t->linger = l;
    } else {
        free(req->comp);
        free((void *)req->issued);
    }
    req->comp = NULL;
    req->issued = NULL;
}

/* Free what has been acknowledged since. A put that failed after its call
 * completed here (the peer rejected it, or went down) breaks the team from
 * the next call on: the peer is no longer where this rank thinks it is. */
static void linger_reap(struct xtq_coll_team *t)
{
    for (struct coll_linger **pp = &t->linger, *l; (l = *pp) != NULL;) {
        uint32_t k = 0;
        while (k < l->n && (!atomic_load(&l->issued[k]) || xtq_completion_test(&l->comp[k])))
            k++;
        if (k < l->n) {
            pp = &l->next;
            continue;
        }
        for (k = 0; k < l->n; k++)
            if (atomic_load(&l->issued[k]) && l->comp[k].status) {
                note(t, "put of completed call %llu: %s", (unsigned long long)l->instance,
                     xtq_strerror(l->comp[k].status));
                team_break(t, l->instance + 1, l->comp[k].status);
                break;
            }
        *pp = l->next;
        free(l->comp);
        free((void *)l->issued);
        free(l);
    }
}

/* Give the slot to instance j + S. */
static void reap(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];

    slot->inst = NULL;
    atomic_store_explicit(&slot->exec.stash_used, 0, memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&slot->ctl, memory_order_acquire) & ~COLL_CTL_POSTED;
    for (uint64_t k = 0; k < used && k < COLL_EARLY_MAX; k++)
        atomic_store_explicit(&slot->early[k].ready, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->exec.error, 0, memory_order_relaxed);
    atomic_store_explicit(&slot->ctl, 0, memory_order_release);
    atomic_store_explicit(&slot->expect, req->instance + t->nslots, memory_order_release);
    req->sched->refs--;
    linger_or_free(t, req);
    /* A failed instance's chained copies may not have run: they decrement
     * this slot's triggers, which the next instance sets again. */
    if (req->ncopies && req->status) {
        if (req->ready_path == COLL_READY_STREAM)
            (void)coll_gpu_copy(t->gpu, NULL, NULL, 0, 1); /* the stream's copies */
        else
            (void)coll_gpu_fence(t->gpu, gpu_timeout(t));
    }
    free(req->cmd);
    free((void *)req->send_left);
    free(req->gated);
    free(req->ready);
    free(req->copies);
    req->gated = NULL;
    req->ready = NULL;
    req->ready_path = 0;
    req->copies = NULL;
    req->ncopies = 0;
    req->comp = NULL;
    req->cmd = NULL;
    req->send_left = NULL;
    req->issued = NULL;
    req->state = REQ_DONE;
}

/* One look at an active request; 1 when it finished (status set). */
static int check(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct coll_slot *slot = &t->slots[req->slot];
    int err = atomic_load(&slot->exec.error);

    if (!err)
        err = broken_for(t, req->instance);
    if (err) {
        req->status = broadcast_abort(req, err);
        reap(req);
        return 1;
    }
    if (atomic_load_explicit(&req->recvs_left, memory_order_acquire) != 0 || !sends_done(req) ||
        atomic_load_explicit(&slot->busy, memory_order_acquire) != 0)
        return 0;
    err = atomic_load(&slot->exec.error);
    if (err) {
        req->status = broadcast_abort(req, err);
    } else {
        req->status = 0;
        if (t->prof) {
            int64_t now = now_ns();
            prof_add(t, PROF_CALL, req->t_start, now);
            prof_add(t, PROF_TO_MSG, req->t_posted, atomic_load(&req->t_first_msg));
            prof_add(t, PROF_TO_DONE, atomic_load(&req->t_recvs_done), now);
            atomic_fetch_add_explicit(
                &t->prof_ns[PROF_STASH],
                atomic_load_explicit(&t->slots[req->slot].exec.stash_used, memory_order_relaxed),
                memory_order_relaxed);
            atomic_fetch_add_explicit(&t->prof_n[PROF_STASH], 1, memory_order_relaxed);
        }
    }
    reap(req);
    return 1;
}

static void unlink_req(struct xtq_coll_req *req)
{
    struct xtq_coll_team *t = req->team;
    struct xtq_coll_req **pp = &t->head, *prev = NULL;
    while (*pp && *pp != req) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = req->next;
        if (t->tail == req)
            t->tail = prev;
    }
}

/* Move the team along once: deferred sends, queued posts, finished ones. */
static void progress_team(struct xtq_coll_team *t)
{
    xtq_progress(t->ctx);
    drain_deferred(t);
    post_queued(t);
    linger_reap(t);
    for (struct xtq_coll_req *r = t->head; r; r = r->next)
        if (r->state == REQ_ACTIVE)
            check(r);
    post_queued(t);
}

/* ---- errors --------------------------------------------------------------------------------- */

static int put_sync(struct xtq_coll_team *t, int peer, const struct coll_hdr *h, int64_t deadline)
{
    return put_sync_data(t, peer, h, NULL, 0, deadline);
}

/* The same with a payload, its task run on a worker (it may map memory). */
static int put_sync_data(struct xtq_coll_team *t, int peer, const struct coll_hdr *h,
                         const void *payload, size_t plen, int64_t deadline)
{
    uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(struct coll_kargs)];
    xtq_completion_t comp;
    size_t len;
    int rc = build_cmd(t, h, cmd, sizeof(cmd), &len);

    if (rc)
        return rc;
    memset(&comp, 0, sizeof(comp));
    rc = xtq_put(t->ctx, t->ranks[peer], cmd, len, payload, plen,
                 XTQ_PUT_REMOTE_COMPLETION | (plen ? XTQ_PUT_LONG_TASK : 0), &comp);
    if (rc)
        return rc;
    int64_t left = deadline - now_ns();
    rc = xtq_completion_wait(t->ctx, &comp, left > 0 ? left : 0);
    if (rc == -XTQ_ETIMEDOUT) {
        /* The completion object must outlive the put: wait it out. */
        (void)xtq_completion_wait(t->ctx, &comp, XTQ_TIMEOUT_INFINITE);
    }
    return rc;
}

static void fire_rest(struct xtq_coll_req *req)
{
    const struct coll_sched *s = &req->sched->s;
    struct xtq_coll_team *t = req->team;

    req->aborted = 1;
    drain_deferred(t);
    for (uint32_t si = 0; si < s->nsends; si++) {
        if (t->engine) {
            /* Armed puts are withdrawn: nothing computed from half the
             * inputs leaves. One that fired already runs its course (its
             * receiver ignores it); -XTQ_EALREADY says so. A send the
             * window had deferred goes out untriggered (issue() after
             * `aborted`), as before the engine could cancel. */
            if ((s->ops[s->send_op[si]].ndeps || req->gated[si]) && atomic_load(&req->issued[si]))
                (void)xtq_put_cancel(t->ctx, &req->comp[si]);
            continue;
        }
        uint32_t left = atomic_load(&req->send_left[si]);
        while (left && !atomic_compare_exchange_weak(&req->send_left[si], &left, 0))
            ;
        if (left)
            issue(req, si);
    }
}

/*
 * The instance failed with `err`. Every member learns it (ABORT with
 * remote completion: once acknowledged, that member ignores what this
 * rank sends for the instance), then this rank cancels its armed puts
 * (engine mode) or fires what it still owed (task mode), and waits for
 * its puts and for its own tasks, so the caller's buffers are free when
 * it returns.
 */
static int broadcast_abort(struct xtq_coll_req *req, int err)
{
    struct xtq_coll_team *t = req->team;
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);
    const struct coll_sched *s = &req->sched->s;

    team_break(t, req->instance, err);
    err = broken_for(t, req->instance);
    if (!t->why_printed) {
        t->why_printed = 1;
        coll_err("rank %d: %s of %llu elements (call %llu) failed: %s%s%s\n", t->rank,
                 req->kind == XTQ_COLL_REDUCE ? "reduce" : "allreduce",
                 (unsigned long long)req->count, (unsigned long long)req->instance,
                 xtq_strerror(err), atomic_load(&t->why_ready) ? ": " : "",
                 atomic_load(&t->why_ready) ? t->why : "");
    }
    for (int q = 0; q < t->size; q++) {
        struct coll_hdr h;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_ABORT);
        h.slot = (uint16_t)req->slot;
        h.instance = req->instance;
        h.status = err;
        (void)put_sync(t, q, &h, deadline);
    }
    fire_rest(req);
    for (;;) {
        drain_deferred(t);
        int all = 1;
        for (uint32_t si = 0; si < s->nsends; si++)
            if (!atomic_load(&req->issued[si]) || !xtq_completion_test(&req->comp[si]))
                all = 0;
        if (all || now_ns() > deadline)
            break;
        xtq_progress(t->ctx);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    while (atomic_load(&t->active_tasks) > 0) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return err;
}

/* ---- waiting -----------------------------------------------------------------------------------
 */

static int wait_event(struct xtq_coll_team *t, int64_t *seen, int64_t nap_ns)
{
    int64_t v = xtq_signal_load(t->event);
    if (v != *seen) {
        *seen = v;
        return 1;
    }
    (void)xtq_signal_wait(t->event, XTQ_SIGNAL_NE, v, nap_ns, NULL);
    *seen = xtq_signal_load(t->event);
    return 0;
}

int xtq_coll_test(xtq_coll_req_t *req, int *done)
{
    if (!req || !done)
        return -XTQ_EINVAL;
    progress_team(req->team);
    if (req->state != REQ_DONE) {
        *done = 0;
        return 0;
    }
    *done = 1;
    int st = req->status;
    unlink_req(req);
    free(req);
    return st;
}

int xtq_coll_wait(xtq_coll_req_t *req, int64_t timeout_ns)
{
    struct xtq_coll_team *t;
    int64_t seen, start = now_ns(), nap = 20000, spin_end;
    int done = 0, rc;

    if (!req)
        return -XTQ_EINVAL;
    t = req->team;
    seen = xtq_signal_load(t->event);
    spin_end = start + t->spin_ns;
    for (;;) {
        progress_team(t);
        if (req->state == REQ_DONE)
            break;
        /* Receives done, sends not yet LOCAL or acknowledged: wait on the
         * put itself (the engine wakes it), not on the team's event. */
        if (req->state == REQ_ACTIVE && atomic_load(&req->recvs_left) == 0 &&
            req->send_cursor < req->sched->s.nsends &&
            atomic_load(&req->issued[req->send_cursor])) {
            uint32_t si = req->send_cursor;
            (void)xtq_completion_wait_state(
                t->ctx, &req->comp[si],
                send_acked_later(req, si) ? XTQ_COMPLETION_LOCAL : XTQ_COMPLETION_DONE, 1000000);
            continue;
        }
        int64_t waited = now_ns() - start;
        if (timeout_ns != XTQ_TIMEOUT_INFINITE && waited >= timeout_ns)
            return -XTQ_ETIMEDOUT;
        if (t->timeout_ns && waited > t->timeout_ns && req->state == REQ_ACTIVE) {
            coll_err("rank %d: collective %llu not complete after %lld ms\n", t->rank,
                     (unsigned long long)req->instance, (long long)(t->timeout_ns / 1000000));
            note(t, "not complete after XTQ_COLL_TIMEOUT_MS");
            fail_inst(req, -XTQ_ETIMEDOUT);
            continue;
        }
        /* Poll a while after each event (XTQ_COLL_SPIN_US), then sleep. */
        if (t->spin_ns) {
            int64_t v = xtq_signal_load(t->event), now = now_ns();
            if (v != seen) {
                seen = v;
                spin_end = now + t->spin_ns;
                continue;
            }
            if (now < spin_end) {
                cpu_pause();
                continue;
            }
        }
        if (wait_event(t, &seen, nap)) {
            nap = 20000;
            spin_end = now_ns() + t->spin_ns;
        } else if (nap < 1000000) {
            nap *= 2;
        }
    }
    rc = xtq_coll_test(req, &done);
    return rc;
}

/* ---- calls ---------------------------------------------------------------------------------- */

static int start(xtq_coll_team_t *t, enum xtq_coll_kind kind, const void *sendbuf, void *recvbuf,
                 size_t count, enum xtq_datatype type, enum xtq_op op, int root,
                 xtq_coll_req_t **out)
{
    struct xtq_coll_req *req;
    struct coll_params p;
    int inplace, rc;

    if (!t || !out || (unsigned)type >= XTQ_DT_COUNT || (unsigned)op >= XTQ_OP_COUNT ||
        op == XTQ_OP_REPLACE || op == XTQ_OP_NO_OP || !xtq_reduce_supported(op, type))
        return -XTQ_EINVAL;
    if (kind == XTQ_COLL_REDUCE && (root < 0 || root >= t->size))
        return -XTQ_EINVAL;
    if (t->gpu && !coll_gpu_supported(op, type))
        return -XTQ_EINVAL; /* no long double on the GPU */
    inplace = sendbuf == XTQ_COLL_IN_PLACE;
    if (inplace && kind == XTQ_COLL_REDUCE && t->rank != root)
        return -XTQ_EINVAL;
    if (count &&
        ((!inplace && !sendbuf) || ((kind == XTQ_COLL_ALLREDUCE || t->rank == root) && !recvbuf)))
        return -XTQ_EINVAL;
    if (count > (UINT64_MAX >> 8) / xtq_datatype_size(type))
        return -XTQ_EOVERFLOW;
    rc = broken_for(t, t->next_instance);
    if (rc)
        return rc;
    req = calloc(1, sizeof(*req));
    if (!req)
        return -XTQ_ENOMEM;
    req->team = t;
    req->kind = kind;
    req->sendbuf = sendbuf;
    req->recvbuf = recvbuf;
    req->count = count;
    req->type = type;
    req->op = op;
    req->root = root;
    req->instance = t->next_instance++;
    req->slot = (unsigned)(req->instance % t->nslots);
    req->t_start = t->prof ? now_ns() : 0;
    fill_params(t, &p, kind, count, type, root, inplace);
    req->sched = sched_get(t, &p, &rc);
    if (!req->sched) {
        free(req);
        t->next_instance--;
        return rc;
    }
    req->state = REQ_QUEUED;
    if (t->tail)
        t->tail->next = req;
    else
        t->head = req;
    t->tail = req;
    post_queued(t);
    *out = req;
    return 0;
}

int xtq_coll_iallreduce(xtq_coll_team_t *t, const void *sendbuf, void *recvbuf, size_t count,
                        enum xtq_datatype type, enum xtq_op op, xtq_coll_req_t **req)
{
    return start(t, XTQ_COLL_ALLREDUCE, sendbuf, recvbuf, count, type, op, 0, req);
}

int xtq_coll_ireduce(xtq_coll_team_t *t, const void *sendbuf, void *recvbuf, size_t count,
                     enum xtq_datatype type, enum xtq_op op, int root, xtq_coll_req_t **req)
{
    return start(t, XTQ_COLL_REDUCE, sendbuf, recvbuf, count, type, op, root, req);
}

int xtq_coll_allreduce(xtq_coll_team_t *t, const void *sendbuf, void *recvbuf, size_t count,
                       enum xtq_datatype type, enum xtq_op op)
{
    xtq_coll_req_t *req;
    int rc = xtq_coll_iallreduce(t, sendbuf, recvbuf, count, type, op, &req);
    return rc ? rc : xtq_coll_wait(req, XTQ_TIMEOUT_INFINITE);
}

int xtq_coll_reduce(xtq_coll_team_t *t, const void *sendbuf, void *recvbuf, size_t count,
                    enum xtq_datatype type, enum xtq_op op, int root)
{
    xtq_coll_req_t *req;
    int rc = xtq_coll_ireduce(t, sendbuf, recvbuf, count, type, op, root, &req);
    return rc ? rc : xtq_coll_wait(req, XTQ_TIMEOUT_INFINITE);
}

enum xtq_coll_alg xtq_coll_algorithm(const xtq_coll_team_t *t, enum xtq_coll_kind kind,
                                     size_t count, enum xtq_datatype type)
{
    if (!t || (unsigned)type >= XTQ_DT_COUNT)
        return XTQ_COLL_ALG_AUTO;
    if (t->alg != XTQ_COLL_ALG_AUTO)
        return t->alg;
    return coll_choose_alg(kind, t->size, count, (uint32_t)xtq_datatype_size(type), &t->th);
}

enum xtq_coll_triggers xtq_coll_team_triggers(const xtq_coll_team_t *t)
{
    return t && t->engine ? XTQ_COLL_TRIGGERS_ENGINE : XTQ_COLL_TRIGGERS_TASK;
}

XTQ_COLL_API int64_t coll_team_ready_sends(const struct xtq_coll_team *t)
{
    if (!t->gpu || !t->peer || t->ready == COLL_READY_OFF)
        return -1;
    if (t->ready == COLL_READY_COPY && (!coll_gpu_can_chain(t->gpu) || !coll_gpu_copy_max(t->gpu)))
        return -1;
    if (t->ready == COLL_READY_AUTO && !coll_gpu_can_chain(t->gpu))
        return -1; /* small calls wait for their copies in the post */
    return (int64_t)t->readied;
}

XTQ_COLL_API void coll_team_abort(struct xtq_coll_team *t, uint64_t instance, int err)
{
    abort_everywhere(t, (unsigned)(instance % t->nslots), instance, err);
}

XTQ_COLL_API uint64_t coll_team_next_instance(const struct xtq_coll_team *t)
{
    return t->next_instance;
}

XTQ_COLL_API void coll_team_drop_ready(struct xtq_coll_team *t)
{
    t->drop_ready = 1;
}

XTQ_COLL_API void coll_team_gpu_claim_extra(struct xtq_coll_team *t, uint64_t bytes)
{
    t->claim_extra = bytes;
}

XTQ_COLL_API int coll_team_gpu_wait(struct xtq_coll_team *t, const void *word, uint64_t val)
{
    if (!t->gpu)
        return -XTQ_ENOAGENT;
    return coll_gpu_wait_ready(t->gpu, word, val, gpu_ready_ns(t), gpu_wait_timeout(t));
}

XTQ_COLL_API int64_t coll_team_chained_sends(const struct xtq_coll_team *t)
{
    if (!t->gpu || !t->engine || !coll_gpu_can_chain(t->gpu) || !coll_gpu_copy_max(t->gpu))
        return -1;
    return (int64_t)t->chained;
}

int xtq_coll_team_rank(const xtq_coll_team_t *t)
{
    return t ? t->rank : -1;
}

int xtq_coll_team_size(const xtq_coll_team_t *t)
{
    return t ? t->size : -1;
}

/* ---- teams ---------------------------------------------------------------------------------- */

/*
 * Dissemination barrier over the team's own task: in round k, tell rank
 * + 2^k and wait for rank - 2^k. A member that has not registered yet
 * refuses the put (-XTQ_ENOKERNEL / -XTQ_ENOQUEUE): try again shortly.
 */
static int team_barrier(struct xtq_coll_team *t)
{
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);
    uint64_t epoch = ++t->hello_epoch;
    int64_t seen = xtq_signal_load(t->event);

    for (int k = 0, dist = 1; dist < t->size; k++, dist *= 2) {
        struct coll_hdr h;
        int rc;
        hdr_init(t, &h, COLL_MSG_HELLO);
        h.status = k;
        for (;;) {
            rc = put_sync(t, (t->rank + dist) % t->size, &h, deadline);
            if (rc != -XTQ_ENOKERNEL && rc != -XTQ_ENOQUEUE)
                break;
            if (now_ns() > deadline)
                return -XTQ_ETIMEDOUT;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (rc)
            return rc;
        while (atomic_load(&t->hello[k]) < epoch) {
            if (now_ns() > deadline)
                return -XTQ_ETIMEDOUT;
            xtq_progress(t->ctx);
            wait_event(t, &seen, 1000000);
        }
    }
    return 0;
}

/*
 * Whether this libxtq's triggered puts work as the schedules use them: one
 * to ourselves, armed on a count-down at 1 that a host-side decrement
 * brings to 0 after the arming, must complete without error. (An engine
 * without triggers, or whose triggers do not wake on a signal change,
 * leaves the sends to the tasks: XTQ_COLL_TRIGGERS=auto.)
 */
static int engine_triggers_work(struct xtq_coll_team *t)
{
    uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(struct coll_kargs)];
    xtq_completion_t comp;
    xtq_put_param_t prm;
    xtq_signal_t *sig;
    struct coll_hdr h;
    size_t len;
    int rc;

    hdr_init(t, &h, COLL_MSG_HELLO);
    h.status = -1; /* a probe: the task ignores it */
    if (build_cmd(t, &h, cmd, sizeof(cmd), &len) || xtq_signal_create(1, &sig))
        return 0;
    memset(&comp, 0, sizeof(comp));
    memset(&prm, 0, sizeof(prm));
    prm.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_TRIGGER;
    prm.comp = &comp;
    prm.trigger = sig;
    prm.trigger_cond = XTQ_SIGNAL_LT;
    prm.trigger_value = 1;
    rc = xtq_putv(t->ctx, t->ranks[t->rank], cmd, len, NULL, 0, &prm);
    if (rc == 0) {
        xtq_signal_add(sig, -1);
        rc = xtq_completion_wait(t->ctx, &comp, 10000000000ll);
    }
    if (rc == -XTQ_ETIMEDOUT) /* the completion must outlive the put */
        (void)xtq_completion_wait(t->ctx, &comp, XTQ_TIMEOUT_INFINITE);
    xtq_signal_destroy(sig);
    return rc == 0;
}

/*
 * Same-host single copy (XTQ_COLL_CMA): where every rank shares this host
 * (the shm provider), each rank asks every peer to read a word of its
 * memory with process_vm_readv (a probe put with remote completion; the
 * peer's task fails it when the read fails or finds another value) and
 * sends its large pieces by address to the peers that could. A peer that
 * cannot (ptrace restrictions, another user, a container without CMA)
 * gets the piece in the put as before; "on" fails the team instead.
 */
/* Before the team's kernel is registered: a peer's probe may come as soon
 * as it is. */
static int cma_init(struct xtq_coll_team *t)
{
    const char *mode = param_value("XTQ_COLL_CMA");
    const char *prov = xtq_provider_name(t->ctx);

    t->cma_min = param_size("XTQ_COLL_CMA_MIN", 4096);
    t->cma_recv = !(mode && strcmp(mode, "off") == 0) && !t->gpu && t->size > 1 && prov &&
                  strcmp(prov, "shm") == 0;
    if (!t->cma_recv)
        return 0;
    t->peer_pid = calloc((size_t)t->size, sizeof(*t->peer_pid));
    return t->peer_pid ? 0 : -XTQ_ENOMEM;
}

static int cma_setup(struct xtq_coll_team *t)
{
    const char *mode = param_value("XTQ_COLL_CMA");
    const char *prov = xtq_provider_name(t->ctx);
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);
    int forced = mode && strcmp(mode, "on") == 0;

    if (mode && strcmp(mode, "off") == 0)
        return 0;
    if (!t->cma_recv) {
        if (forced) {
            coll_err("XTQ_COLL_CMA=on, but this team's ranks are not all on one host's shm "
                     "provider (provider %s%s)\n",
                     prov ? prov : "?", t->gpu ? ", device memory" : "");
            return -XTQ_ENOSYS;
        }
        return 0;
    }
    t->cma_peer = calloc((size_t)t->size, 1);
    if (!t->cma_peer)
        return -XTQ_ENOMEM;
    t->cma_probe = ((uint64_t)t->id << 32) ^ (uint64_t)getpid() ^ 0x434d4158ull;
    for (int q = 0; q < t->size; q++) {
        struct coll_hdr h;
        int rc;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_CMA_PROBE);
        h.src_pid = (int32_t)getpid();
        h.src_addr = (uint64_t)(uintptr_t)&t->cma_probe;
        h.count = t->cma_probe;
        rc = put_sync(t, q, &h, deadline);
        if (rc == 0) {
            t->cma_peer[q] = 1;
            t->cma_peers++;
        } else if (forced) {
            coll_err("XTQ_COLL_CMA=on, but rank %d cannot read this process's memory: %s\n", q,
                     xtq_strerror(rc));
            return -XTQ_ENOSYS;
        }
    }
    if (t->cma_peers == 0) {
        free(t->cma_peer);
        t->cma_peer = NULL;
    }
    return 0;
}

/*
 * CUDA teams on one host's shm provider (XTQ_COLL_GPU_PEER auto or on):
 * this rank's pieces stay in its GPU where every peer can map its buffers
 * (CUDA IPC). The probe: each peer maps a small buffer of this rank's and
 * reads a word back; any that cannot leaves the team sending from pinned
 * host mirrors (auto) or fails its creation (on). Receivers take both.
 */
static int peer_setup(struct xtq_coll_team *t)
{
    const char *mode = param_value("XTQ_COLL_GPU_PEER");
    const char *prov = xtq_provider_name(t->ctx);
    int forced = mode && strcmp(mode, "on") == 0;
    int64_t deadline = now_ns() + (t->timeout_ns ? t->timeout_ns : INT64_MAX / 4);
    uint8_t handle[COLL_GPU_IPC_HANDLE];
    uint64_t word = ((uint64_t)t->id << 32) ^ (uint64_t)getpid() ^ 0x47505550ull;
    void *p = NULL;
    int rc, ok = 0;

    if (!t->gpu || t->size < 2)
        return 0;
    if (forced && (!prov || strcmp(prov, "shm") != 0)) {
        coll_err("XTQ_COLL_GPU_PEER=on, but this team's ranks are not all on one host's shm "
                 "provider (provider %s)\n",
                 prov ? prov : "?");
        return -XTQ_ENOSYS;
    }
    /* Off, or another provider: no probe, but a vote all the same (every
     * rank waits for every verdict, whatever its own settings). */
    if ((mode && strcmp(mode, "off") == 0) || !prov || strcmp(prov, "shm") != 0)
        rc = -XTQ_ENOSYS;
    else
        rc = coll_gpu_ipc_alloc(t->gpu, 256, &p, handle);
    if (rc == 0)
        rc = coll_gpu_copy(t->gpu, p, &word, sizeof(word), 1);
    for (int q = 0; q < t->size && rc == 0; q++) {
        struct coll_hdr h;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_GPU_PROBE);
        h.count = word;
        rc = put_sync_data(t, q, &h, handle, sizeof(handle), deadline);
        if (rc)
            note(t, "rank %d cannot map this rank's GPU memory: %s", q, xtq_strerror(rc));
        else
            ok++;
    }
    if (p)
        coll_gpu_ipc_free(t->gpu, p);
    /* Every rank the same way (the piece size is part of each call's
     * signature): peer reads only where every rank's peers mapped it. */
    int mine = rc == 0 && ok == t->size - 1, vrc = 0;
    int64_t seen = xtq_signal_load(t->event);
    for (int q = 0; q < t->size && vrc == 0; q++) {
        struct coll_hdr h;
        if (q == t->rank)
            continue;
        hdr_init(t, &h, COLL_MSG_GPU_VOTE);
        h.status = mine;
        vrc = put_sync(t, q, &h, deadline);
    }
    while (vrc == 0 && atomic_load_explicit(&t->peer_votes, memory_order_acquire) < t->size - 1) {
        if (now_ns() > deadline)
            vrc = -XTQ_ETIMEDOUT;
        xtq_progress(t->ctx);
        wait_event(t, &seen, 1000000);
    }
    if (vrc)
        return vrc;
    t->peer = mine && atomic_load(&t->peer_yes) == t->size - 1;
    {
        const char *rv = param_value("XTQ_COLL_GPU_READY");
        t->ready = !t->peer || !rv ? COLL_READY_OFF
                   : strcasecmp(rv, "stream") == 0 ? COLL_READY_STREAM
                   : strcasecmp(rv, "auto") == 0   ? COLL_READY_AUTO
                   : param_on("XTQ_COLL_GPU_READY") || strcasecmp(rv, "copy") == 0
                       ? COLL_READY_COPY
                       : COLL_READY_OFF;
    }
    if (!t->peer && forced) {
        coll_err("XTQ_COLL_GPU_PEER=on, but a rank cannot map a peer's GPU memory%s%s\n",
                 rc ? ": " : "", rc ? xtq_strerror(rc) : "");
        return -XTQ_ENOSYS;
    }
    /* Nothing travels in the message: pieces need only bound the
     * pipeline, not the stash or the transport's copies. */
    if (t->peer)
        t->piece_bytes = param_size("XTQ_COLL_GPU_PEER_PIECE", 1u << 20);
    return 0;
}

int xtq_coll_team_gpu_peer(const xtq_coll_team_t *t)
{
    return t ? t->peer : -1;
}

int xtq_coll_team_cma_peers(const xtq_coll_team_t *t)
{
    return t ? t->cma_peers : -1;
}

static uint32_t team_hash(const int *ranks, int n, uint32_t index)
{
    uint32_t h = 2166136261u ^ index;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)ranks[i];
        h *= 16777619u;
    }
    return h;
}

static void pmap_close(struct xtq_coll_team *t);

static void team_free(struct xtq_coll_team *t)
{
    if (t->kernel) {
        (void)xtq_unregister_kernel(t->ctx, t->index);
        xtq_kernel_destroy(t->kernel);
    }
    if (t->queue) {
        (void)xtq_unregister_queue(t->ctx, t->index);
        xtq_queue_destroy(t->queue);
    }
    for (unsigned i = 0; t->slots && i < t->nslots; i++) {
        struct coll_slot *s = &t->slots[i];
        free((void *)s->exec.rstate);
        free((void *)s->exec.rstash);
        if (t->gpu) {
            if (s->exec.stash)
                coll_gpu_deregister(t->gpu, s->exec.stash,
                                    s->exec.stash_cap ? s->exec.stash_cap : 1);
            coll_gpu_free(t->gpu, s->scratch);
            coll_gpu_host_free(t->gpu, s->mscratch);
            s->scratch = NULL;
            coll_gpu_free(t->gpu, s->rwork);
            s->rwork = NULL;
            for (unsigned b = 0; b < COLL_BUF_COUNT; b++)
                coll_gpu_host_free(t->gpu, s->mirror[b]);
            coll_gpu_host_free(t->gpu, s->chain_args);
            coll_gpu_host_free(t->gpu, s->ready_host);
            coll_gpu_ipc_free(t->gpu, s->pmirror);
        }
        if (s->ready_sig)
            xtq_signal_destroy(s->ready_sig);
        free(s->exec.stash);
        free(s->scratch);
        free(s->rwork);
        for (uint32_t k = 0; k < s->ntrig; k++)
            xtq_signal_destroy(s->trig[k]);
        free(s->trig);
    }
    free(t->slots);
    for (unsigned i = 0; i < COLL_CACHE; i++)
        coll_sched_free(&t->cache[i].s);
    if (t->event)
        xtq_signal_destroy(t->event);
    pthread_mutex_destroy(&t->defer_lock);
    free(t->deferred);
    if (t->gpu) {
        pmap_close(t);
        coll_gpu_close(t->gpu);
    }
    free(t->pmap);
    free(t->cma_peer);
    free((void *)t->peer_pid);
    free(t->ranks);
    free(t);
}

/* Peers' buffers mapped here, unmapped before the agent goes. */
static void pmap_close(struct xtq_coll_team *t)
{
    for (size_t i = 0; t->pmap && t->gpu && i < (size_t)t->size * t->nslots; i++)
        if (t->pmap[i].base)
            coll_gpu_ipc_close(t->gpu, t->pmap[i].base);
    free(t->pmap);
    t->pmap = NULL;
}

int xtq_coll_team_create(xtq_ctx_t *ctx, const xtq_coll_team_attr_t *attr, xtq_coll_team_t **out)
{
    struct xtq_coll_team *t;
    uint64_t mask = attr ? attr->field_mask : 0;
    const char *trig;
    int rc, me = ctx ? xtq_rank(ctx) : -1;

    if (!ctx || !out)
        return -XTQ_EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -XTQ_ENOMEM;
    pthread_mutex_init(&t->defer_lock, NULL);
    atomic_store(&t->broken_at, UINT64_MAX);
    t->ctx = ctx;
    t->rank = -1;
    if (mask & XTQ_COLL_TEAM_ATTR_FIELD_RANKS) {
        if (!attr->ranks || attr->nranks < 1) {
            rc = -XTQ_EINVAL;
            goto fail;
        }
        t->size = attr->nranks;
    } else {
        t->size = xtq_size(ctx);
    }
    t->ranks = malloc((size_t)t->size * sizeof(int));
    if (!t->ranks) {
        rc = -XTQ_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < t->size; i++) {
        t->ranks[i] = (mask & XTQ_COLL_TEAM_ATTR_FIELD_RANKS) ? attr->ranks[i] : i;
        if (t->ranks[i] < 0 || t->ranks[i] >= xtq_size(ctx)) {
            rc = -XTQ_EINVAL;
            goto fail;
        }
        if (t->ranks[i] == me)
            t->rank = i;
    }
    if (t->rank < 0) {
        rc = -XTQ_EINVAL;
        goto fail;
    }
    t->mem = (mask & XTQ_COLL_TEAM_ATTR_FIELD_MEM) ? attr->mem : XTQ_COLL_MEM_HOST;
    if (t->mem == XTQ_COLL_MEM_CUDA) {
        char why[256] = "";
        uint64_t task = (mask & XTQ_COLL_TEAM_ATTR_FIELD_CUDA_TASK) ? attr->cuda_task : 0;
        int dev = (mask & XTQ_COLL_TEAM_ATTR_FIELD_CUDA_DEVICE) ? attr->cuda_device : -1;
        struct coll_gpu_opts o = {param_on("XTQ_COLL_GPU_INLINE"),
                                  param_size("XTQ_COLL_GPU_COPY_MAX", 4096),
                                  param_on("XTQ_COLL_GPU_CHAIN"),
                                  param_on("XTQ_COLL_GPU_GRID")
                                      ? (uint32_t)param_size("XTQ_CUDA_GRID_MIN", 16)
                                      : 0};
        rc = coll_gpu_open(ctx, task, dev, &o, &t->gpu, why, sizeof(why));
        if (rc) {
            coll_err("rank %d: no CUDA team: %s\n", me, why);
            t->gpu = NULL;
            goto fail;
        }
    } else if (t->mem != XTQ_COLL_MEM_HOST) {
        rc = -XTQ_EINVAL;
        goto fail;
    }
    t->index = (mask & XTQ_COLL_TEAM_ATTR_FIELD_INDEX) ? attr->index
                                                       : xtq_table_size(ctx) - 1 - teams_created;
    t->inflight = (mask & XTQ_COLL_TEAM_ATTR_FIELD_INFLIGHT) && attr->max_inflight
                      ? attr->max_inflight
                      : (unsigned)param_size("XTQ_COLL_INFLIGHT", 2);
    if (t->inflight < 1)
        t->inflight = 1;
    t->nslots = 2 * t->inflight;
    if (t->nslots > UINT16_MAX) {
        rc = -XTQ_EINVAL;
        goto fail;
    }
    t->alg = (mask & XTQ_COLL_TEAM_ATTR_FIELD_ALG) ? attr->alg : param_alg();
    t->th.rd_max = param_size("XTQ_COLL_RD_MAX", 16384);
    t->th.ring_min = param_size("XTQ_COLL_RING_MIN", 64u << 20);
    t->piece_bytes = param_size("XTQ_COLL_PIECE", 256u << 10);
    t->inline_max = param_size("XTQ_COLL_INLINE_MAX", 64u << 10);
    t->ack_later = (int)param_size("XTQ_COLL_ACK_LATER", 1) != 0;
    if (t->piece_bytes < 64)
        t->piece_bytes = 64;
    t->stash_cap = param_size("XTQ_COLL_STASH", 2u << 20);
    t->timeout_ns = (int64_t)param_size("XTQ_COLL_TIMEOUT_MS", 120000) * 1000000;
    {
        t->prof = param_on("XTQ_COLL_PROFILE");
        /* A waiting caller polls before it sleeps where every member could
         * have 3 cores on this host (its own, the progress thread's, an
         * agent worker's): a futex wake-up costs more than a small step. */
        const char *sv = param_value("XTQ_COLL_SPIN_US");
        long us = sv ? strtol(sv, NULL, 0) : -1;
        if (us < 0) {
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            cpu_set_t set;
            if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0 &&
                CPU_COUNT(&set) < cores)
                cores = CPU_COUNT(&set) * (long)t->size; /* bound: each has its own */
            us = cores >= 3L * t->size ? 50 : 0;
        }
        t->spin_ns = (int64_t)us * 1000;
    }
    t->id = team_hash(t->ranks, t->size, t->index);
    trig = param_value("XTQ_COLL_TRIGGERS");
    /* auto: the engine where its probe passes (below). Its host task is
     * short, and pieces over XTQ_COLL_INLINE_MAX are put long (issue()):
     * without that, every 256 KiB piece was reduced on the progress thread
     * and a 16 MiB call on 4 ranks took 2.5 x the task mode's time; with
     * it the engine is 20-30 % faster at 8 B-4 KiB and level from 16 KiB
     * (docs/allreduce.md, session 9). */
    t->engine = !(trig && strcmp(trig, "task") == 0);

    rc = xtq_signal_create(0, &t->event);
    if (rc)
        goto fail;
    rc = cma_init(t);
    if (rc)
        goto fail;
    t->slots = calloc(t->nslots, sizeof(*t->slots));
    /* Before the task is registered: a peer's handle may come as soon as
     * the peer's creation is done, before this rank's is. */
    if (t->gpu)
        t->pmap = calloc((size_t)t->size * t->nslots, sizeof(*t->pmap));
    if (!t->slots || (t->gpu && !t->pmap)) {
        rc = -XTQ_ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < t->nslots; i++) {
        struct coll_slot *s = &t->slots[i];
        atomic_store(&s->expect, i);
        s->exec.stash = malloc(t->stash_cap ? t->stash_cap : 1);
        s->exec.stash_cap = t->stash_cap;
        if (!s->exec.stash) {
            rc = -XTQ_ENOMEM;
            goto fail;
        }
        /* CUDA teams: the GPU reads kept pieces where they are. */
        if (t->gpu &&
            (rc = coll_gpu_register(t->gpu, s->exec.stash, t->stash_cap ? t->stash_cap : 1)) != 0)
            goto fail;
    }
    rc = xtq_agent_find(ctx, XTQ_AGENT_CPU, &t->agent);
    if (rc)
        goto fail;
    rc = xtq_queue_create(t->agent, COLL_QUEUE_SIZE, &t->queue);
    if (rc)
        goto fail;
    rc = xtq_kernel_create_cpu(t->agent, coll_task, sizeof(struct coll_kargs), t, &t->kernel);
    if (rc) {
        t->kernel = NULL;
        goto fail;
    }
    rc = xtq_register_queue(ctx, t->index, t->queue);
    if (rc) {
        xtq_queue_destroy(t->queue);
        t->queue = NULL;
        goto fail;
    }
    xtq_register_attr_t ra;
    memset(&ra, 0, sizeof(ra));
    ra.field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS |
                    XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS;
    ra.target_buffer = t->slots;
    ra.target_size = t->nslots * sizeof(struct coll_slot);
    ra.flags = XTQ_REGISTER_BOUNDED;
    /* With engine triggers a host team's task reduces one piece and
     * decrements signals: short (XTQ_REGISTER_SHORT). In task mode it
     * sends the next step itself (a put that may wait for the window),
     * and a CUDA team's may wait on the GPU: not short. */
    if (t->engine && !t->gpu)
        ra.flags |= XTQ_REGISTER_SHORT;
    ra.max_work_items = 1;
    /* Set before the registration publishes the kernel: a peer's task can
     * run as soon as it does, and reads it (TSan saw the late write). */
    t->bounded = 1;
    rc = xtq_register_kernel_attr(ctx, t->index, t->kernel, &ra);
    if (rc) {
        t->bounded = 0; /* nothing registered: no task reads it */
        xtq_kernel_destroy(t->kernel);
        t->kernel = NULL;
        goto fail;
    }
    teams_created++;
    if (t->engine && !engine_triggers_work(t)) {
        if (trig && strcmp(trig, "engine") == 0) {
            coll_err("XTQ_COLL_TRIGGERS=engine, but triggered puts fail here\n");
            rc = -XTQ_ENOSYS;
            goto fail;
        }
        t->engine = 0;
    }
    rc = team_barrier(t);
    if (rc)
        goto fail;
    /* After the barrier: every member's task is registered. Each rank
     * decides only for its own sends, so the members need not agree. */
    rc = cma_setup(t);
    if (rc == 0)
        rc = peer_setup(t);
    if (rc)
        goto fail;
    *out = t;
    return 0;
fail:
    team_free(t);
    return rc;
}

int xtq_coll_team_destroy(xtq_coll_team_t *t)
{
    int rc;
    if (!t)
        return -XTQ_EINVAL;
    for (struct xtq_coll_req *r = t->head; r; r = r->next)
        if (r->state != REQ_DONE)
            return -XTQ_EBUSY;
    /* Nobody sends to us any more once everyone is here (a failed call
     * returns only once its puts are done, so after a failure too); what
     * was enqueued before then still runs before the queue goes. */
    rc = team_barrier(t);
    int64_t deadline = now_ns() + 10000000000ll;
    while ((atomic_load(&t->active_tasks) > 0 || t->linger ||
            xtq_queue_load_read_index(t->queue) != xtq_queue_load_write_index(t->queue)) &&
           now_ns() < deadline) {
        struct timespec ts = {0, 50000};
        xtq_progress(t->ctx);
        linger_reap(t);
        nanosleep(&ts, NULL);
    }
    if (t->linger) {
        /* The engine may still write them: left allocated. */
        coll_err("rank %d: team destroyed with puts not acknowledged after 10 s\n", t->rank);
        t->linger = NULL;
    }
    while (t->head) {
        struct xtq_coll_req *r = t->head;
        t->head = r->next;
        free(r);
    }
    if (t->prof && atomic_load(&t->prof_n[PROF_CALL])) {
        char line[2048];
        int n = snprintf(line, sizeof(line), "xtq_coll profile: rank %d, %s team of %d, %llu calls:",
                         t->rank, t->gpu ? "CUDA" : "host", t->size,
                         (unsigned long long)atomic_load(&t->prof_n[PROF_CALL]));
        for (int k = 0; k < PROF_COUNT && n > 0 && (size_t)n < sizeof(line); k++) {
            uint64_t cnt = atomic_load(&t->prof_n[k]);
            if (cnt && k == PROF_STASH)
                n += snprintf(line + n, sizeof(line) - (size_t)n, " %s %.1f KiB per call;",
                              prof_names[k], (double)atomic_load(&t->prof_ns[k]) / cnt / 1024);
            else if (cnt > 1) /* the mean, and the mean of all but the longest */
                n += snprintf(line + n, sizeof(line) - (size_t)n,
                              " %s %.2f us (x%llu; without the longest %.2f, longest %.1f);",
                              prof_names[k], (double)atomic_load(&t->prof_ns[k]) / cnt / 1e3,
                              (unsigned long long)cnt,
                              (double)(atomic_load(&t->prof_ns[k]) - atomic_load(&t->prof_max[k])) /
                                  (double)(cnt - 1) / 1e3,
                              (double)atomic_load(&t->prof_max[k]) / 1e3);
            else if (cnt)
                n += snprintf(line + n, sizeof(line) - (size_t)n, " %s %.2f us (x1);",
                              prof_names[k], (double)atomic_load(&t->prof_ns[k]) / 1e3);
        }
        if (t->gpu && n > 0 && (size_t)n < sizeof(line))
            snprintf(line + n, sizeof(line) - (size_t)n,
                     " sends chained to a copy %llu; sent before their copy (ready word) %llu;",
                     (unsigned long long)t->chained, (unsigned long long)t->readied);
        fprintf(stderr, "%s\n", line);
    }
    team_free(t);
    return rc;
}
