/*
 * xtq_allreduce: allreduce as users run it, every path in one run, each
 * checked for the right answer, in nccl-tests' columns (size, count,
 * type, redop, then time / algbw / busbw / #wrong out of place and in
 * place, and the average bus bandwidth):
 *
 *   mpi     the MPI's own MPI_Allreduce on host buffers
 *   xtq     libxtq_coll on CPU agents (host buffers)
 *   staged  GPU buffers: copy to the host, MPI_Allreduce, copy back
 *   hsa     GPU buffers, the paper's HSA mode: the same schedules as xtq,
 *           but the application thread receives each step (MPI) and then
 *           launches the reduction kernel and waits for it
 *   xtqgpu  libxtq_coll on CUDA agents (device buffers)
 *   nccl    ncclAllReduce through dlopen("libnccl.so.2")
 *
 * GPU paths print SKIP with the reason where there is no GPU (or no NCCL).
 * Ratios against the baselines of the same run close the output.
 *
 *   mpirun -np 4 apps/allreduce/xtq_allreduce --sizes 8-64M --csv out.csv
 *   mpirun -np N apps/allreduce/xtq_allreduce --sizes 4M --strong   (Fig. 9c)
 *
 * algbw = size / time; busbw = algbw * 2 (n - 1) / n (nccl-tests' factor
 * for allreduce); time is the slowest rank's average over the iterations.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include <xtq/coll.h>
#include <xtq/xtq.h>

#include "ar_gpu.h"
#include "bench_harness.h"
#include "coll_sched.h"

enum { M_MPI, M_XTQ, M_STAGED, M_HSA, M_XTQGPU, M_NCCL, M_COUNT };
static const char *const mode_names[M_COUNT] = {"mpi", "xtq", "staged", "hsa", "xtqgpu", "nccl"};
static const char *const mode_desc[M_COUNT] = {
    "the MPI's MPI_Allreduce, host buffers",
    "libxtq_coll on CPU agents, host buffers",
    "GPU buffers staged through the host around MPI_Allreduce",
    "GPU buffers, HSA mode: receive (MPI), then launch the reduction and wait",
    "libxtq_coll on CUDA agents, device buffers",
    "NCCL (libnccl.so.2, dlopen)",
};

struct app {
    bh_opts_t o;
    int rank, size, local_rank;
    enum xtq_datatype type;
    enum xtq_op op;
    int strong, require_gpu;
    uint64_t budget; /* bytes per (size, placement) measurement */
    xtq_ctx_t *ctx;
    xtq_coll_team_t *team, *gteam;
    int gpu_ok, nccl_ok;
    char gpu_why[256], nccl_why[256], gteam_why[256];
    bh_table_t csv;
    /* time (us) per mode and size, out of place, for the ratios */
    double t[M_COUNT][BH_MAX_SIZES];
    const char *commit, *machine;
};
static struct app A;

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "xtq_allreduce: rank %d: ", A.rank);                                       \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    } while (0)

/* ---- types -------------------------------------------------------------------- */

