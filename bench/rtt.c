/*
 * Remote-task round trip, the paper's CPU / HSA / XTQ comparison plus the
 * transport's own floor. Rank 0 (initiator) issues a task to rank 1
 * (target); the task runs on the target's CPU agent (or, in cpu mode, on its
 * application thread); rank 0 observes completion. Modes, all in one run:
 *
 *  raw  libfabric fi_send / fi_recv on an RDM endpoint of the provider libxtq
 *       uses: payload out, 8-byte reply back. The floor.
 *  cpu  the same endpoint; the target's application thread receives the
 *       command + payload, runs the task function itself, replies.
 *  hsa  the same endpoint; the target's application thread builds an AQL
 *       packet, xtq_queue_submit()s it to a CPU-agent queue, waits on its
 *       completion signal, replies.
 *  xtq  xtq_put(..., XTQ_PUT_REMOTE_COMPLETION); the engine enqueues; the
 *       target's application thread only waits for the end of the phase.
 *
 * Public API only (libxtq, libfabric, MPI for bootstrap and phase barriers).
 * Launch: mpirun -np 2 bench/xtq_bench_rtt [--sizes 0-1M] [--csv out.csv]
 */
#include <errno.h>
#include <sched.h>
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

enum { M_RAW, M_CPU, M_HSA, M_XTQ, M_COUNT };
static const char *const mode_names[M_COUNT] = {"raw", "cpu", "hsa", "xtq"};

/* Stages recorded by the benchmark itself (names match libxtq's trace). */
enum {
    S_PUT_ISSUED,
    S_MSG_SENT,
    S_ENGINE_RECV,
    S_ENQUEUED,
    S_DOORBELL,
    S_TASK_START,
    S_TASK_END,
    S_COMPLETION,
    S_COUNT
};
static const char *const stage_names[S_COUNT] = {"put_issued", "msg_sent",   "engine_recv",
                                                 "enqueued",   "doorbell",   "task_start",
                                                 "task_end",   "completion"};

#define KERNEL_INDEX 1
#define DONE_INDEX 2
#define QUEUE_INDEX 1
#define CMD_CAP 256
#define REPLY_LEN 8

