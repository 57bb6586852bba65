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
 * Target CPU per task, four figures: the application thread (what the
 * paper's Fig. 8 counts), the engine's progress thread ("xtq-progress":
 * the emulated NIC, which a real XTQ NIC would not take from the host),
 * the CPU agent's workers (the tasks), and the whole process over the
 * phase. XTQ frees the application thread; the process figure says what
 * the emulation costs instead.
 *
 * --agent cuda: every mode but raw runs one GPU computation (rtt_cuda.h:
 * sum the payload's 4-byte words into device memory). cpu computes it on
 * the target's CPU; hsa receives into pinned memory and launches it as a
 * __global__ kernel, then waits (cudaStreamSynchronize); xtq puts to a
 * queue of the target's CUDA agent, which reads the payload in place.
 *
 * Public API only (libxtq, libfabric, MPI for bootstrap and phase barriers,
 * the CUDA runtime in rtt_cuda.cu).
 * Launch: mpirun -np 2 bench/xtq_bench_rtt [--sizes 0-1M] [--csv out.csv] [--agent cuda]
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
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
#include "rtt_cuda.h"

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
/* --agent cuda: longest wait for one completion, or for a task to finish
 * during the target's end-of-phase wait, before the run is declared stuck. */
#define CUDA_STALL_NS 60000000000ll
#define CUDA_STALL_S  (CUDA_STALL_NS / 1000000000ll)

#define CHECK_XTQ(call)                                                                    \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ < 0) {                                                                      \
            fprintf(stderr, "rtt: %s failed: %s\n", #call, xtq_strerror(rc_));              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)
#define CHECK_CUDA(call)                                                                   \
    do {                                                                                    \
        if ((call) != 0) {                                                                  \
            fprintf(stderr, "rtt: %s failed: %s\n", #call, rtt_cuda_last_error());         \
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
/* The initiator builds xtq commands for both agents from task_args. */
_Static_assert(sizeof(struct task_args) == sizeof(struct rtt_cuda_args) &&
                   offsetof(struct task_args, len) == offsetof(struct rtt_cuda_args, len),
               "task_args and rtt_cuda_args share one layout");

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
    size_t rbuf_len;
    uint64_t target_buf[8]; /* target_buf[0]: tasks run in this phase */
    /* --agent: which agent runs the tasks; the rest is for CUDA only */
    enum xtq_agent_kind agent_kind;
    int64_t wait_ns;                /* xtq completion waits */
    unsigned long long *gpu_result; /* device memory: [0] tasks run, [1] payload sum */
    struct rtt_cuda_tasks gpu_tasks;
    void *rbuf_dev[2]; /* rbuf[] as the GPU addresses it (hsa) */
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

/* ---- --agent cuda: the GPU computation and its check ---------------------- */

/* The payload as little-endian 4-byte words, the last one zero-padded:
 * what rtt_task computes on the GPU. */
static uint64_t word_sum(const uint8_t *p, size_t len)
{
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t w;
        memcpy(&w, p + i, sizeof(w));
        s += w;
    }
    if (i < len) {
        uint32_t w = 0;
        memcpy(&w, p + i, len - i);
        s += w;
    }
    return s;
}

/* cpu mode: the target's application thread computes the same result. */
static void cpu_sum_task(unsigned iter, const uint8_t *payload, size_t len)
{
    rec_stage(iter, S_TASK_START);
    st.target_buf[1] += word_sum(payload, len);
    st.target_buf[0]++;
    rec_stage(iter, S_TASK_END);
}

/* The initiator writes the iteration into the payload's first word, so a
 * task that read a stale payload (an earlier message at the same address)
 * gives a wrong sum. */
static void stamp_payload(size_t size, unsigned iter)
{
    if (st.agent_kind == XTQ_AGENT_CUDA && size >= 4) {
        uint32_t w = iter;
        memcpy(st.sbuf + sizeof(struct bench_cmd), &w, sizeof(w));
    }
}

/* The sum `total` tasks should have produced (modulo 2^64, like the GPU's
 * adds), from this rank's unstamped copy of the payload. */
static uint64_t expected_sum(size_t size, unsigned total)
{
    const uint8_t *p = st.sbuf + sizeof(struct bench_cmd);
    if (size < 4)
        return word_sum(p, size) * total;
    return word_sum(p + 4, size - 4) * total + (uint64_t)total * (total - 1) / 2;
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

/* The target's CPU per task (ns) over a phase, by who spent it: the
 * application thread, the engine's progress thread (the emulated NIC),
 * the CPU agent's workers (the tasks themselves), and the whole process
 * (all of these and anything else, e.g. the launcher's threads). */
struct target_cpu {
    double app, nic, agent, proc;
};

struct phase_result {
    bh_stats_t rtt;
    struct target_cpu cpu;
};

static struct target_cpu target_cpu_now(void)
{
    return (struct target_cpu){(double)bh_thread_cpu_ns(), (double)bh_threads_cpu_ns("xtq-progress"),
                               (double)bh_threads_cpu_ns("xtq-cpu"), (double)bh_process_cpu_ns()};
}

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
        if (mode != M_RAW)
            stamp_payload(size, i);
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

/* hsa mode on the CPU agent: build the packet, submit, wait, as HSA would. */
static void hsa_task_cpu(unsigned i, struct task_args *args, xtq_queue_t *queue,
                         xtq_kernel_t *kernel, xtq_signal_t *sig)
{
    xtq_aql_packet_t p;
    memset(&p, 0, sizeof(p));
    p.kernel.setup = 1u << XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
    p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.grid_size_x = p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.kernel_object = xtq_kernel_object(kernel);
    p.kernel.kernarg_address = args;
    p.kernel.completion_signal = xtq_signal_handle(sig);
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    rec_stage(i, S_ENQUEUED);
    CHECK_XTQ(xtq_queue_submit(queue, &p, XTQ_TIMEOUT_INFINITE, NULL));
    rec_stage(i, S_DOORBELL);
    CHECK_XTQ(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    xtq_signal_store(sig, 1);
}

/* hsa mode with --agent cuda: the application launches the task on its
 * own stream (same geometry as the xtq command) and waits for it. */
static void hsa_task_cuda(unsigned i, int cur, size_t size)
{
    struct rtt_cuda_args a = {st.gpu_result,
                              (const uint8_t *)st.rbuf_dev[cur] + sizeof(struct bench_cmd), size};
    rec_stage(i, S_ENQUEUED);
    CHECK_CUDA(rtt_cuda_launch(&a));
    rec_stage(i, S_DOORBELL);
    CHECK_CUDA(rtt_cuda_wait());
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
        bool gpu = st.agent_kind == XTQ_AGENT_CUDA;
        if (mode == M_CPU && gpu) {
            cpu_sum_task(i, payload, size);
        } else if (mode == M_CPU) {
            xtq_dispatch_t d = {.dimensions = 1,
                                .grid_size = {1, 1, 1},
                                .workgroup_size = {1, 1, 1},
                                .workgroup_count = {1, 1, 1}};
            task_kernel(&d, &args);
        } else if (mode == M_HSA && gpu) {
            hsa_task_cuda(i, cur, size);
        } else if (mode == M_HSA) {
            hsa_task_cpu(i, &args, queue, kernel, sig);
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
    xtq_dispatch_geometry_t one = {1, {1, 1, 1}, {1, 1, 1}}, g = one;
    if (st.agent_kind == XTQ_AGENT_CUDA) {
        /* The geometry hsa launches with: one work-item per 16 bytes. */
        g.grid[0] = rtt_cuda_groups(size) * RTT_CUDA_WG;
        g.workgroup[0] = RTT_CUDA_WG;
    }
    /* Only the length matters (arguments 0 and 1 are the target's); the
     * same bytes serve struct rtt_cuda_args. */
    struct task_args args = {NULL, NULL, size};
    CHECK_XTQ(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, &g, &args,
                             sizeof(args), &cmd_len));
    const void *payload = size ? st.sbuf + sizeof(struct bench_cmd) : NULL;
    xtq_stats_t s0, s1;
    CHECK_XTQ(xtq_get_stats(st.ctx, &s0));
    for (unsigned i = 0; i < total; i++) {
        xtq_completion_t comp;
        memset(&comp, 0, sizeof(comp));
        stamp_payload(size, i);
        uint64_t t0 = bh_now_ns();
        rec_stage(i, S_PUT_ISSUED);
        CHECK_XTQ(xtq_put(st.ctx, 1, cmd, cmd_len, payload, size, XTQ_PUT_REMOTE_COMPLETION,
                          &comp));
        CHECK_XTQ(xtq_completion_wait(st.ctx, &comp, st.wait_ns));
        uint64_t t1 = bh_now_ns();
        rec_stage(i, S_COMPLETION);
        if (i >= st.o.warmup)
            samples[i - st.o.warmup] = t1 - t0;
    }
    /* How many waits the target's completion word ended (on one host,
     * XTQ_DIRECT_COMPLETION) rather than the ack. */
    CHECK_XTQ(xtq_get_stats(st.ctx, &s1));
    printf("# %zuB xtq: %llu of %u round trips completed from the target's word\n", size,
           (unsigned long long)(s1.puts_completed_direct - s0.puts_completed_direct), total);
    printf("# %zuB xtq: %llu of %u puts went through the target's inbox\n", size,
           (unsigned long long)(s1.puts_via_inbox - s0.puts_via_inbox), total);
    /* End of phase: one task that decrements the target's done signal. */
    CHECK_XTQ(xtq_cmd_kernel(cmd, sizeof(cmd), DONE_INDEX, QUEUE_INDEX, &one, &args, sizeof(args),
                             &cmd_len));
    xtq_completion_t comp;
    memset(&comp, 0, sizeof(comp));
    CHECK_XTQ(xtq_put(st.ctx, 1, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &comp));
    CHECK_XTQ(xtq_completion_wait(st.ctx, &comp, st.wait_ns));
}

/* xtq mode, target: the application thread only waits for the phase's end.
 * With the CUDA agent, it wakes every CUDA_STALL_NS to see whether tasks
 * still finish, so a stalled agent ends the run with a message. */
static void target_wait_done(xtq_signal_t *done, size_t size, unsigned total)
{
    if (st.agent_kind != XTQ_AGENT_CUDA) {
        CHECK_XTQ(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
        return;
    }
    unsigned long long last = ~0ull;
    for (;;) {
        int64_t v = 0;
        int rc = xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, CUDA_STALL_NS, &v);
        if (rc == 0)
            return;
        if (rc != -XTQ_ETIMEDOUT)
            CHECK_XTQ(rc);
        unsigned long long got[2] = {0, 0};
        CHECK_CUDA(rtt_cuda_result_read(got));
        if (got[0] == last) {
            fprintf(stderr,
                    "rtt: xtq %zu B on the CUDA agent: no task finished in %lld s (%llu of %u "
                    "ran, done signal %lld): the agent or the engine is stuck\n",
                    size, CUDA_STALL_S, got[0], total, (long long)v);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        last = got[0];
    }
}

/* After a phase, on the target: did every task run, on the right data? */
static void verify_phase(int mode, size_t size, unsigned total)
{
    if (mode == M_RAW)
        return;
    if (st.agent_kind != XTQ_AGENT_CUDA) {
        if (st.target_buf[0] != total) {
            fprintf(stderr, "rtt: %s %zu B: %llu tasks ran, expected %u\n", mode_names[mode], size,
                    (unsigned long long)st.target_buf[0], total);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        return;
    }
    /* cpu mode computed on the host; hsa and xtq into device memory. */
    unsigned long long got[2] = {st.target_buf[0], st.target_buf[1]};
    if (mode != M_CPU)
        CHECK_CUDA(rtt_cuda_result_read(got));
    uint64_t want = expected_sum(size, total);
    if (got[0] != total || got[1] != want) {
        fprintf(stderr,
                "rtt: %s %zu B, agent cuda: %llu tasks ran (expected %u), payload sum %llu "
                "(expected %llu)\n",
                mode_names[mode], size, got[0], total, got[1], (unsigned long long)want);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
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
    if (st.rank == 1 && st.agent_kind == XTQ_AGENT_CUDA)
        CHECK_CUDA(rtt_cuda_result_zero());
    MPI_Barrier(MPI_COMM_WORLD);
    if (st.rank == 0) {
        if (mode == M_XTQ)
            initiator_xtq(size, total, samples);
        else
            initiator_fab(mode, size, total, samples);
        r.rtt = bh_summarize(samples, iters);
    } else {
        struct target_cpu c0 = target_cpu_now();
        if (mode == M_XTQ)
            /* The target application thread does nothing but wait. */
            target_wait_done(done, size, total);
        else
            target_fab(mode, size, total, queue, kernel, sig);
        struct target_cpu c1 = target_cpu_now();
        r.cpu = (struct target_cpu){(c1.app - c0.app) / total, (c1.nic - c0.nic) / total,
                                    (c1.agent - c0.agent) / total, (c1.proc - c0.proc) / total};
        if (mode == M_XTQ)
            xtq_signal_store(done, 1);
        verify_phase(mode, size, total);
    }
    MPI_Bcast(&r.cpu, 4, MPI_DOUBLE, 1, MPI_COMM_WORLD);
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
    if (strcmp(opt, "--agent") == 0 && value) {
        if (strcmp(value, "cpu") == 0)
            st.agent_kind = XTQ_AGENT_CPU;
        else if (strcmp(value, "cuda") == 0)
            st.agent_kind = XTQ_AGENT_CUDA;
        else {
            fprintf(stderr, "rtt: --agent takes cpu or cuda, not '%s'\n", value);
            return -1;
        }
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

/* ---- what the target sets up ---------------------------------------------- */

struct target_objs {
    xtq_agent_t *agent; /* NULL where nothing was set up (rank 0 with --agent cuda) */
    xtq_queue_t *queue;
    xtq_kernel_t *kernel, *dkernel;
    xtq_signal_t *sig, *done;
};

/* CPU agent: one queue, the task kernel and an end-of-phase kernel at
 * coordinated indices. Rank 0 registers too (symmetry). */
static void cpu_target_setup(struct target_objs *t)
{
    CHECK_XTQ(xtq_agent_find(st.ctx, XTQ_AGENT_CPU, &t->agent));
    CHECK_XTQ(xtq_queue_create(t->agent, 256, &t->queue));
    CHECK_XTQ(
        xtq_kernel_create_cpu(t->agent, task_kernel, sizeof(struct task_args), NULL, &t->kernel));
    CHECK_XTQ(
        xtq_kernel_create_cpu(t->agent, done_kernel, sizeof(struct task_args), NULL, &t->dkernel));
    CHECK_XTQ(xtq_signal_create(1, &t->sig));
    CHECK_XTQ(xtq_signal_create(1, &t->done));
    CHECK_XTQ(xtq_register_queue(st.ctx, QUEUE_INDEX, t->queue));
    /* Both tasks are a few instructions: short (XTQ_REGISTER_SHORT), so
     * the CPU agent may run them where they arrive (XTQ_CPU_INLINE_TASKS). */
    xtq_register_attr_t ra = {.field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER |
                                            XTQ_REGISTER_ATTR_FIELD_FLAGS,
                              .target_buffer = st.target_buf,
                              .flags = XTQ_REGISTER_SHORT};
    CHECK_XTQ(xtq_register_kernel_attr(st.ctx, KERNEL_INDEX, t->kernel, &ra));
    ra.field_mask = XTQ_REGISTER_ATTR_FIELD_SIGNAL | XTQ_REGISTER_ATTR_FIELD_FLAGS;
    ra.completion_signal = t->done;
    CHECK_XTQ(xtq_register_kernel_attr(st.ctx, DONE_INDEX, t->dkernel, &ra));
}

/* CUDA agent, rank 1 only: a queue of the agent, the GPU task (target
 * buffer: the result in device memory) and a GPU end-of-phase task whose
 * completion signal comes from the agent's pool; the receive buffers
 * pinned and mapped for hsa mode. */
static void cuda_target_setup(struct target_objs *t)
{
    xtq_agent_info_t info;
    CHECK_XTQ(xtq_agent_find(st.ctx, XTQ_AGENT_CUDA, &t->agent));
    CHECK_XTQ(xtq_agent_get_info(t->agent, &info));
    if (info.device_index != 0) {
        fprintf(stderr,
                "rtt: the CUDA agent drives device %u but the benchmark's buffers are on "
                "device 0 (did device 0's agent fail to open?)\n",
                info.device_index);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint32_t qsize = info.max_queue_size && info.max_queue_size < 256 ? info.max_queue_size : 256;
    /* Before the first queue: the module's processor is the one that starts. */
    CHECK_XTQ(rtt_cuda_attach(t->agent));
    CHECK_XTQ(xtq_queue_create(t->agent, qsize, &t->queue));
    CHECK_XTQ(xtq_kernel_create_cuda(t->agent, st.gpu_tasks.sum, sizeof(struct rtt_cuda_args),
                                     &t->kernel));
    CHECK_XTQ(xtq_kernel_create_cuda(t->agent, st.gpu_tasks.done, sizeof(struct rtt_cuda_args),
                                     &t->dkernel));
    CHECK_XTQ(xtq_cuda_signal_create(t->agent, 1, &t->done));
    CHECK_XTQ(xtq_register_queue(st.ctx, QUEUE_INDEX, t->queue));
    CHECK_XTQ(xtq_register_kernel(st.ctx, KERNEL_INDEX, t->kernel, st.gpu_result, NULL));
    CHECK_XTQ(xtq_register_kernel(st.ctx, DONE_INDEX, t->dkernel, NULL, t->done));
    for (int i = 0; i < 2; i++)
        CHECK_CUDA(rtt_cuda_host_register(st.rbuf[i], st.rbuf_len, &st.rbuf_dev[i]));
}

/* Unregister and destroy, before xtq_finalize (signals from the CUDA pool
 * need the agent). */
static void target_teardown(struct target_objs *t)
{
    if (!t->agent)
        return;
    xtq_unregister_kernel(st.ctx, KERNEL_INDEX);
    xtq_unregister_kernel(st.ctx, DONE_INDEX);
    xtq_unregister_queue(st.ctx, QUEUE_INDEX);
    xtq_queue_destroy(t->queue);
    xtq_kernel_destroy(t->kernel);
    xtq_kernel_destroy(t->dkernel);
    if (st.agent_kind == XTQ_AGENT_CUDA)
        xtq_cuda_signal_destroy(t->agent, t->done);
}

/* After xtq_finalize: plain signals, and the CUDA memory (freeing may
 * synchronise the device, which must not wait for the agent's processor). */
static void target_release(struct target_objs *t)
{
    if (st.agent_kind == XTQ_AGENT_CPU) {
        xtq_signal_destroy(t->sig);
        xtq_signal_destroy(t->done);
        return;
    }
    if (st.rank != 1)
        return;
    for (int i = 0; i < 2; i++)
        if (st.rbuf_dev[i] && rtt_cuda_host_unregister(st.rbuf[i]) != 0)
            fprintf(stderr, "rtt: %s\n", rtt_cuda_last_error());
    rtt_cuda_teardown();
}

/* --agent cuda on the command line (before MPI_Init: no parsing yet). */
static bool argv_wants_cuda(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--agent") == 0 && strcmp(argv[i + 1], "cuda") == 0)
            return true;
    return false;
}

/* The initiator runs no GPU work. Left alone, its libxtq would open a CUDA
 * agent too, and two persistent packet processors in two processes would
 * time-slice a shared GPU. Hide the GPUs from rank 0 before anything in it
 * initialises CUDA: from the launcher's rank before MPI_Init (which may
 * initialise CUDA itself), and again once MPI has said the rank. */
static void hide_gpus_if_initiator(const char *rank)
{
    if (rank && strcmp(rank, "0") == 0)
        setenv("CUDA_VISIBLE_DEVICES", "", 1);
}

/* --agent cuda: whether the target's CUDA agent is usable. Rank 1 decides
 * and tells rank 0, which prints SKIP with the library's reason. */
struct cuda_avail {
    int32_t status;
    char reason[256];
    char name[64];
};

static bool cuda_agent_usable(int setup_rc, struct cuda_avail *av)
{
    memset(av, 0, sizeof(*av));
    if (st.rank == 1) {
        av->status = xtq_agent_kind_status(st.ctx, XTQ_AGENT_CUDA, av->reason, sizeof(av->reason));
        if (av->status == 0) {
            xtq_agent_t *agent;
            xtq_agent_info_t info;
            if (setup_rc != 0) {
                fprintf(stderr,
                        "rtt: the CUDA agent is usable but the benchmark's own CUDA setup "
                        "failed: %s\n",
                        rtt_cuda_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            CHECK_XTQ(xtq_agent_find(st.ctx, XTQ_AGENT_CUDA, &agent));
            CHECK_XTQ(xtq_agent_get_info(agent, &info));
            snprintf(av->name, sizeof(av->name), "%s", info.name);
        }
    }
    MPI_Bcast(av, sizeof(*av), MPI_BYTE, 1, MPI_COMM_WORLD);
    if (av->status != 0 && st.rank == 0)
        printf("SKIP: %s\n", av->reason[0] ? av->reason : "no usable CUDA agent");
    return av->status == 0;
}

int main(int argc, char **argv)
{
    if (argv_wants_cuda(argc, argv)) {
        const char *r = getenv("OMPI_COMM_WORLD_RANK");
        hide_gpus_if_initiator(r ? r : getenv("PMIX_RANK"));
    }
    MPI_Init(&argc, &argv);
    int nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &st.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    st.o = (bh_opts_t){.iters = 10000, .warmup = 1000, .modes = (1u << M_COUNT) - 1};
    st.agent_kind = XTQ_AGENT_CPU;
    if (bh_parse_args(argc, argv, &st.o, mode_names, M_COUNT, extra_opt, NULL,
                      "  --breakdown PATH  also write per-iteration stage timestamps (CSV)\n"
                      "  --agent cpu|cuda  agent that runs the tasks (default cpu); cuda: the\n"
                      "                    target's GPU sums the payload's 4-byte words\n") < 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    bool gpu = st.agent_kind == XTQ_AGENT_CUDA;
    if (gpu && !RTT_CUDA_BUILT) {
        if (st.rank == 0)
            fprintf(stderr, "rtt: --agent cuda: this xtq_bench_rtt was built without CUDA "
                            "(configure with nvcc installed and -DXTQ_ENABLE_CUDA=ON)\n");
        MPI_Finalize();
        return 2;
    }
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

    /* The target's CUDA runtime starts before libxtq's CUDA agent does (see
     * rtt_cuda_setup); a failure counts only if the agent turns out usable. */
    int cuda_setup_rc = 0;
    st.wait_ns = gpu ? CUDA_STALL_NS : XTQ_TIMEOUT_INFINITE;
    if (gpu && st.rank == 0)
        hide_gpus_if_initiator("0");
    if (gpu && st.rank == 1)
        cuda_setup_rc = rtt_cuda_setup(0, &st.gpu_result, &st.gpu_tasks);

    CHECK_XTQ(xtq_init(NULL, &st.ctx));
    struct cuda_avail av = {0};
    if (gpu && !cuda_agent_usable(cuda_setup_rc, &av)) {
        CHECK_XTQ(xtq_finalize(st.ctx));
        if (st.rank == 1)
            rtt_cuda_teardown();
        MPI_Finalize();
        return 0;
    }
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
    /* Receive buffers on their own pages: --agent cuda pins them. */
    st.rbuf_len = (cap + 4095) & ~(size_t)4095;
    st.sbuf = calloc(1, cap);
    st.rbuf[0] = aligned_alloc(4096, st.rbuf_len);
    st.rbuf[1] = aligned_alloc(4096, st.rbuf_len);
    st.reply = calloc(1, 64);
    if (!st.sbuf || !st.rbuf[0] || !st.rbuf[1] || !st.reply) {
        fprintf(stderr, "rtt: out of memory for %zu-byte buffers\n", cap);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(st.rbuf[0], 0, st.rbuf_len);
    memset(st.rbuf[1], 0, st.rbuf_len);
    for (size_t i = 0; i < st.max_size; i++)
        st.sbuf[sizeof(struct bench_cmd) + i] = (uint8_t)(i * 7 + 1);

    struct target_objs t = {0};
    if (!gpu)
        cpu_target_setup(&t);
    else if (st.rank == 1)
        cuda_target_setup(&t);
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

    /* Target CPU per task: application thread, progress thread (the
     * emulated NIC), CPU-agent workers, whole process. */
    static const char *const cols[] = {
        "size",      "mode",      "median_us",   "p99_us",       "min_us", "mean_us", "iters",
        "tgt_app_us", "tgt_nic_us", "tgt_agent_us", "tgt_proc_us", "agent"};
    bh_table_t tab;
    bh_table_init(&tab, cols, 12);
    double med[BH_MAX_SIZES][M_COUNT] = {{0}};
    const char *agent_name = xtq_agent_kind_name(st.agent_kind);
    char agent_desc[256];
    if (gpu)
        snprintf(agent_desc, sizeof(agent_desc),
                 "cuda (%s on rank 1; task: sum of the payload's 4-byte words into device memory, "
                 "%u B per work-item, groups of %u)",
                 av.name, RTT_CUDA_ITEM_BYTES, RTT_CUDA_WG);
    else
        snprintf(agent_desc, sizeof(agent_desc), "cpu");
    if (st.rank == 0) {
        printf("# rtt: provider %s, %d ranks, warmup %u, iters %u, agent %s\n", prov, nranks,
               st.o.warmup, st.o.iters, agent_desc);
        if (gpu && xtq_agent_kind_status(st.ctx, XTQ_AGENT_CUDA, NULL, 0) == 0)
            printf("# note: rank 0 opened a CUDA agent too (CUDA was initialised before its GPU "
                   "could be hidden); two packet processors share the GPU\n");
    }
    for (unsigned si = 0; si < st.o.nsizes; si++) {
        size_t size = st.o.sizes[si];
        for (int m = 0; m < M_COUNT; m++) {
            if (!(st.o.modes & (1u << m)))
                continue;
            struct phase_result r =
                run_phase(m, size, t.queue, t.kernel, t.sig, t.done, st.breakdown_path != NULL, bd);
            if (st.rank != 0)
                continue;
            char sz[32];
            med[si][m] = r.rtt.median_ns;
            bh_table_add(&tab, "%s|%s|%.2f|%.2f|%.2f|%.2f|%u|%.3f|%.3f|%.3f|%.3f|%s",
                         bh_size_str(size, sz, sizeof(sz)), mode_names[m], r.rtt.median_ns / 1e3,
                         r.rtt.p99_ns / 1e3, r.rtt.min_ns / 1e3, r.rtt.mean_ns / 1e3, r.rtt.count,
                         r.cpu.app / 1e3, r.cpu.nic / 1e3, r.cpu.agent / 1e3, r.cpu.proc / 1e3,
                         agent_name);
            printf("  %-8s %-4s median %9.2f us  p99 %9.2f us  target cpu us/task: app %.3f "
                   "nic %.3f agent %.3f process %.3f\n",
                   sz, mode_names[m], r.rtt.median_ns / 1e3, r.rtt.p99_ns / 1e3, r.cpu.app / 1e3,
                   r.cpu.nic / 1e3, r.cpu.agent / 1e3, r.cpu.proc / 1e3);
            fflush(stdout);
        }
    }

    if (st.rank == 0) {
        printf("\n");
        bh_table_print(&tab, stdout);
        if (st.o.csv_path) {
            char comment[768];
            snprintf(comment, sizeof(comment),
                     "# xtq_bench_rtt: provider %s, libxtq %s, warmup %u, iters %u (fewer above "
                     "32KiB), agent %s\n",
                     prov, xtq_version(), st.o.warmup, st.o.iters, agent_desc);
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
    target_teardown(&t);
    fab_close(&st.fab);
    CHECK_XTQ(xtq_finalize(st.ctx));
    target_release(&t);
    free(st.sbuf);
    free(st.rbuf[0]);
    free(st.rbuf[1]);
    free(st.reply);
    MPI_Finalize();
    return 0;
}