static MPI_Datatype mpi_type(enum xtq_datatype t)
{
    switch (t) {
    case XTQ_DT_INT8:
        return MPI_INT8_T;
    case XTQ_DT_UINT8:
        return MPI_UINT8_T;
    case XTQ_DT_INT32:
        return MPI_INT32_T;
    case XTQ_DT_UINT32:
        return MPI_UINT32_T;
    case XTQ_DT_INT64:
        return MPI_INT64_T;
    case XTQ_DT_UINT64:
        return MPI_UINT64_T;
    case XTQ_DT_FLOAT:
        return MPI_FLOAT;
    case XTQ_DT_DOUBLE:
        return MPI_DOUBLE;
    default:
        return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(enum xtq_op op)
{
    switch (op) {
    case XTQ_OP_SUM:
        return MPI_SUM;
    case XTQ_OP_PROD:
        return MPI_PROD;
    case XTQ_OP_MAX:
        return MPI_MAX;
    case XTQ_OP_MIN:
        return MPI_MIN;
    default:
        return MPI_OP_NULL;
    }
}

/* Inputs whose sums are exact in every type: small integers. */
static double value(int r, uint64_t i)
{
    return (double)((int)((r * 7 + i) % 11) - 5);
}

static double expected(uint64_t i)
{
    double v = value(0, i);
    for (int r = 1; r < A.size; r++) {
        double x = value(r, i);
        switch (A.op) {
        case XTQ_OP_SUM:
            v += x;
            break;
        case XTQ_OP_PROD:
            v *= x;
            break;
        case XTQ_OP_MAX:
            v = x > v ? x : v;
            break;
        case XTQ_OP_MIN:
            v = x < v ? x : v;
            break;
        default:
            break;
        }
    }
    return v;
}

static void store(void *buf, uint64_t i, double v)
{
    switch (A.type) {
    case XTQ_DT_INT8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case XTQ_DT_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)(int)v;
        break;
    case XTQ_DT_INT32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case XTQ_DT_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v;
        break;
    case XTQ_DT_INT64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case XTQ_DT_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v;
        break;
    case XTQ_DT_FLOAT:
        ((float *)buf)[i] = (float)v;
        break;
    case XTQ_DT_DOUBLE:
        ((double *)buf)[i] = v;
        break;
    default:
        break;
    }
}

static void fill(void *buf, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++)
        store(buf, i, value(A.rank, i));
}

/* Elements that differ from the expected result (exact comparison: the
 * inputs are small integers). */
static uint64_t wrong(const void *buf, uint64_t count)
{
    size_t es = xtq_datatype_size(A.type);
    uint8_t want[16];
    uint64_t bad = 0;
    for (uint64_t i = 0; i < count; i++) {
        store(want, 0, expected(i));
        if (memcmp((const uint8_t *)buf + i * es, want, es) != 0)
            bad++;
    }
    return bad;
}

/* ---- the HSA-mode executor: our schedules, two-sided, host-launched ------------ */

struct hsa_bufs {
    void *dev[COLL_BUF_COUNT];
    uint8_t *stage_in, *stage_out; /* pinned host */
    size_t stage_cap;
};
static struct hsa_bufs H;
static struct coll_thresholds TH;

