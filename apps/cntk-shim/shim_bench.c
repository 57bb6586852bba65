/*
 * xtq_shim_bench: the time one aggregate takes, per shim back-end, in one
 * process so the ratios compare like with like. The default list is
 * xtq_train's gradients (the MLP's weight and bias tensors, packed as the
 * trainer's are); --sizes adds single buffers of those sizes. Every rank
 * enters each timed aggregate together (a barrier, not timed, before each
 * one), so the figure is the collective, not the skew between ranks.
 *   mpirun -np 4 xtq_shim_bench --modes mpi,xtq --iters 2000 --csv shim.csv
 */
#include "bench_harness.h"
#include "xtq_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef XTQ_SHIM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

static const char *const modes[] = {"mpi", "xtq", "nccl"};
#define NMODES 3

struct extra {
    size_t hidden[8], nhidden;
    int cuda;
};

static int extra_opt(const char *opt, const char *value, void *arg)
{
    struct extra *x = arg;
    if (!strcmp(opt, "--hidden") && value) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", value);
        x->nhidden = 0;
        for (char *t = strtok(buf, ","); t && x->nhidden < 8; t = strtok(NULL, ","))
            x->hidden[x->nhidden++] = strtoul(t, NULL, 10);
        return 2;
    }
    if (!strcmp(opt, "--device") && value) {
        if (strcmp(value, "cpu") && strcmp(value, "cuda"))
            return -1;
        x->cuda = !strcmp(value, "cuda");
        return 2;
    }
    return -1;
}

