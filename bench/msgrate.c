/*
 * Message rate: small tasks per second into ONE target CPU agent from 1, 2
 * and 4 initiators. Rank 0 is the target; ranks 1..N-1 are initiators
 * (launch with -np 5 for up to 4). Every mode means the same by its
 * window, so rows compare like with like:
 *
 *  window 1  one task per initiator in flight, done when the task has run:
 *            hsa, the target's application thread receives it, enqueues it
 *            (reserve, write, publish, doorbell), waits for it and replies;
 *            xtq, xtq_put(..., XTQ_PUT_REMOTE_COMPLETION) and wait.
 *  window W  W tasks per initiator in flight (--window), each done when the
 *            target has taken it into the queue: hsa, the target enqueues
 *            each arrival (one doorbell each, as the engine does) and
 *            replies at once; xtq, xtq_put without remote completion (the
 *            engine acknowledges at enqueue).
 *  hsa_db    window W, and the target's application thread also batches
 *            doorbells: it drains up to W arrivals, reserves that many
 *            slots, publishes them, rings once, then replies to each. The
 *            engine has no such batching: it is a row of its own.
 *
 * The rate is counted at the target: tasks finished / time from the start
 * barrier until the last task's completion signal. The target's CPU per
 * task is reported four ways: application thread, the engine's progress
 * thread (the emulated NIC), the CPU agent's workers, the whole process.
 * Public API only.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <xtq/xtq.h>

#include "bench_harness.h"

enum { M_HSA, M_HSA_DB, M_XTQ, M_COUNT };
static const char *const mode_names[M_COUNT] = {"hsa", "hsa_db", "xtq"};

#define KERNEL_INDEX 1
#define QUEUE_INDEX 1
#define QUEUE_SIZE 1024
#define NRECV 256
#define MAX_WINDOW 64
#define KARG_RING 8192 /* > QUEUE_SIZE + workers: an entry outlives its task */
#define MAX_PAYLOAD 256