static int hsa_allreduce(const void *sendbuf, void *recvbuf, uint64_t count, int inplace)
{
    struct coll_params p;
    struct coll_sched s;
    size_t es = xtq_datatype_size(A.type);
    MPI_Request *reqs;
    int rc;

    memset(&p, 0, sizeof(p));
    p.kind = XTQ_COLL_ALLREDUCE;
    p.nranks = A.size;
    p.rank = A.rank;
    p.count = count;
    p.elem_size = (uint32_t)es;
    p.piece_elems = count ? count : 1; /* whole steps: the HSA path does not pipeline */
    p.inplace = inplace;
    p.alg = coll_choose_alg(XTQ_COLL_ALLREDUCE, A.size, count, (uint32_t)es, &TH);
    rc = coll_sched_build(&p, &s);
    if (rc)
        return rc;
    if (s.scratch_elems * es > H.stage_cap || count * es > H.stage_cap)
        DIE("hsa: staging too small");
    H.dev[COLL_BUF_WORK] = recvbuf;
    H.dev[COLL_BUF_SEND] = (void *)sendbuf;
    for (unsigned k = 0; k < s.nprologue; k++) {
        const struct coll_copy *c = &s.prologue[k];
        if (ar_gpu_d2d((uint8_t *)H.dev[c->dst] + c->dst_off * es,
                       (uint8_t *)H.dev[c->src] + c->src_off * es, c->cnt * es))
            DIE("hsa: %s", ar_gpu_error());
    }
    reqs = malloc((s.nops + 1) * sizeof(*reqs));
    /* Steps in program order: a step's receives and sends together, then
     * the application thread launches each reduction and waits. */
    for (uint32_t i = 0; i < s.nops;) {
        uint32_t j = i, nreq = 0;
        size_t in_off = 0, out_off = 0;
        while (j < s.nops && s.ops[j].step == s.ops[i].step && s.ops[j].phase == s.ops[i].phase)
            j++;
        for (uint32_t k = i; k < j; k++) {
            const struct coll_op *op = &s.ops[k];
            size_t bytes = op->cnt * es;
            if (coll_op_is_recv(op->type)) {
                MPI_Irecv(H.stage_in + in_off, (int)bytes, MPI_BYTE, op->peer, op->step,
                          MPI_COMM_WORLD, &reqs[nreq++]);
                in_off += (bytes + 63) & ~(size_t)63;
            } else {
                if (bytes && ar_gpu_d2h(H.stage_out + out_off,
                                        (uint8_t *)H.dev[op->buf] + op->off * es, bytes))
                    DIE("hsa: %s", ar_gpu_error());
                MPI_Isend(H.stage_out + out_off, (int)bytes, MPI_BYTE, op->peer, op->step,
                          MPI_COMM_WORLD, &reqs[nreq++]);
                out_off += (bytes + 63) & ~(size_t)63;
            }
        }
        MPI_Waitall((int)nreq, reqs, MPI_STATUSES_IGNORE);
        in_off = 0;
        for (uint32_t k = i; k < j; k++) {
            const struct coll_op *op = &s.ops[k];
            size_t bytes = op->cnt * es;
            uint8_t *in = H.stage_in + in_off;
            void *dst = (uint8_t *)H.dev[op->buf] + op->off * es;
            if (!coll_op_is_recv(op->type))
                continue;
            in_off += (bytes + 63) & ~(size_t)63;
            if (!bytes)
                continue;
            int err = 0;
            switch (op->type) {
            case COLL_OP_RECV_REDUCE:
                err = ar_gpu_reduce(dst, in, op->cnt, A.type, A.op, 1);
                break;
            case COLL_OP_RECV_COPY:
                err = ar_gpu_h2d(dst, in, bytes);
                break;
            case COLL_OP_RECV_REDUCE_TO: {
                const void *a = (uint8_t *)H.dev[op->abuf] + op->aoff * es;
                if (op->in_first)
                    err = ar_gpu_h2d(dst, in, bytes) ||
                          ar_gpu_reduce(dst, a, op->cnt, A.type, A.op, 1);
                else
                    err = ar_gpu_d2d(dst, a, bytes) ||
                          ar_gpu_reduce(dst, in, op->cnt, A.type, A.op, 1);
                break;
            }
            default:
                break;
            }
            if (err)
                DIE("hsa: %s", ar_gpu_error());
        }
        i = j;
    }
    free(reqs);
    coll_sched_free(&s);
    return 0;
}

/* ---- one measurement ---------------------------------------------------------------- */

struct bufs {
    void *in, *out;   /* where the path reads and writes (host or device) */
    void *hin, *hout; /* host copies for filling and checking */
    void *stage;      /* staged: pinned host vector */
};

static int run_once(int mode, struct bufs *b, uint64_t count, int inplace)
{
    size_t bytes = count * xtq_datatype_size(A.type);
    const void *src = inplace ? NULL : b->in;
    int rc = 0;

    switch (mode) {
    case M_MPI:
        rc = MPI_Allreduce(inplace ? MPI_IN_PLACE : src, b->out, (int)count, mpi_type(A.type),
                           mpi_op(A.op), MPI_COMM_WORLD);
        break;
    case M_XTQ:
        rc = xtq_coll_allreduce(A.team, inplace ? XTQ_COLL_IN_PLACE : src, b->out, count, A.type,
                                A.op);
        break;
    case M_XTQGPU:
        rc = xtq_coll_allreduce(A.gteam, inplace ? XTQ_COLL_IN_PLACE : src, b->out, count, A.type,
                                A.op);
        break;
    case M_STAGED:
        if (ar_gpu_d2h(b->stage, inplace ? b->out : b->in, bytes))
            DIE("staged: %s", ar_gpu_error());
        rc = MPI_Allreduce(MPI_IN_PLACE, b->stage, (int)count, mpi_type(A.type), mpi_op(A.op),
                           MPI_COMM_WORLD);
        if (ar_gpu_h2d(b->out, b->stage, bytes))
            DIE("staged: %s", ar_gpu_error());
        break;
    case M_HSA:
        rc = hsa_allreduce(src, b->out, count, inplace);
        break;
    case M_NCCL:
        rc = ar_nccl_allreduce(inplace ? b->out : src, b->out, count, A.type, A.op);
        break;
    default:
        break;
    }
    return rc;
}