#define CHECK_XTQ(call)                                                                    \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ < 0) {                                                                      \
            fprintf(stderr, "rtt: %s failed: %s\n", #call, xtq_strerror(rc_));              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)
#define CHECK_FI(call)                                                                     \
    do {                                                                                    \
        int rc_ = (int)(call);                                                              \
        if (rc_ < 0) {                                                                      \
            fprintf(stderr, "rtt: %s failed: %s\n", #call, fi_strerror(-rc_));              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)

/* Kernel arguments: 0 and 1 are rewritten by XTQ (target buffer, payload). */
struct task_args {
    uint64_t *target;
    const uint8_t *payload;
    uint64_t len;
};

/* The command the cpu and hsa modes send: a stand-in for what XTQ carries. */
struct bench_cmd {
    xtq_aql_packet_t packet;
    struct task_args args;
    uint64_t iter;
};

struct op {
    struct fi_context2 ctx; /* first: libfabric hands it back */
    volatile int done;
};

struct fab {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t peer;
};

struct state {
    bh_opts_t o;
    int rank;
    xtq_ctx_t *ctx;
    struct fab fab;
    size_t max_size;
    uint8_t *sbuf, *rbuf[2], *reply;
    uint64_t target_buf[8]; /* target_buf[0]: tasks run in this phase */
    /* --breakdown: [stage] timestamps per measured iteration of the phase */
    uint64_t (*rec)[S_COUNT];
    unsigned rec_warmup, rec_iters;
    const char *breakdown_path;
};
static struct state st;

static inline void rec_stage(unsigned iter, int stage)
{
    if (st.rec && iter >= st.rec_warmup && iter - st.rec_warmup < st.rec_iters)
        st.rec[iter - st.rec_warmup][stage] = bh_now_ns();
}

/* The task: the same function in every mode. Reads the payload's first and
 * last byte (so the data must really be there) and counts itself. */
static void task_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct task_args *a = kernarg;
    uint64_t *t = a->target;
    unsigned iter = (unsigned)t[0];
    rec_stage(iter, S_TASK_START);
    if (a->len)
        t[1] += a->payload[0] + a->payload[a->len - 1];
    t[0] = iter + 1;
    rec_stage(iter, S_TASK_END);
}

static void done_kernel(const xtq_dispatch_t *d, void *kernarg)
{
}

/* ---- libfabric endpoint for raw / cpu / hsa ------------------------------ */

static void fab_open(struct fab *f, const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK_FI(fi_getinfo(FI_VERSION(1, 14), NULL, NULL, 0, hints, &f->info));
    fi_freeinfo(hints);
    CHECK_FI(fi_fabric(f->info->fabric_attr, &f->fabric, NULL));
    CHECK_FI(fi_domain(f->fabric, f->info, &f->domain, NULL));
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
    CHECK_FI(fi_cq_open(f->domain, &cqa, &f->cq, NULL));
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    CHECK_FI(fi_av_open(f->domain, &ava, &f->av, NULL));
    CHECK_FI(fi_endpoint(f->domain, f->info, &f->ep, NULL));
    CHECK_FI(fi_ep_bind(f->ep, &f->cq->fid, FI_SEND | FI_RECV));
    CHECK_FI(fi_ep_bind(f->ep, &f->av->fid, 0));
    CHECK_FI(fi_enable(f->ep));
    char name[256], names[2][256];
    size_t len = sizeof(name);
    memset(name, 0, sizeof(name));
    CHECK_FI(fi_getname(&f->ep->fid, name, &len));
    MPI_Allgather(name, sizeof(name), MPI_BYTE, names, sizeof(name), MPI_BYTE, MPI_COMM_WORLD);
    fi_addr_t addrs[2];
    /* One at a time: names are padded to 256 bytes, fi_av_insert wants them packed. */
    for (int i = 0; i < 2; i++)
        if (fi_av_insert(f->av, names[i], 1, &addrs[i], 0, NULL) != 1) {
            fprintf(stderr, "rtt: fi_av_insert failed\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    f->peer = addrs[1 - st.rank];
}

static void fab_close(struct fab *f)
{
    fi_close(&f->ep->fid);
    fi_close(&f->av->fid);
    fi_close(&f->cq->fid);
    fi_close(&f->domain->fid);
    fi_close(&f->fabric->fid);
    fi_freeinfo(f->info);
}

/* Poll until op->done. Spins, then yields: on an oversubscribed host the
 * peer's threads (engine, agent workers) need the core too. */
static void fab_wait(struct op *op)
{
    unsigned idle = 0;
    while (!op->done) {
        struct fi_cq_entry e[8];
        ssize_t n = fi_cq_read(st.fab.cq, e, 8);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                ((struct op *)e[i].op_context)->done = 1;
            idle = 0;
        } else if (n == -FI_EAGAIN) {
            if (++idle > 200)
                sched_yield();
        } else {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(st.fab.cq, &err, 0);
            fprintf(stderr, "rtt: completion error: %s\n", fi_strerror(err.err));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

static void post_recv(void *buf, size_t len, struct op *op)
{
    op->done = 0;
    for (;;) {
        ssize_t rc = fi_recv(st.fab.ep, buf, len, NULL, FI_ADDR_UNSPEC, &op->ctx);
        if (rc == 0)
            return;
        if (rc != -FI_EAGAIN)
            CHECK_FI(rc);
        fi_cq_read(st.fab.cq, NULL, 0);
    }
}

static void post_send(const void *buf, size_t len, struct op *op)
{
    op->done = 0;
    for (;;) {
        ssize_t rc = fi_send(st.fab.ep, buf, len, NULL, st.fab.peer, &op->ctx);
        if (rc == 0)
            return;
        if (rc != -FI_EAGAIN)
            CHECK_FI(rc);
        fi_cq_read(st.fab.cq, NULL, 0);
    }
}

/* ---- one phase: (mode, size), warmup + iters tasks ------------------------ */

struct phase_result {
    bh_stats_t rtt;
    double target_cpu_ns; /* per task, target application thread */
};

static size_t msg_len(int mode, size_t size)
{
    return mode == M_RAW ? size : sizeof(struct bench_cmd) + size;
}

static void initiator_fab(int mode, size_t size, unsigned total, uint64_t *samples)
{
    struct op sop, rop;
    struct bench_cmd *cmd = (struct bench_cmd *)st.sbuf;
    size_t len = msg_len(mode, size);
    const void *buf = mode == M_RAW ? st.sbuf + sizeof(struct bench_cmd) : st.sbuf;
    for (unsigned i = 0; i < total; i++) {
        cmd->iter = i;
        uint64_t t0 = bh_now_ns();
        rec_stage(i, S_PUT_ISSUED);
        post_recv(st.reply, REPLY_LEN, &rop);
        post_send(buf, len, &sop);
        rec_stage(i, S_MSG_SENT);
        fab_wait(&rop);
        uint64_t t1 = bh_now_ns();
        rec_stage(i, S_COMPLETION);
        fab_wait(&sop);
        if (i >= st.o.warmup)
            samples[i - st.o.warmup] = t1 - t0;
    }
}

static void target_fab(int mode, size_t size, unsigned total, xtq_queue_t *queue,
                       xtq_kernel_t *kernel, xtq_signal_t *sig)
{
    struct op rop[2], sop;
    size_t len = msg_len(mode, size);
    int cur = 0;
    sop.done = 1;
    post_recv(st.rbuf[0], len, &rop[0]);
    for (unsigned i = 0; i < total; i++) {
        fab_wait(&rop[cur]);
        rec_stage(i, S_ENGINE_RECV);
        /* Double-buffered: the next message may land while this task runs. */
        if (i + 1 < total)
            post_recv(st.rbuf[1 - cur], len, &rop[1 - cur]);
        const uint8_t *payload = st.rbuf[cur] + (mode == M_RAW ? 0 : sizeof(struct bench_cmd));
        struct task_args args = {st.target_buf, payload, size};
        if (mode == M_CPU) {
            xtq_dispatch_t d = {.dimensions = 1,
                                .grid_size = {1, 1, 1},
                                .workgroup_size = {1, 1, 1},
                                .workgroup_count = {1, 1, 1}};
            task_kernel(&d, &args);
        } else if (mode == M_HSA) {
            xtq_aql_packet_t p;
            memset(&p, 0, sizeof(p));
            p.kernel.setup = 1u << XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
            p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
            p.kernel.grid_size_x = p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
            p.kernel.kernel_object = xtq_kernel_object(kernel);
            p.kernel.kernarg_address = &args;
            p.kernel.completion_signal = xtq_signal_handle(sig);
            p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0,
                                             XTQ_FENCE_SCOPE_SYSTEM, XTQ_FENCE_SCOPE_SYSTEM);
            rec_stage(i, S_ENQUEUED);
            CHECK_XTQ(xtq_queue_submit(queue, &p, XTQ_TIMEOUT_INFINITE, NULL));
            rec_stage(i, S_DOORBELL);
            CHECK_XTQ(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
            xtq_signal_store(sig, 1);
        }
        fab_wait(&sop); /* the previous reply's buffer is ours again */
        post_send(st.reply, REPLY_LEN, &sop);
        cur = 1 - cur;
    }
    fab_wait(&sop);
}

static void initiator_xtq(size_t size, unsigned total, uint64_t *samples)
{
    uint8_t cmd[CMD_CAP];
    size_t cmd_len;
    xtq_dispatch_geometry_t g = {1, {1, 1, 1}, {1, 1, 1}};
    struct task_args args = {NULL, NULL, size};
    CHECK_XTQ(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, &g, &args,
                             sizeof(args), &cmd_len));
    const void *payload = size ? st.sbuf + sizeof(struct bench_cmd) : NULL;
    for (unsigned i = 0; i < total; i++) {
        xtq_completion_t comp;
        memset(&comp, 0, sizeof(comp));
        uint64_t t0 = bh_now_ns();
        rec_stage(i, S_PUT_ISSUED);
        CHECK_XTQ(xtq_put(st.ctx, 1, cmd, cmd_len, payload, size, XTQ_PUT_REMOTE_COMPLETION,
                          &comp));
        CHECK_XTQ(xtq_completion_wait(st.ctx, &comp, XTQ_TIMEOUT_INFINITE));
        uint64_t t1 = bh_now_ns();
        rec_stage(i, S_COMPLETION);
        if (i >= st.o.warmup)
            samples[i - st.o.warmup] = t1 - t0;
    }
    /* End of phase: one task that decrements the target's done signal. */
    CHECK_XTQ(xtq_cmd_kernel(cmd, sizeof(cmd), DONE_INDEX, QUEUE_INDEX, &g, &args,
                             sizeof(args), &cmd_len));
    xtq_completion_t comp;
    memset(&comp, 0, sizeof(comp));
    CHECK_XTQ(xtq_put(st.ctx, 1, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &comp));
    CHECK_XTQ(xtq_completion_wait(st.ctx, &comp, XTQ_TIMEOUT_INFINITE));
}

static unsigned iters_for(size_t size)
{
    /* Large payloads are bandwidth-bound and stable: fewer iterations. */
    unsigned n = st.o.iters;
    if (size >= (256u << 10))
        n = n / 20 > 50 ? n / 20 : 50;
    else if (size >= (32u << 10))
        n = n / 4 > 100 ? n / 4 : 100;
    return n < st.o.iters ? n : st.o.iters;
}

/* Record the phase's per-iteration stage timestamps (both ranks' halves). */
static void breakdown_collect(FILE *out, int mode, size_t size, unsigned iters)
{
    size_t n = (size_t)iters * S_COUNT;
    if (st.rank == 1) {
        MPI_Send(st.rec, (int)n, MPI_UINT64_T, 0, 7, MPI_COMM_WORLD);
        return;
    }
    uint64_t(*peer)[S_COUNT] = calloc(iters, sizeof(*peer));
    MPI_Recv(peer, (int)n, MPI_UINT64_T, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (unsigned i = 0; i < iters; i++)
        for (int s = 0; s < S_COUNT; s++) {
            uint64_t t = st.rec[i][s] ? st.rec[i][s] : peer[i][s];
            if (t)
                fprintf(out, "%s,%zu,%u,%s,%llu\n", mode_names[mode], size, i, stage_names[s],
                        (unsigned long long)t);
        }
    free(peer);
}

static struct phase_result run_phase(int mode, size_t size, xtq_queue_t *queue,
                                     xtq_kernel_t *kernel, xtq_signal_t *sig,
                                     xtq_signal_t *done, bool breakdown, FILE *bd)
{
    struct phase_result r = {0};
    unsigned iters = iters_for(size);
    unsigned total = st.o.warmup + iters;
    uint64_t *samples = calloc(iters, sizeof(*samples));
    if (breakdown) {
        st.rec = calloc(iters, sizeof(*st.rec));
        st.rec_warmup = st.o.warmup;
        st.rec_iters = iters;
    }
    memset(st.target_buf, 0, sizeof(st.target_buf));
    MPI_Barrier(MPI_COMM_WORLD);
    if (st.rank == 0) {
        if (mode == M_XTQ)
            initiator_xtq(size, total, samples);
        else
            initiator_fab(mode, size, total, samples);
        r.rtt = bh_summarize(samples, iters);
    } else {
        uint64_t c0 = bh_thread_cpu_ns();
        if (mode == M_XTQ)
            /* The target application thread does nothing but wait. */
            CHECK_XTQ(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
        else
            target_fab(mode, size, total, queue, kernel, sig);
        uint64_t c1 = bh_thread_cpu_ns();
        r.target_cpu_ns = (double)(c1 - c0) / total;
        if (mode == M_XTQ)
            xtq_signal_store(done, 1);
        if (mode != M_RAW && st.target_buf[0] != total) {
            fprintf(stderr, "rtt: %s %zu B: %llu tasks ran, expected %u\n", mode_names[mode],
                    size, (unsigned long long)st.target_buf[0], total);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Bcast(&r.target_cpu_ns, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    if (breakdown) {
        breakdown_collect(bd, mode, size, iters);
        free(st.rec);
        st.rec = NULL;
    }
    free(samples);
    return r;
}

static int extra_opt(const char *opt, const char *value, void *arg)
{
    if (strcmp(opt, "--breakdown") == 0 && value) {
        st.breakdown_path = value;
        return 2;
    }
    return -1;
}

static int find_size(size_t size)
{
    for (unsigned i = 0; i < st.o.nsizes; i++)
        if (st.o.sizes[i] == size)
            return (int)i;
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &st.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    st.o = (bh_opts_t){.iters = 10000, .warmup = 1000, .modes = (1u << M_COUNT) - 1};
    if (bh_parse_args(argc, argv, &st.o, mode_names, M_COUNT, extra_opt, NULL,
                      "  --breakdown PATH  also write per-iteration stage timestamps (CSV)\n") < 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    if (st.o.nsizes == 0) {
        static const size_t def[] = {0, 8, 64, 512, 4096, 32768, 262144, 1048576};
        memcpy(st.o.sizes, def, sizeof(def));
        st.o.nsizes = sizeof(def) / sizeof(def[0]);
    }
    if (nranks != 2) {
        if (st.rank == 0)
            fprintf(stderr, "rtt: run with exactly 2 ranks (mpirun -np 2)\n");
        MPI_Finalize();
        return 2;
    }

    CHECK_XTQ(xtq_init(NULL, &st.ctx));
    const char *prov = xtq_provider_name(st.ctx);
    fab_open(&st.fab, prov);
    st.max_size = 0;
    for (unsigned i = 0; i < st.o.nsizes; i++)
        if (st.o.sizes[i] > st.max_size)
            st.max_size = st.o.sizes[i];
    size_t cap = sizeof(struct bench_cmd) + st.max_size;
    if (st.max_size + CMD_CAP > xtq_put_max_size(st.ctx) ||
        cap > st.fab.info->ep_attr->max_msg_size) {
        if (st.rank == 0)
            fprintf(stderr, "rtt: %zu B exceeds xtq_put_max_size %zu or the provider's %zu\n",
                    st.max_size, xtq_put_max_size(st.ctx), st.fab.info->ep_attr->max_msg_size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    st.sbuf = calloc(1, cap);
    st.rbuf[0] = calloc(1, cap);
    st.rbuf[1] = calloc(1, cap);
    st.reply = calloc(1, 64);
    for (size_t i = 0; i < st.max_size; i++)
        st.sbuf[sizeof(struct bench_cmd) + i] = (uint8_t)(i * 7 + 1);

    /* Target setup: one CPU-agent queue, the task kernel and an end-of-phase
     * kernel at coordinated indices. Rank 0 registers too (symmetry). */
    xtq_agent_t *agent;
    xtq_queue_t *queue;
    xtq_kernel_t *kernel, *dkernel;
    xtq_signal_t *sig, *done;
    CHECK_XTQ(xtq_agent_find(st.ctx, XTQ_AGENT_CPU, &agent));
    CHECK_XTQ(xtq_queue_create(agent, 256, &queue));
    CHECK_XTQ(xtq_kernel_create_cpu(agent, task_kernel, sizeof(struct task_args), NULL, &kernel));
    CHECK_XTQ(xtq_kernel_create_cpu(agent, done_kernel, sizeof(struct task_args), NULL, &dkernel));
    CHECK_XTQ(xtq_signal_create(1, &sig));
    CHECK_XTQ(xtq_signal_create(1, &done));
    CHECK_XTQ(xtq_register_queue(st.ctx, QUEUE_INDEX, queue));
    CHECK_XTQ(xtq_register_kernel(st.ctx, KERNEL_INDEX, kernel, st.target_buf, NULL));
    CHECK_XTQ(xtq_register_kernel(st.ctx, DONE_INDEX, dkernel, NULL, done));
    CHECK_XTQ(xtq_barrier(st.ctx));

    FILE *bd = NULL;
    if (st.breakdown_path && st.rank == 0) {
        bd = fopen(st.breakdown_path, "w");
        if (!bd) {
            fprintf(stderr, "rtt: cannot write %s\n", st.breakdown_path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        fprintf(bd, "mode,size,iter,stage,ns\n");
    }

    static const char *const cols[] = {"size", "mode", "median_us", "p99_us", "min_us",
                                       "mean_us", "iters", "target_cpu_us_per_task"};
    bh_table_t tab;
    bh_table_init(&tab, cols, 8);
    double med[BH_MAX_SIZES][M_COUNT] = {{0}};
    if (st.rank == 0)
        printf("# rtt: provider %s, %d ranks, warmup %u, iters %u\n", prov, nranks, st.o.warmup,
               st.o.iters);
    for (unsigned si = 0; si < st.o.nsizes; si++) {
        size_t size = st.o.sizes[si];
        for (int m = 0; m < M_COUNT; m++) {
            if (!(st.o.modes & (1u << m)))
                continue;
            struct phase_result r = run_phase(m, size, queue, kernel, sig, done,
                                              st.breakdown_path != NULL, bd);
            if (st.rank != 0)
                continue;
            char sz[32];
            med[si][m] = r.rtt.median_ns;
            bh_table_add(&tab, "%s|%s|%.2f|%.2f|%.2f|%.2f|%u|%.3f",
                         bh_size_str(size, sz, sizeof(sz)), mode_names[m], r.rtt.median_ns / 1e3,
                         r.rtt.p99_ns / 1e3, r.rtt.min_ns / 1e3, r.rtt.mean_ns / 1e3,
                         r.rtt.count, r.target_cpu_ns / 1e3);
            printf("  %-8s %-4s median %9.2f us  p99 %9.2f us  target cpu %8.3f us/task\n", sz,
                   mode_names[m], r.rtt.median_ns / 1e3, r.rtt.p99_ns / 1e3,
                   r.target_cpu_ns / 1e3);
            fflush(stdout);
        }
    }

    if (st.rank == 0) {
        printf("\n");
        bh_table_print(&tab, stdout);
        if (st.o.csv_path) {
            char comment[512];
            snprintf(comment, sizeof(comment),
                     "# xtq_bench_rtt: provider %s, libxtq %s, warmup %u, iters %u (fewer above "
                     "32KiB)\n",
                     prov, xtq_version(), st.o.warmup, st.o.iters);
            bh_table_write_csv(&tab, st.o.csv_path, comment);
        }
        /* Ratios: 4 KiB first, 64 B last (the line scripts parse). */
        static const size_t hl[] = {4096, 64};
        for (unsigned h = 0; h < 2; h++) {
            int si = find_size(hl[h]);
            if (si < 0)
                continue;
            char sz[32], line[256];
            int n = snprintf(line, sizeof(line), "ratios %s:", bh_size_str(hl[h], sz, sizeof(sz)));
            const int den[] = {M_HSA, M_RAW, M_CPU};
            for (unsigned k = 0; k < 3; k++)
                if (med[si][M_XTQ] > 0 && med[si][den[k]] > 0)
                    n += snprintf(line + n, sizeof(line) - (size_t)n, " xtq/%s=%.2f",
                                  mode_names[den[k]], med[si][M_XTQ] / med[si][den[k]]);
            printf("%s\n", line);
        }
    }
    bh_table_free(&tab);
    if (bd)
        fclose(bd);

    MPI_Barrier(MPI_COMM_WORLD);
    xtq_unregister_kernel(st.ctx, KERNEL_INDEX);
    xtq_unregister_kernel(st.ctx, DONE_INDEX);
    xtq_unregister_queue(st.ctx, QUEUE_INDEX);
    fab_close(&st.fab);
    xtq_queue_destroy(queue);
    xtq_kernel_destroy(kernel);
    xtq_kernel_destroy(dkernel);
    CHECK_XTQ(xtq_finalize(st.ctx));
    xtq_signal_destroy(sig);
    xtq_signal_destroy(done);
    MPI_Finalize();
    return 0;
}