#define CHECK_XTQ(call)                                                                    \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ < 0) {                                                                      \
            fprintf(stderr, "msgrate: %s failed: %s\n", #call, xtq_strerror(rc_));          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)
#define CHECK_FI(call)                                                                     \
    do {                                                                                    \
        int rc_ = (int)(call);                                                              \
        if (rc_ < 0) {                                                                      \
            fprintf(stderr, "msgrate: %s failed: %s\n", #call, fi_strerror(-rc_));          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)

struct task_args {
    _Atomic uint64_t *target;
    const uint8_t *payload;
    uint64_t len;
};

/* What an hsa-mode message carries: the task's arguments and payload. */
struct msg {
    uint64_t len;
    uint8_t payload[MAX_PAYLOAD];
};

/* Kernel arguments with the payload copied beside them (hsa mode: the
 * receive buffer is reposted as soon as the task is enqueued). */
struct karg {
    struct task_args args;
    uint8_t data[MAX_PAYLOAD];
};

/* OP_RECV: a task arriving at the target; OP_REPLY: the initiator's reply. */
enum op_kind { OP_SEND, OP_RECV, OP_REPLY };
struct op {
    struct fi_context2 ctx; /* first: libfabric hands it back */
    int kind;
    int idx;
    volatile int done;
};

/*
 * Tasks that arrived at the target, in arrival order. Every CQ read pushes
 * here, not only the target loop's: waiting for a reply's send completion
 * also reads the next initiator's task, and a task seen only as a done flag
 * is never enqueued or answered (2+ initiators hung). At most NRECV
 * receives are posted, each pushed once per posting: it never overflows.
 * Replies an initiator received go to `replies` the same way.
 */
static struct {
    struct op *op[NRECV];
    unsigned head, tail;
} arrivals, replies;

static struct {
    bh_opts_t o;
    unsigned window;
    bool batched_only; /* --batched: the window-W rows only */
    int rank, nranks;
    xtq_ctx_t *ctx;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t *addr;
    _Atomic uint64_t target_buf[8];
} g;

static void task_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct task_args *a = kernarg;
    uint64_t v = a->len ? a->payload[0] : 1;
    atomic_fetch_add_explicit(&a->target[0], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&a->target[1], v, memory_order_relaxed);
}

static void fab_open(const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK_FI(fi_getinfo(FI_VERSION(1, 14), NULL, NULL, 0, hints, &g.info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(g.info->fabric_attr, &g.fabric, NULL));
    CHECK_FI(fi_domain(g.fabric, g.info, &g.domain, NULL));
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .size = 1024};
    CHECK_FI(fi_cq_open(g.domain, &cqa, &g.cq, NULL));
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    CHECK_FI(fi_av_open(g.domain, &ava, &g.av, NULL));
    CHECK_FI(fi_endpoint(g.domain, g.info, &g.ep, NULL));
    CHECK_FI(fi_ep_bind(g.ep, &g.cq->fid, FI_SEND | FI_RECV));
    CHECK_FI(fi_ep_bind(g.ep, &g.av->fid, 0));
    CHECK_FI(fi_enable(g.ep));
    char name[256];
    size_t len = sizeof(name);
    memset(name, 0, sizeof(name));
    CHECK_FI(fi_getname(&g.ep->fid, name, &len));
    char *names = calloc((size_t)g.nranks, sizeof(name));
    MPI_Allgather(name, sizeof(name), MPI_BYTE, names, sizeof(name), MPI_BYTE, MPI_COMM_WORLD);
    g.addr = calloc((size_t)g.nranks, sizeof(*g.addr));
    /* One at a time: names are padded to 256 bytes, fi_av_insert wants them packed. */
    for (int i = 0; i < g.nranks; i++)
        if (fi_av_insert(g.av, names + (size_t)i * sizeof(name), 1, &g.addr[i], 0, NULL) != 1) {
            fprintf(stderr, "msgrate: fi_av_insert failed\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    free(names);
}

static void fab_close(void)
{
    fi_close(&g.ep->fid);
    fi_close(&g.av->fid);
    fi_close(&g.cq->fid);
    fi_close(&g.domain->fid);
    fi_close(&g.fabric->fid);
    fi_freeinfo(g.info);
    free(g.addr);
}

/* Read completions: mark them done, queue task arrivals; spins, then yields
 * (oversubscribed hosts). */
static void fab_poll(unsigned *idle)
{
    struct fi_cq_entry e[64];
    ssize_t n = fi_cq_read(g.cq, e, sizeof(e) / sizeof(e[0]));
    if (n > 0) {
        *idle = 0;
        for (ssize_t i = 0; i < n; i++) {
            struct op *op = e[i].op_context;
            op->done = 1;
            if (op->kind == OP_RECV)
                arrivals.op[arrivals.tail++ % NRECV] = op;
            else if (op->kind == OP_REPLY)
                replies.op[replies.tail++ % NRECV] = op;
        }
        return;
    }
    if (n != -FI_EAGAIN) {
        struct fi_cq_err_entry err = {0};
        fi_cq_readerr(g.cq, &err, 0);
        fprintf(stderr, "msgrate: completion error: %s\n", fi_strerror(err.err));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (++*idle > 200)
        sched_yield();
}

static void fab_wait(struct op *op)
{
    unsigned idle = 0;
    while (!op->done)
        fab_poll(&idle);
}

static void post_recv(void *buf, size_t len, struct op *op)
{
    op->done = 0;
    ssize_t rc;
    while ((rc = fi_recv(g.ep, buf, len, NULL, FI_ADDR_UNSPEC, &op->ctx)) == -FI_EAGAIN)
        ;
    CHECK_FI(rc);
}

/* An 8-byte reply needs no completion: injected (retried while the
 * provider is out of room). */
static void inject_reply(const uint64_t *v, fi_addr_t to)
{
    ssize_t rc;
    unsigned idle = 0;
    while ((rc = fi_inject(g.ep, v, sizeof(*v), to)) == -FI_EAGAIN)
        fab_poll(&idle);
    CHECK_FI(rc);
}

static void post_send(const void *buf, size_t len, fi_addr_t to, struct op *op)
{
    op->done = 0;
    ssize_t rc;
    unsigned idle = 0;
    /* -FI_EAGAIN is the peer's flow control: progress our CQ and retry. */
    while ((rc = fi_send(g.ep, buf, len, NULL, to, &op->ctx)) == -FI_EAGAIN)
        fab_poll(&idle);
    CHECK_FI(rc);
}

/* ---- target --------------------------------------------------------------- */

struct target {
    xtq_queue_t *queue;
    xtq_kernel_t *kernel;
    xtq_signal_t *count;
    struct msg *rbuf;
    struct op rop[NRECV];
    struct op reply_op;
    uint64_t reply;
    struct karg *karg;
    uint64_t next_karg;
};

static void fill_packet(struct target *t, xtq_aql_packet_t *p, const struct msg *m)
{
    struct karg *k = &t->karg[t->next_karg++ % KARG_RING];
    size_t len = m->len < MAX_PAYLOAD ? m->len : MAX_PAYLOAD;
    memcpy(k->data, m->payload, len);
    k->args = (struct task_args){g.target_buf, k->data, len};
    p->kernel.setup = 1u << XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
    p->kernel.workgroup_size_x = p->kernel.workgroup_size_y = p->kernel.workgroup_size_z = 1;
    p->kernel.grid_size_x = p->kernel.grid_size_y = p->kernel.grid_size_z = 1;
    p->kernel.private_segment_size = p->kernel.group_segment_size = 0;
    p->kernel.kernel_object = xtq_kernel_object(t->kernel);
    p->kernel.kernarg_address = &k->args;
    p->kernel.reserved2 = 0;
    p->kernel.completion_signal = xtq_signal_handle(t->count);
}

static uint16_t kernel_header_bits(void)
{
    return xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                          XTQ_FENCE_SCOPE_SYSTEM);
}

/* The hsa-mode target application thread: receive, enqueue, reply.
 * `window` 1: reply once the task has run; W: reply once it is enqueued;
 * `db`: enqueue up to W arrivals behind one doorbell. */
static void target_hsa(struct target *t, uint64_t total, unsigned window, bool db)
{
    uint64_t got = 0;
    unsigned idle = 0;
    int64_t expect = (int64_t)total;
    t->reply_op.done = 1;
    unsigned max = db ? window : 1;
    while (got < total) {
        if (arrivals.head == arrivals.tail)
            fab_poll(&idle);
        unsigned nrecv = 0;
        struct op *recvd[MAX_WINDOW];
        while (nrecv < max && arrivals.head != arrivals.tail)
            recvd[nrecv++] = arrivals.op[arrivals.head++ % NRECV];
        if (!nrecv)
            continue;
        got += nrecv;
        if (window == 1) {
            /* One task: enqueue it, wait for it, reply to its initiator. */
            xtq_aql_packet_t p;
            memset(&p, 0, sizeof(p));
            fill_packet(t, &p, &t->rbuf[recvd[0]->idx]);
            p.kernel.header = kernel_header_bits();
            CHECK_XTQ(xtq_queue_submit(t->queue, &p, XTQ_TIMEOUT_INFINITE, NULL));
            expect--;
            CHECK_XTQ(xtq_signal_wait(t->count, XTQ_SIGNAL_EQ, expect, XTQ_TIMEOUT_INFINITE,
                                      NULL));
            uint64_t from = t->rbuf[recvd[0]->idx].payload[1];
            post_recv(&t->rbuf[recvd[0]->idx], sizeof(struct msg), recvd[0]);
            fab_wait(&t->reply_op);
            post_send(&t->reply, sizeof(t->reply), g.addr[from], &t->reply_op);
            continue;
        }
        /* Reserve n slots, write, publish, ring once (n is 1 without db). */
        uint64_t first;
        while (xtq_queue_reserve(t->queue, nrecv, &first) == -XTQ_EAGAIN)
            sched_yield();
        for (unsigned i = 0; i < nrecv; i++) {
            xtq_aql_packet_t *slot = xtq_queue_slot(t->queue, first + i);
            fill_packet(t, slot, &t->rbuf[recvd[i]->idx]);
            xtq_queue_publish(t->queue, first + i, kernel_header_bits(), slot->kernel.setup);
        }
        xtq_queue_ring_doorbell(t->queue, first + nrecv - 1);
        /* Taken: tell each initiator, as the engine's ack at enqueue does. */
        for (unsigned i = 0; i < nrecv; i++) {
            uint64_t from = t->rbuf[recvd[i]->idx].payload[1];
            post_recv(&t->rbuf[recvd[i]->idx], sizeof(struct msg), recvd[i]);
            inject_reply(&t->reply, g.addr[from]);
        }
    }
    fab_wait(&t->reply_op);
}

/* ---- initiators ---------------------------------------------------------- */

/* An initiator's reply receives: posted once (MAX_WINDOW of them), each
 * reposted as its reply is counted, for every phase. */
static struct op reply_op[MAX_WINDOW];
static uint64_t reply_buf[MAX_WINDOW];

static void initiator_post_replies(void)
{
    for (unsigned i = 0; i < MAX_WINDOW; i++) {
        reply_op[i].kind = OP_REPLY;
        post_recv(&reply_buf[i], sizeof(reply_buf[i]), &reply_op[i]);
    }
}

/* Count one reply (polling for it when `wait`); false when none came. */
static bool take_reply(bool wait)
{
    unsigned idle = 0;
    while (replies.head == replies.tail) {
        if (!wait)
            return false;
        fab_poll(&idle);
    }
    struct op *r = replies.op[replies.head++ % NRECV];
    post_recv(&reply_buf[r - reply_op], sizeof(reply_buf[0]), r);
    return true;
}

/* At most `window` tasks without their reply; a send buffer is reused once
 * its send completed. */
static void initiator_hsa(uint64_t iters, size_t size, unsigned window)
{
    unsigned w = window;
    struct msg *m = calloc(w, sizeof(*m));
    struct op *sop = calloc(w, sizeof(*sop));
    unsigned inflight = 0;
    for (unsigned i = 0; i < w; i++) {
        m[i].len = size;
        memset(m[i].payload, 1, MAX_PAYLOAD);
        m[i].payload[1] = (uint8_t)g.rank; /* who to reply to */
        sop[i].kind = OP_SEND;
        sop[i].done = 1;
    }
    size_t len = offsetof(struct msg, payload) + (size > 2 ? size : 2);
    for (uint64_t i = 0; i < iters; i++) {
        unsigned k = (unsigned)(i % w);
        while (take_reply(inflight >= w))
            inflight--;
        fab_wait(&sop[k]);
        post_send(&m[k], len, g.addr[0], &sop[k]);
        inflight++;
    }
    for (; inflight; inflight--)
        take_reply(true);
    for (unsigned k = 0; k < w; k++)
        fab_wait(&sop[k]);
    free(m);
    free(sop);
}

/* Window 1: remote completion (the task ran); W: the ack at enqueue. */
static void initiator_xtq(uint64_t iters, size_t size, unsigned window)
{
    unsigned w = window;
    uint32_t flags = w == 1 ? XTQ_PUT_REMOTE_COMPLETION : 0;
    uint8_t cmd[256], payload[MAX_PAYLOAD];
    size_t cmd_len;
    xtq_dispatch_geometry_t geo = {1, {1, 1, 1}, {1, 1, 1}};
    struct task_args args = {NULL, NULL, size};
    memset(payload, 1, sizeof(payload));
    CHECK_XTQ(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, &geo, &args,
                             sizeof(args), &cmd_len));
    xtq_completion_t *comp = calloc(w, sizeof(*comp));
    bool *busy = calloc(w, sizeof(*busy));
    for (uint64_t i = 0; i < iters; i++) {
        unsigned k = (unsigned)(i % w);
        if (busy[k])
            CHECK_XTQ(xtq_completion_wait(g.ctx, &comp[k], XTQ_TIMEOUT_INFINITE));
        memset(&comp[k], 0, sizeof(comp[k]));
        CHECK_XTQ(xtq_put(g.ctx, 0, cmd, cmd_len, size ? payload : NULL, size, flags, &comp[k]));
        busy[k] = true;
    }
    for (unsigned k = 0; k < w; k++)
        if (busy[k])
            CHECK_XTQ(xtq_completion_wait(g.ctx, &comp[k], XTQ_TIMEOUT_INFINITE));
    free(comp);
    free(busy);
}

static int extra_opt(const char *opt, const char *value, void *arg)
{
    if (strcmp(opt, "--window") == 0 && value) {
        g.window = (unsigned)strtoul(value, NULL, 0);
        return g.window >= 2 && g.window <= MAX_WINDOW ? 2 : -1;
    }
    if (strcmp(opt, "--batched") == 0) {
        g.batched_only = true;
        return 1;
    }
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.nranks);
    g.window = 32;
    g.o = (bh_opts_t){.iters = 20000, .warmup = 0, .modes = (1u << M_COUNT) - 1};
    if (bh_parse_args(argc, argv, &g.o, mode_names, M_COUNT, extra_opt, NULL,
                      "  --iters N     tasks per initiator per phase\n"
                      "  --sizes S     payload bytes of each task (first size; default 8)\n"
                      "  --window W    tasks in flight per initiator in the window-W rows "
                      "(2..64)\n"
                      "  --batched     the window-W rows only (e.g. to profile them)\n") <
        0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    size_t size = g.o.nsizes ? g.o.sizes[0] : 8;
    if (size > MAX_PAYLOAD || g.nranks < 2) {
        if (g.rank == 0)
            fprintf(stderr, "msgrate: payload <= %d B and at least 2 ranks\n", MAX_PAYLOAD);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    CHECK_XTQ(xtq_init(NULL, &g.ctx));
    fab_open(xtq_provider_name(g.ctx));

    struct target t;
    memset(&t, 0, sizeof(t));
    xtq_agent_t *agent;
    xtq_agent_info_t ainfo;
    CHECK_XTQ(xtq_agent_find(g.ctx, XTQ_AGENT_CPU, &agent));
    CHECK_XTQ(xtq_agent_get_info(agent, &ainfo));
    CHECK_XTQ(xtq_queue_create(agent, QUEUE_SIZE, &t.queue));
    CHECK_XTQ(xtq_kernel_create_cpu(agent, task_kernel, sizeof(struct task_args), NULL,
                                    &t.kernel));
    CHECK_XTQ(xtq_signal_create(0, &t.count));
    CHECK_XTQ(xtq_register_queue(g.ctx, QUEUE_INDEX, t.queue));
    /* Two atomic adds: short (XTQ_REGISTER_SHORT), so the CPU agent may
     * run it where it arrives (XTQ_CPU_INLINE_TASKS). */
    xtq_register_attr_t ra = {.field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER |
                                            XTQ_REGISTER_ATTR_FIELD_SIGNAL |
                                            XTQ_REGISTER_ATTR_FIELD_FLAGS,
                              .target_buffer = (void *)g.target_buf,
                              .completion_signal = t.count,
                              .flags = XTQ_REGISTER_SHORT};
    CHECK_XTQ(xtq_register_kernel_attr(g.ctx, KERNEL_INDEX, t.kernel, &ra));
    if (g.rank == 0) {
        t.rbuf = calloc(NRECV, sizeof(*t.rbuf));
        t.karg = calloc(KARG_RING, sizeof(*t.karg));
        t.reply_op.kind = OP_SEND;
        for (int i = 0; i < NRECV; i++) {
            t.rop[i].kind = OP_RECV;
            t.rop[i].idx = i;
            post_recv(&t.rbuf[i], sizeof(struct msg), &t.rop[i]);
        }
    } else {
        initiator_post_replies();
    }
    CHECK_XTQ(xtq_barrier(g.ctx));

    /* Target CPU per task: application thread, progress thread (the
     * emulated NIC), CPU-agent workers, whole process. */
    static const char *const cols[] = {"mode",        "window",     "done_at",    "initiators",
                                       "tasks",       "seconds",    "tasks_per_s", "tgt_app_us",
                                       "tgt_nic_us",  "tgt_agent_us", "tgt_proc_us"};
    bh_table_t tab;
    bh_table_init(&tab, cols, 11);
    if (g.rank == 0)
        printf("# msgrate: provider %s, %u-B tasks, target %s with %u workers, window 1 and %u\n",
               xtq_provider_name(g.ctx), (unsigned)size, ainfo.name, ainfo.workers, g.window);
    static const int counts[] = {1, 2, 4};
    for (unsigned c = 0; c < 3; c++) {
        int nin = counts[c];
        if (nin > g.nranks - 1)
            break;
        for (int m = 0; m < M_COUNT; m++) {
            if (!(g.o.modes & (1u << m)))
                continue;
            for (int wi = 0; wi < 2; wi++) {
                unsigned window = wi ? g.window : 1;
                if (m == M_HSA_DB && window == 1)
                    continue; /* one task per doorbell: the hsa row */
                if (g.batched_only && window == 1)
                    continue;
                const char *done_at = window == 1 ? "task" : "enqueue";
                uint64_t total = (uint64_t)nin * g.o.iters;
                xtq_signal_store(t.count, (int64_t)total);
                atomic_store(&g.target_buf[0], 0);
                MPI_Barrier(MPI_COMM_WORLD);
                if (g.rank == 0) {
                    uint64_t t0 = bh_now_ns();
                    uint64_t a0 = bh_thread_cpu_ns(), n0 = bh_threads_cpu_ns("xtq-progress");
                    uint64_t w0 = bh_threads_cpu_ns("xtq-cpu"), p0 = bh_process_cpu_ns();
                    if (m != M_XTQ)
                        target_hsa(&t, total, window, m == M_HSA_DB);
                    CHECK_XTQ(xtq_signal_wait(t.count, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE,
                                              NULL));
                    uint64_t t1 = bh_now_ns();
                    double app = (double)(bh_thread_cpu_ns() - a0) / (double)total;
                    double nic = (double)(bh_threads_cpu_ns("xtq-progress") - n0) / (double)total;
                    double wrk = (double)(bh_threads_cpu_ns("xtq-cpu") - w0) / (double)total;
                    double proc = (double)(bh_process_cpu_ns() - p0) / (double)total;
                    double secs = (double)(t1 - t0) / 1e9;
                    if (atomic_load(&g.target_buf[0]) != total) {
                        fprintf(stderr, "msgrate: %llu tasks ran, expected %llu\n",
                                (unsigned long long)atomic_load(&g.target_buf[0]),
                                (unsigned long long)total);
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                    bh_table_add(&tab, "%s|%u|%s|%d|%llu|%.3f|%.0f|%.3f|%.3f|%.3f|%.3f",
                                 mode_names[m], window, done_at, nin, (unsigned long long)total,
                                 secs, (double)total / secs, app / 1e3, nic / 1e3, wrk / 1e3,
                                 proc / 1e3);
                    printf("  %-6s window %-2u %d initiator(s): %10.0f tasks/s  target cpu "
                           "us/task: app %.3f nic %.3f agent %.3f process %.3f\n",
                           mode_names[m], window, nin, (double)total / secs, app / 1e3, nic / 1e3,
                           wrk / 1e3, proc / 1e3);
                    fflush(stdout);
                } else if (g.rank <= nin) {
                    if (m == M_XTQ)
                        initiator_xtq(g.o.iters, size, window);
                    else
                        initiator_hsa(g.o.iters, size, window);
                }
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
    }
    if (g.rank == 0) {
        printf("\n");
        bh_table_print(&tab, stdout);
        if (g.o.csv_path) {
            char comment[256];
            snprintf(comment, sizeof(comment),
                     "# xtq_bench_msgrate: provider %s, %zu-B tasks, windows 1 and %u, %s "
                     "workers=%u\n",
                     xtq_provider_name(g.ctx), size, g.window, ainfo.name, ainfo.workers);
            bh_table_write_csv(&tab, g.o.csv_path, comment);
        }
    }
    bh_table_free(&tab);

    MPI_Barrier(MPI_COMM_WORLD);
    fab_close();
    xtq_unregister_kernel(g.ctx, KERNEL_INDEX);
    xtq_unregister_queue(g.ctx, QUEUE_INDEX);
    xtq_queue_destroy(t.queue);
    xtq_kernel_destroy(t.kernel);
    CHECK_XTQ(xtq_finalize(g.ctx));
    xtq_signal_destroy(t.count);
    free(t.rbuf);
    free(t.karg);
    MPI_Finalize();
    return 0;
}