static int gpu_mode(int mode)
{
    return mode == M_STAGED || mode == M_HSA || mode == M_XTQGPU || mode == M_NCCL;
}

/* Load the inputs into the path's buffers. */
static void load(int mode, struct bufs *b, uint64_t count, int inplace)
{
    size_t bytes = count * xtq_datatype_size(A.type);
    void *dst = inplace ? b->out : b->in;
    if (!gpu_mode(mode)) {
        memcpy(dst, b->hin, bytes);
        return;
    }
    if (bytes && ar_gpu_h2d(dst, b->hin, bytes))
        DIE("%s", ar_gpu_error());
}

static uint64_t check(int mode, struct bufs *b, uint64_t count)
{
    size_t bytes = count * xtq_datatype_size(A.type);
    if (gpu_mode(mode)) {
        if (bytes && ar_gpu_d2h(b->hout, b->out, bytes))
            DIE("%s", ar_gpu_error());
        return wrong(b->hout, count);
    }
    return wrong(b->out, count);
}

/* Average time (us) of `iters` calls, the slowest rank's; and #wrong. */
static double measure(int mode, struct bufs *b, uint64_t count, int inplace, uint64_t *bad)
{
    size_t bytes = count * xtq_datatype_size(A.type);
    unsigned iters = A.o.iters, warm = A.o.warmup;
    uint64_t w;
    double t0, t, tmax;
    int rc;

    if (bytes && A.budget / bytes < iters)
        iters = (unsigned)(A.budget / bytes) > 3 ? (unsigned)(A.budget / bytes) : 3;
    if (warm > iters)
        warm = iters;
    /* Right answer first (in place, the input must be reloaded each call). */
    load(mode, b, count, inplace);
    rc = run_once(mode, b, count, inplace);
    if (rc)
        DIE("%s: %d elements: error %d (%s)", mode_names[mode], (int)count, rc,
            rc < 0 ? xtq_strerror(rc) : "MPI/NCCL");
    w = check(mode, b, count);
    MPI_Allreduce(&w, bad, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (unsigned i = 0; i < warm; i++)
        if (run_once(mode, b, count, inplace))
            DIE("%s failed", mode_names[mode]);
    if (gpu_mode(mode))
        ar_gpu_sync();
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (unsigned i = 0; i < iters; i++)
        if (run_once(mode, b, count, inplace))
            DIE("%s failed", mode_names[mode]);
    if (gpu_mode(mode))
        ar_gpu_sync();
    t = (MPI_Wtime() - t0) / iters * 1e6;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

/* ---- per mode -------------------------------------------------------------------------- */

static void *gpu_later[2 * M_COUNT], *host_later[M_COUNT + 2];
static unsigned ngpu_later, nhost_later;

static void defer_free(void *p)
{
    if (ngpu_later < sizeof(gpu_later) / sizeof(gpu_later[0]))
        gpu_later[ngpu_later++] = p;
}

static void defer_free_host(void *p)
{
    if (nhost_later < sizeof(host_later) / sizeof(host_later[0]))
        host_later[nhost_later++] = p;
}

static const char *skip_reason(int mode)
{
    if (gpu_mode(mode) && !A.gpu_ok)
        return A.gpu_why;
    if (mode == M_NCCL && !A.nccl_ok)
        return A.nccl_why;
    if (mode == M_XTQGPU && !A.gteam)
        return A.gteam_why;
    if ((mode == M_MPI || mode == M_STAGED || mode == M_HSA) &&
        (mpi_type(A.type) == MPI_DATATYPE_NULL || mpi_op(A.op) == MPI_OP_NULL))
        return "the MPI has no such type or operation";
    return NULL;
}

static void run_mode(int mode)
{
    size_t es = xtq_datatype_size(A.type), maxb = 0;
    struct bufs b = {0};
    const char *why = skip_reason(mode);
    double sum_busbw = 0;
    unsigned nbw = 0;
    uint64_t total_bad = 0;

    for (unsigned k = 0; k < A.o.nsizes; k++)
        if (A.o.sizes[k] > maxb)
            maxb = A.o.sizes[k];
    maxb = (maxb / es + 1) * es;
    if (A.rank == 0) {
        printf("\n# mode %s: %s\n", mode_names[mode], mode_desc[mode]);
        if (why)
            printf("# SKIP %s: %s\n", mode_names[mode], why);
    }
    if (why)
        return;
    b.hin = malloc(maxb);
    b.hout = malloc(maxb);
    if (gpu_mode(mode)) {
        b.in = ar_gpu_malloc(maxb);
        b.out = ar_gpu_malloc(maxb);
        b.stage = ar_gpu_host_alloc(maxb);
        if (!b.in || !b.out || !b.stage)
            DIE("GPU buffers of %zu bytes: %s", maxb, ar_gpu_error());
    } else {
        b.in = malloc(maxb);
        b.out = malloc(maxb);
    }
    if (A.rank == 0) {
        printf("#%53s%37s\n", "out-of-place", "in-place");
        printf("# %10s %12s %8s %6s %9s %8s %8s %6s %9s %8s %8s %6s  %s\n", "size", "count", "type",
               "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
               "algorithm");
        printf("# %10s %12s %8s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    for (unsigned k = 0; k < A.o.nsizes; k++) {
        uint64_t count = A.o.sizes[k] / es, bad[2];
        size_t bytes = count * es;
        double tm[2], algbw[2], busbw[2];
        const char *alg = "-";

        fill(b.hin, count);
        for (int inplace = 0; inplace <= 1; inplace++) {
            tm[inplace] = measure(mode, &b, count, inplace, &bad[inplace]);
            algbw[inplace] = tm[inplace] > 0 ? (double)bytes / tm[inplace] / 1e3 : 0;
            busbw[inplace] = algbw[inplace] * 2.0 * (A.size - 1) / A.size;
            total_bad += bad[inplace];
        }
        if (mode == M_XTQ || mode == M_HSA || mode == M_XTQGPU)
            alg = xtq_coll_alg_name(
                mode == M_HSA
                    ? coll_choose_alg(XTQ_COLL_ALLREDUCE, A.size, count, (uint32_t)es, &TH)
                    : xtq_coll_algorithm(mode == M_XTQ ? A.team : A.gteam, XTQ_COLL_ALLREDUCE,
                                         count, A.type));
        A.t[mode][k] = tm[0];
        sum_busbw += busbw[0] + busbw[1];
        nbw += 2;
        if (A.rank == 0) {
            printf("  %10zu %12llu %8s %6s %9.2f %8.3f %8.3f %6llu %9.2f %8.3f %8.3f %6llu  %s\n",
                   bytes, (unsigned long long)count, xtq_datatype_name(A.type), xtq_op_name(A.op),
                   tm[0], algbw[0], busbw[0], (unsigned long long)bad[0], tm[1], algbw[1], busbw[1],
                   (unsigned long long)bad[1], alg);
            fflush(stdout);
            for (int inplace = 0; inplace <= 1; inplace++)
                bh_table_add(&A.csv, "%s|%d|%zu|%llu|%s|%s|%s|%.3f|%.4f|%.4f|%llu|%s",
                             mode_names[mode], A.size, bytes, (unsigned long long)count,
                             xtq_datatype_name(A.type), xtq_op_name(A.op), inplace ? "in" : "out",
                             tm[inplace], algbw[inplace], busbw[inplace],
                             (unsigned long long)bad[inplace], alg);
        }
    }
    if (A.rank == 0) {
        printf("# Out of bounds values : %llu %s\n", (unsigned long long)total_bad,
               total_bad ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %.4f (%s)\n", nbw ? sum_busbw / nbw : 0.0,
               mode_names[mode]);
    }
    if (gpu_mode(mode)) {
        /* Device memory goes back at the end, after xtq_finalize (a free
         * may wait for the device to idle, which a running packet
         * processor prevents). */
        defer_free(b.in);
        defer_free(b.out);
        defer_free_host(b.stage);
    } else {
        free(b.in);
        free(b.out);
    }
    free(b.hin);
    free(b.hout);
    if (total_bad)
        A.t[mode][0] = -1; /* marks the mode failed for the exit status */
}

static void ratios(void)
{
    static const struct {
        int num, den;
    } pairs[] = {{M_XTQ, M_MPI},     {M_XTQGPU, M_HSA}, {M_XTQGPU, M_STAGED},
                 {M_XTQGPU, M_NCCL}, {M_HSA, M_STAGED}, {M_XTQGPU, M_XTQ}};
    if (A.rank != 0)
        return;
    printf("\n# ratios of out-of-place times (below 1: the first is faster)\n# %10s", "size");
    for (unsigned p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        char h[32];
        snprintf(h, sizeof(h), "%s/%s", mode_names[pairs[p].num], mode_names[pairs[p].den]);
        printf(" %14s", h);
    }
    printf("\n");
    for (unsigned k = 0; k < A.o.nsizes; k++) {
        printf("  %10zu", A.o.sizes[k]);
        for (unsigned p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
            double a = A.t[pairs[p].num][k], b = A.t[pairs[p].den][k];
            if (a > 0 && b > 0)
                printf(" %14.3f", a / b);
            else
                printf(" %14s", "-");
        }
        printf("\n");
    }
}

/* ---- main -------------------------------------------------------------------------------- */

static int extra(const char *opt, const char *val, void *arg)
{
    (void)arg;
    if (strcmp(opt, "--type") == 0 && val) {
        for (int t = 0; t < XTQ_DT_COUNT; t++)
            if (strcmp(val, xtq_datatype_name((enum xtq_datatype)t)) == 0) {
                A.type = (enum xtq_datatype)t;
                return 2;
            }
        return -1;
    }
    if (strcmp(opt, "--op") == 0 && val) {
        for (int o = 0; o < XTQ_OP_COUNT; o++)
            if (strcmp(val, xtq_op_name((enum xtq_op)o)) == 0) {
                A.op = (enum xtq_op)o;
                return 2;
            }
        return -1;
    }
    if (strcmp(opt, "--require-gpu") == 0) {
        A.require_gpu = 1;
        return 1;
    }
    if (strcmp(opt, "--strong") == 0) {
        A.strong = 1;
        return 1;
    }
    if (strcmp(opt, "--budget") == 0 && val) {
        long long v = bh_parse_size(val);
        if (v <= 0)
            return -1;
        A.budget = (uint64_t)v;
        return 2;
    }
    if (strcmp(opt, "--commit") == 0 && val) {
        A.commit = val;
        return 2;
    }
    if (strcmp(opt, "--machine") == 0 && val) {
        A.machine = val;
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    char comment[512], hostname[64];
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int rc, failed = 0;

    A.local_rank = lr ? atoi(lr) : 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &A.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &A.size);
    A.o = (bh_opts_t){.iters = 50, .warmup = 5, .modes = (1u << M_COUNT) - 1};
    A.type = XTQ_DT_FLOAT;
    A.op = XTQ_OP_SUM;
    A.budget = 512u << 20;
    A.commit = "unknown";
    gethostname(hostname, sizeof(hostname));
    A.machine = hostname;
    if (bh_parse_args(argc, argv, &A.o, mode_names, M_COUNT, extra, NULL,
                      "  --type T        element type (float; int8 uint8 int32 uint32 int64\n"
                      "                  uint64 double: every path; others: xtq paths only)\n"
                      "  --op OP         sum (prod, max, min)\n"
                      "  --strong        strong scaling (Fig. 9c): one size, default 4 MiB\n"
                      "  --require-gpu   exit 77 (skip) when a GPU path cannot run here\n"
                      "  --budget BYTES  bytes moved per measurement (caps iterations; 512M)\n"
                      "  --commit C --machine M   recorded in the CSV\n") < 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    if (A.o.nsizes == 0) {
        if (A.strong) {
            A.o.sizes[0] = 4u << 20;
            A.o.nsizes = 1;
        } else {
            A.o.nsizes = 0;
            for (size_t s = 8; s <= (64u << 20); s *= 2)
                A.o.sizes[A.o.nsizes++] = s;
        }
    }
    if (!xtq_reduce_supported(A.op, A.type) || A.op == XTQ_OP_REPLACE || A.op == XTQ_OP_NO_OP)
        DIE("--op %s does not apply to --type %s", xtq_op_name(A.op), xtq_datatype_name(A.type));

    /* The GPU is opened before libxtq's CUDA agent starts (see ar_gpu.cu). */
    A.gpu_ok = ar_gpu_open(A.local_rank, A.gpu_why, sizeof(A.gpu_why)) == 0;
    rc = xtq_init(NULL, &A.ctx);
    if (rc)
        DIE("xtq_init: %s", xtq_strerror(rc));
    TH.rd_max = 16384;
    TH.ring_min = 64u << 20;
    {
        /* The HSA path chooses as libxtq_coll does (XTQ_COLL_RD_MAX...). */
        xtq_param_info_t pi;
        for (unsigned i = 0; i < xtq_param_count(); i++)
            if (xtq_param_get_info(i, &pi) == 0 && pi.value) {
                if (strcmp(pi.name, "XTQ_COLL_RD_MAX") == 0)
                    TH.rd_max = (uint64_t)bh_parse_size(pi.value);
                if (strcmp(pi.name, "XTQ_COLL_RING_MIN") == 0)
                    TH.ring_min = (uint64_t)bh_parse_size(pi.value);
            }
    }
    if (A.o.modes & (1u << M_XTQ)) {
        rc = xtq_coll_team_create(A.ctx, NULL, &A.team);
        if (rc)
            DIE("xtq_coll_team_create: %s", xtq_strerror(rc));
    }
    snprintf(A.gteam_why, sizeof(A.gteam_why), "%s", A.gpu_why);
    if (A.gpu_ok) {
        size_t maxb = 0;
        for (unsigned k = 0; k < A.o.nsizes; k++)
            maxb = A.o.sizes[k] > maxb ? A.o.sizes[k] : maxb;
        /* A step receives at most the vector (plus piece alignment). */
        H.stage_cap = 2 * maxb + 4096;
        H.stage_in = ar_gpu_host_alloc(H.stage_cap);
        H.stage_out = ar_gpu_host_alloc(H.stage_cap);
        /* The schedules' scratch (recursive doubling's incoming half, the
         * ring's pieces) lives on the device in HSA mode: without it the
         * prologue copied into a NULL buffer ("cudaMemcpyAsync: invalid
         * argument" on the H100). */
        H.dev[COLL_BUF_SCRATCH] = ar_gpu_malloc(H.stage_cap);
        if (!H.stage_in || !H.stage_out || !H.dev[COLL_BUF_SCRATCH])
            DIE("pinned staging: %s", ar_gpu_error());
        if (A.o.modes & (1u << M_NCCL)) {
            const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
            int local = ls ? atoi(ls) : 1, ndev = ar_gpu_count();
            A.nccl_ok = ar_nccl_open(A.nccl_why, sizeof(A.nccl_why)) == 0;
            if (A.nccl_ok && local > ndev) {
                /* NCCL refuses two ranks on one GPU. */
                A.nccl_ok = 0;
                snprintf(A.nccl_why, sizeof(A.nccl_why),
                         "NCCL needs a GPU per rank (%d ranks share %d GPU(s) on this host)", local,
                         ndev);
            }
            int ok_all = 0;
            MPI_Allreduce(&A.nccl_ok, &ok_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (ok_all) {
                int n = ar_nccl_unique_id_size();
                uint8_t *id = calloc(1, (size_t)n);
                if (A.rank == 0 && ar_nccl_get_unique_id(id))
                    DIE("ncclGetUniqueId: %s", ar_gpu_error());
                MPI_Bcast(id, n, MPI_BYTE, 0, MPI_COMM_WORLD);
                int init_ok = ar_nccl_init(A.size, id, A.rank) == 0, all_ok = 0;
                if (!init_ok)
                    snprintf(A.nccl_why, sizeof(A.nccl_why), "%s", ar_gpu_error());
                MPI_Allreduce(&init_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                if (!all_ok) {
                    if (init_ok)
                        snprintf(A.nccl_why, sizeof(A.nccl_why),
                                 "ncclCommInitRank failed on another rank");
                    ar_nccl_close();
                    A.nccl_ok = 0;
                }
                free(id);
            } else if (A.nccl_ok) {
                A.nccl_ok = 0;
                snprintf(A.nccl_why, sizeof(A.nccl_why), "libnccl.so.2 missing on some rank");
            }
        }
    }
    int gpu_all = 0;
    MPI_Allreduce(&A.gpu_ok, &gpu_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (A.gpu_ok && !gpu_all) {
        A.gpu_ok = 0;
        snprintf(A.gpu_why, sizeof(A.gpu_why), "some rank has no usable GPU");
    }
    if (A.require_gpu && !gpu_all) {
        if (A.rank == 0)
            printf("SKIP: %s\n", A.gpu_why);
        if (A.team)
            xtq_coll_team_destroy(A.team);
        xtq_finalize(A.ctx);
        MPI_Finalize();
        return 77;
    }

    const char *cols[] = {"mode",      "ranks",   "size",      "count",     "type",  "redop",
                          "placement", "time_us", "algbw_GBs", "busbw_GBs", "wrong", "algorithm"};
    bh_table_init(&A.csv, cols, sizeof(cols) / sizeof(cols[0]));
    if (A.rank == 0) {
        printf("# xtq_allreduce: %d ranks, provider %s, machine %s, commit %s\n", A.size,
               xtq_provider_name(A.ctx), A.machine, A.commit);
        if (A.team)
            printf("# xtq: triggers %s\n",
                   xtq_coll_team_triggers(A.team) == XTQ_COLL_TRIGGERS_ENGINE
                       ? "engine (triggered XtqPuts)"
                       : "task (the receive task sends the next step)");
        if (A.team)
            printf("# xtq: same-host single copy (CMA) from %d of %d peers\n",
                   xtq_coll_team_cma_peers(A.team), A.size - 1);
        printf("# GPU: %s\n", A.gpu_ok ? ar_gpu_name() : A.gpu_why);
    }
    /* GPU paths that do not use the CUDA agent first: xtqgpu starts its
     * packet processor, which keeps the device busy from then on. */
    static const int order[] = {M_MPI, M_XTQ, M_STAGED, M_HSA, M_NCCL, M_XTQGPU};
    for (unsigned i = 0; i < M_COUNT; i++) {
        int m = order[i];
        if (!(A.o.modes & (1u << m)))
            continue;
        if (m == M_XTQGPU && A.gpu_ok) {
            xtq_coll_team_attr_t ta;
            memset(&ta, 0, sizeof(ta));
            ta.field_mask = XTQ_COLL_TEAM_ATTR_FIELD_MEM;
            ta.mem = XTQ_COLL_MEM_CUDA;
            rc = xtq_coll_team_create(A.ctx, &ta, &A.gteam);
            if (rc) {
                A.gteam = NULL;
                snprintf(A.gteam_why, sizeof(A.gteam_why), "no CUDA team: %s", xtq_strerror(rc));
            } else if (A.rank == 0) {
                printf("# xtqgpu: %s\n", xtq_coll_team_gpu_peer(A.gteam) == 1
                                              ? "pieces read from the sender's GPU (peer reads)"
                                              : "pieces through pinned host memory");
            }
        }
        run_mode(m);
        if (A.t[m][0] < 0)
            failed = 1;
    }
    ratios();
    if (A.rank == 0 && A.o.csv_path) {
        snprintf(comment, sizeof(comment),
                 "# xtq_allreduce, %d ranks, machine %s, commit %s, provider %s\n", A.size,
                 A.machine, A.commit, xtq_provider_name(A.ctx));
        if (bh_table_write_csv(&A.csv, A.o.csv_path, comment))
            fprintf(stderr, "xtq_allreduce: cannot write %s\n", A.o.csv_path);
    }
    bh_table_free(&A.csv);
    if (A.team)
        xtq_coll_team_destroy(A.team);
    if (A.gteam)
        xtq_coll_team_destroy(A.gteam);
    if (A.nccl_ok)
        ar_nccl_close();
    xtq_finalize(A.ctx);
    for (unsigned i = 0; i < ngpu_later; i++)
        ar_gpu_free(gpu_later[i]);
    for (unsigned i = 0; i < nhost_later; i++)
        ar_gpu_host_free(host_later[i]);
    if (A.gpu_ok) {
        ar_gpu_host_free(H.stage_in);
        ar_gpu_host_free(H.stage_out);
        ar_gpu_free(H.dev[COLL_BUF_SCRATCH]);
    }
    MPI_Finalize();
    return failed;
}