static void *buf_alloc(size_t bytes, int cuda)
{
    void *p = NULL;
#ifdef XTQ_SHIM_BENCH_CUDA
    if (cuda)
        return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
#endif
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
        return NULL;
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

static void buf_free(void *p, int cuda)
{
#ifdef XTQ_SHIM_BENCH_CUDA
    if (cuda) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* Time `iters` aggregates of `bufs`; returns 0 and the summary. */
static int run(xtq_shim_comm_t *c, xtq_shim_buf_t *bufs, size_t n, unsigned warmup, unsigned iters,
               bh_stats_t *st)
{
    uint64_t *t = malloc(iters * sizeof(*t));
    if (!t)
        return -1;
    for (unsigned i = 0; i < warmup + iters; i++) {
        xtq_shim_barrier(c);
        uint64_t t0 = bh_now_ns();
        int rc = xtq_shim_aggregate_in_place(c, bufs, n);
        uint64_t t1 = bh_now_ns();
        if (rc != 0) {
            fprintf(stderr, "xtq_shim_bench: %s: %s\n", xtq_shim_backend(c),
                    xtq_shim_last_error(c));
            free(t);
            return -1;
        }
        if (i >= warmup)
            t[i - warmup] = t1 - t0;
    }
    *st = bh_summarize(t, iters);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    bh_opts_t o = {.iters = 1000, .warmup = 100, .modes = 1u << 0};
    struct extra x = {.hidden = {256, 128}, .nhidden = 2};
    if (bh_parse_args(argc, argv, &o, modes, NMODES, extra_opt, &x,
                      "  --hidden LIST   the MLP whose gradients are aggregated (default 256,128)\n"
                      "  --device NAME   cpu or cuda buffers (default cpu)\n") != 0)
        return 2;
#ifndef XTQ_SHIM_BENCH_CUDA
    if (x.cuda) {
        printf("SKIP: built without CUDA\n");
        return 77;
    }
#else
    int ndev = 0;
    if (x.cuda && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (x.cuda) {
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        cudaSetDevice(lr ? atoi(lr) % ndev : 0);
    }
#endif

    /* The lists: the MLP's tensors, then one buffer per --sizes entry. */
    size_t sizes[8] = {784};
    size_t nl = x.nhidden + 1;
    for (size_t l = 0; l < x.nhidden; l++)
        sizes[l + 1] = x.hidden[l];
    sizes[nl] = 10;
    xtq_shim_buf_t mlp[16];
    size_t nmlp = 0, mlp_bytes = 0;
    for (size_t l = 0; l < nl; l++) {
        size_t counts[2] = {sizes[l] * sizes[l + 1], sizes[l + 1]};
        for (int k = 0; k < 2; k++) {
            mlp[nmlp] = (xtq_shim_buf_t){buf_alloc(counts[k] * 4, x.cuda), counts[k], XTQ_DT_FLOAT,
                                         x.cuda ? XTQ_SHIM_MEM_CUDA : XTQ_SHIM_MEM_HOST};
            mlp_bytes += counts[k] * 4;
            nmlp++;
        }
    }

    static const char *const cols[] = {"backend", "list",    "bytes", "median_us",
                                       "p99_us",  "mean_us", "vs_mpi"};
    bh_table_t table;
    bh_table_init(&table, cols, 7);
    double base[BH_MAX_SIZES + 1];
    size_t rank = 0, size = 0;
    int ran = 0;
    for (unsigned m = 0; m < NMODES; m++) {
        if (!(o.modes & (1u << m)))
            continue;
        if (!strcmp(modes[m], "nccl") && !x.cuda) {
            const char *r0 = getenv("OMPI_COMM_WORLD_RANK");
            if (!r0 || !strcmp(r0, "0"))
                printf("nccl: device buffers only (--device cuda)\n");
            continue;
        }
        xtq_shim_attr_t attr = {.field_mask = XTQ_SHIM_ATTR_FIELD_BACKEND, .backend = modes[m]};
        xtq_shim_comm_t *c;
        int rc = xtq_shim_init(&attr, &c);
        if (rc != 0) {
            /* Every rank sees the same answer: none is left waiting. */
            const char *r0 = getenv("OMPI_COMM_WORLD_RANK");
            if (!r0 || !strcmp(r0, "0"))
                printf("%s: not available (%s)\n", modes[m], xtq_strerror(rc));
            continue;
        }
        rank = xtq_shim_rank(c);
        size = xtq_shim_size(c);
        for (unsigned s = 0; s <= o.nsizes; s++) {
            xtq_shim_buf_t one, *list = mlp;
            size_t n = nmlp, bytes = mlp_bytes;
            char name[32] = "mlp";
            if (s > 0) {
                bytes = o.sizes[s - 1] & ~(size_t)3;
                one =
                    (xtq_shim_buf_t){buf_alloc(bytes, x.cuda), bytes / 4, XTQ_DT_FLOAT, mlp[0].mem};
                list = &one;
                n = 1;
                bh_size_str(bytes, name, sizeof(name));
            }
            bh_stats_t st;
            rc = run(c, list, n, o.warmup, o.iters, &st);
            if (s > 0)
                buf_free(one.data, x.cuda);
            if (rc != 0)
                return 1;
            if (m == 0)
                base[s] = st.median_ns;
            double ratio = (o.modes & 1u) ? st.median_ns / base[s] : 0.0;
            bh_table_add(&table, "%s|%s|%zu|%.1f|%.1f|%.1f|%.3f", modes[m], name, bytes,
                         st.median_ns / 1e3, st.p99_ns / 1e3, st.mean_ns / 1e3, ratio);
        }
        ran++;
        xtq_shim_finalize(c);
    }
    if (rank == 0 && ran) {
        printf("xtq_shim_bench: %zu ranks, %s buffers, mlp list = %zu tensors, %zu bytes; "
               "median of %u aggregates each (barrier before each, not timed)\n",
               size, x.cuda ? "device" : "host", nmlp, mlp_bytes, o.iters);
        bh_table_print(&table, stdout);
        if (o.csv_path) {
            char comment[512];
            snprintf(comment, sizeof(comment), "# xtq_shim_bench, %zu ranks, %s buffers\n", size,
                     x.cuda ? "device" : "host");
            bh_table_write_csv(&table, o.csv_path, comment);
        }
    }
    bh_table_free(&table);
    for (size_t i = 0; i < nmlp; i++)
        buf_free(mlp[i].data, x.cuda);
    return ran ? 0 : 77;
}
