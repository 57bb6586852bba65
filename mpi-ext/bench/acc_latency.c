/*
 * MPI accumulate latency and overlap, osu_acc_latency style, as a plain
 * MPI program: run it without the layer for the MPI's own numbers and
 * with it preloaded for the layer's (mpi-ext/bench/run.sh does both in one
 * script and prints the ratios).
 *
 *   acc_latency latency [--window create|allocate|device] [--max BYTES]
 *                       [--iters N] [--modes lock,fence,flush,lockall]
 *   acc_latency overlap [--bytes B] [--work-ms MS]
 *   acc_latency staged [--max BYTES] [--iters N]       (CUDA builds)
 *   acc_latency allreduce [--max BYTES] [--iters N]
 *
 * latency: rank 0 accumulates (MPI_SUM of doubles) into rank 1, which
 * only waits in the epoch calls: lock/acc/unlock, fence/acc/fence,
 * acc/flush inside one lock_all, or lock_all/acc/unlock_all (lockall:
 * what a lock_all epoch costs when it touches one target); 8 B to --max. Each row checks the target
 * window's sum at the end (a wrong value ends the run with a message).
 *
 * overlap (paper V-C): rank 1 computes for --work-ms without calling MPI
 * while rank 0 runs lock/acc/unlock for half that time; rank 0's latency
 * with the target busy against idle (in MPI_Barrier), and rank 1's compute
 * time with accumulates arriving against alone (the target's lost time).
 *
 * staged: the baseline for GPU windows: the operand sent two-sided, the
 * target copies its GPU memory to the host, adds, copies it back, answers.
 *
 * allreduce: MPI_Allreduce (MPI_SUM of doubles, out of place) from 8 B to
 * --max, on any number of ranks (the others: 2), every rank's result
 * checked, the slowest rank's time; "xtq" rows went to libxtq_coll
 * through the layer (MPIX_Xtq_coll_counts), "mpi" rows to the MPI.
 *
 * Output: a table on stdout, CSV rows prefixed "csv," (bench/results).
 */
#include <mpi.h>

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef XTQ_BENCH_CUDA
#include <cuda_runtime.h>
#endif

static int rank, nranks;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void die(const char *msg)
{
    fprintf(stderr, "acc_latency rank %d: %s\n", rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* What the layer says of the window ("mpi" without it). */
static const char *variant(MPI_Win win)
{
    typedef int (*fn)(MPI_Win, int *, char *, int);
    fn f = (fn)(uintptr_t)dlsym(RTLD_DEFAULT, "MPIX_Xtq_win_accelerated");
    static char why[160];
    int flag = 0;
    if (!f)
        return "mpi";
    f(win, &flag, why, sizeof(why));
    return flag ? "xtq" : "mpi";
}

static const char *mpi_name(void)
{
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    if (strstr(v, "Open MPI"))
        return "openmpi";
    if (strstr(v, "MPICH"))
        return "mpich";
    return "mpi";
}

struct opts {
    const char *window;
    long max;
    int iters;
    const char *modes;
    long bytes;
    double work_ms;
};

/* Window memory: host (create / allocate) or device (create on cudaMalloc). */
static double *window_mem(const struct opts *o, size_t bytes, MPI_Win *win, double **host_view)
{
    double *base = NULL;
    int rc;
    *host_view = NULL;
    /* Open MPI 4.1.6 fails MPI_Win_create on the GPU machines: say so. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (strcmp(o->window, "allocate") == 0) {
        MPI_Info info;
        MPI_Info_create(&info);
        /* The layer leaves one-host allocate windows to the MPI by
         * default; the benchmark asks, to compare like with like. */
        if (getenv("ACC_ALLOCATE_XTQ"))
            MPI_Info_set(info, "xtq_accelerate", "true");
        rc = MPI_Win_allocate((MPI_Aint)bytes, sizeof(double), info, MPI_COMM_WORLD, &base, win);
        MPI_Info_free(&info);
        *host_view = base;
        return rc == MPI_SUCCESS ? base : NULL;
    }
    if (strcmp(o->window, "device") == 0) {
#ifdef XTQ_BENCH_CUDA
        if (cudaMalloc((void **)&base, bytes) != cudaSuccess)
            die("cudaMalloc failed");
        cudaMemset(base, 0, bytes);
        cudaStreamSynchronize(0);
        rc = MPI_Win_create(base, (MPI_Aint)bytes, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
                            win);
        return rc == MPI_SUCCESS ? base : NULL;
#else
        die("built without CUDA: --window device unavailable");
#endif
    }
    base = calloc(1, bytes);
    rc = MPI_Win_create(base, (MPI_Aint)bytes, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, win);
    *host_view = base;
    return rc == MPI_SUCCESS ? base : NULL;
}

static double target_sum(const struct opts *o, double *host, double *base, size_t n)
{
    double s = 0;
#ifdef XTQ_BENCH_CUDA
    if (!host) {
        double *h = malloc(n * sizeof(double));
        cudaMemcpy(h, base, n * sizeof(double), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++)
            s += h[i];
        free(h);
        return s;
    }
#endif
    for (size_t i = 0; i < n; i++)
        s += host[i];
    return s;
}

static void latency(const struct opts *o)
{
    size_t maxn = (size_t)o->max / sizeof(double);
    double *src = malloc(maxn * sizeof(double)), *host, *base;
    double *t = malloc(sizeof(double) * (size_t)o->iters);
    MPI_Win win;

    for (size_t i = 0; i < maxn; i++)
        src[i] = 1.0;
    base = window_mem(o, maxn * sizeof(double), &win, &host);
    if (!base) {
        if (rank == 0)
            printf("# acc_latency: %s: the MPI cannot create a %s window here (MPI_Win_create "
                   "failed)\ncsv,latency,%s,%s,none,unavailable,0,0,0,0,0\n",
                   mpi_name(), o->window, mpi_name(), o->window);
        free(src);
        free(t);
        return;
    }
    const char *var = variant(win), *mpi = mpi_name();
    if (rank == 0)
        printf("# acc_latency: %s, %s window (%s), MPI_SUM of doubles rank 0 -> rank 1\n", mpi,
               o->window, var);
    for (const char *m = o->modes; *m;) {
        char mode[16];
        size_t ml = strcspn(m, ",");
        snprintf(mode, sizeof(mode), "%.*s", (int)ml, m);
        m += ml + (m[ml] == ',');
        if (rank == 0)
            printf("%-6s %10s %8s %12s %12s %12s\n", "mode", "bytes", "iters", "median_us",
                   "p10_us", "p90_us");
        for (size_t bytes = 8; bytes <= (size_t)o->max; bytes *= 2) {
            int n = (int)(bytes / sizeof(double));
            int iters = o->iters, warm = 10;
            if (bytes >= (1 << 20))
                iters = iters / 10 > 20 ? iters / 10 : 20;
            else if (bytes >= (64 << 10))
                iters = iters / 4 > 50 ? iters / 4 : 50;
            MPI_Barrier(MPI_COMM_WORLD);
            if (host)
                memset(host, 0, bytes);
#ifdef XTQ_BENCH_CUDA
            else {
                /* cudaMemset of device memory may return before it ran: a
                 * late memset wiped accumulates the agent had applied
                 * (flush, 16 B, on the H100: 170 of 220). The window's
                 * owner finishes its own writes before the epoch. */
                cudaMemset(base, 0, bytes);
                cudaStreamSynchronize(0);
            }
#endif
            MPI_Barrier(MPI_COMM_WORLD);
            if (strcmp(mode, "flush") == 0)
                MPI_Win_lock_all(0, win);
            else if (strcmp(mode, "fence") == 0)
                MPI_Win_fence(0, win);
            for (int it = -warm; it < iters; it++) {
                double t0 = now_us();
                if (strcmp(mode, "lock") == 0) {
                    if (rank == 0) {
                        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
                        MPI_Accumulate(src, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, MPI_SUM, win);
                        MPI_Win_unlock(1, win);
                    }
                } else if (strcmp(mode, "lockall") == 0) {
                    if (rank == 0) {
                        MPI_Win_lock_all(0, win);
                        MPI_Accumulate(src, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, MPI_SUM, win);
                        MPI_Win_unlock_all(win);
                    }
                } else if (strcmp(mode, "fence") == 0) {
                    if (rank == 0)
                        MPI_Accumulate(src, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, MPI_SUM, win);
                    MPI_Win_fence(0, win);
                } else {
                    if (rank == 0) {
                        MPI_Accumulate(src, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, MPI_SUM, win);
                        MPI_Win_flush(1, win);
                    }
                }
                if (it >= 0)
                    t[it] = now_us() - t0;
            }
            if (strcmp(mode, "flush") == 0)
                MPI_Win_unlock_all(win);
            else if (strcmp(mode, "fence") == 0)
                MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
            MPI_Barrier(MPI_COMM_WORLD);
            /* every element got 1.0 per operation */
            int ok = 1;
            if (rank == 1) {
                double s = target_sum(o, host, base, (size_t)n);
                double want = (double)n * (iters + warm);
                ok = fabs(s - want) < 0.5;
                if (!ok)
                    fprintf(stderr, "WRONG %s %zu B: window sum %.0f, expected %.0f\n", mode, bytes,
                            s, want);
            }
            MPI_Bcast(&ok, 1, MPI_INT, 1, MPI_COMM_WORLD);
            if (!ok)
                die("wrong result");
            if (rank == 0) {
                double med = pct(t, iters, 0.5), p10 = pct(t, iters, 0.1), p90 = pct(t, iters, 0.9);
                printf("%-6s %10zu %8d %12.2f %12.2f %12.2f\n", mode, bytes, iters, med, p10, p90);
                printf("csv,latency,%s,%s,%s,%s,%zu,%d,%.3f,%.3f,%.3f\n", mpi, o->window, mode, var,
                       bytes, iters, med, p10, p90);
                fflush(stdout);
            }
        }
    }
    MPI_Win_free(&win);
#ifdef XTQ_BENCH_CUDA
    if (!host && strcmp(o->window, "device") == 0)
        cudaFree(base);
#endif
    if (strcmp(o->window, "create") == 0)
        free(base);
    free(src);
    free(t);
}

/* The target's work: a dependent chain of flops, no memory traffic, no
 * MPI. Calibrated to take work_ms alone. */
static volatile double sink;

static double compute(long reps)
{
    double x = 1.0, t0 = now_us();
    for (long i = 0; i < reps; i++)
        x = x * 1.0000001 + 1e-9;
    sink = x;
    return now_us() - t0;
}

static void overlap(const struct opts *o)
{
    size_t n = (size_t)o->bytes / sizeof(double);
    const int cap = 1000000;
    double *src = malloc(n * sizeof(double)), *base = calloc(n, sizeof(double));
    double *lat = malloc(sizeof(double) * cap);
    MPI_Win win;
    long reps = 0;
    const char *mpi = mpi_name(), *var;
    int nops[2] = {0, 0};

    for (size_t i = 0; i < n; i++)
        src[i] = 1.0;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (MPI_Win_create(base, (MPI_Aint)(n * sizeof(double)), sizeof(double), MPI_INFO_NULL,
                       MPI_COMM_WORLD, &win) != MPI_SUCCESS) {
        if (rank == 0)
            printf("# overlap: %s cannot create a window here (MPI_Win_create failed)\n", mpi);
        free(src);
        free(base);
        free(lat);
        return;
    }
    var = variant(win);
    if (rank == 1) {
        /* calibrate: reps for work_ms alone */
        long r = 1000000;
        double us = compute(r);
        reps = (long)(r * (o->work_ms * 1000.0 / us));
    }
    /* Phase 0: the target idles in MPI_Barrier. Phase 1: it computes for
     * work_ms without calling MPI. Either way the origin runs
     * lock/acc/unlock for work_ms / 2 (at least one). */
    double busy_us = 0, alone_us = 0, med[2] = {0, 0}, p90[2] = {0, 0}, mx[2] = {0, 0};
    for (int phase = 0; phase < 2; phase++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            if (phase == 1)
                busy_us = compute(reps);
        } else {
            double s0 = now_us();
            int k = 0;
            do {
                double t0 = now_us();
                MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
                MPI_Accumulate(src, (int)n, MPI_DOUBLE, 1, 0, (int)n, MPI_DOUBLE, MPI_SUM, win);
                MPI_Win_unlock(1, win);
                lat[k++] = now_us() - t0;
            } while (k < cap && now_us() - s0 < o->work_ms * 500.0);
            nops[phase] = k;
            med[phase] = pct(lat, k, 0.5);
            p90[phase] = pct(lat, k, 0.9);
            mx[phase] = lat[k - 1]; /* sorted by pct */
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 1)
        alone_us = compute(reps); /* again, with nothing arriving */
    MPI_Barrier(MPI_COMM_WORLD);
    double tv[2] = {alone_us, busy_us};
    MPI_Bcast(tv, 2, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    MPI_Bcast(nops, 2, MPI_INT, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank == 1) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += base[i];
        ok = fabs(s - (double)(nops[0] + nops[1]) * (double)n) < 0.5;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 1, MPI_COMM_WORLD);
    if (!ok)
        die("overlap: wrong window sum");
    if (rank == 0) {
        printf("# overlap: %s (%s), %ld B lock/acc/unlock for %.0f ms; the target computes "
               "%.0f ms without MPI\n",
               mpi, var, o->bytes, o->work_ms / 2, o->work_ms);
        printf("origin, target idle: %d ops, median %.2f us, p90 %.2f us, max %.2f us\n", nops[0],
               med[0], p90[0], mx[0]);
        printf("origin, target busy: %d ops, median %.2f us, p90 %.2f us, max %.2f us\n", nops[1],
               med[1], p90[1], mx[1]);
        printf("target compute: alone %.1f ms, with accumulates arriving %.1f ms, lost %.1f ms "
               "(%.1f%%)\n",
               tv[0] / 1000, tv[1] / 1000, (tv[1] - tv[0]) / 1000, 100.0 * (tv[1] - tv[0]) / tv[0]);
        printf("csv,overlap,%s,%s,%ld,%.0f,%d,%.3f,%.3f,%.3f,%d,%.3f,%.3f,%.3f,%.3f,%.3f\n", mpi,
               var, o->bytes, o->work_ms, nops[0], med[0], p90[0], mx[0], nops[1], med[1], p90[1],
               mx[1], tv[0] / 1000, tv[1] / 1000);
    }
    MPI_Win_free(&win);
    free(src);
    free(base);
    free(lat);
}

#ifdef XTQ_BENCH_CUDA
/* What a program without GPU-aware one-sided MPI does to accumulate into
 * GPU memory: send the operand, the target copies its GPU data to the
 * host, adds, copies it back and answers. Rank 0 times the round trip. */
static void staged(const struct opts *o)
{
    size_t maxn = (size_t)o->max / sizeof(double);
    double *src = malloc(maxn * sizeof(double)), *in = malloc(maxn * sizeof(double));
    double *tmp = malloc(maxn * sizeof(double)), *dev = NULL;
    double *t = malloc(sizeof(double) * (size_t)o->iters);
    char ack = 0;

    for (size_t i = 0; i < maxn; i++)
        src[i] = 1.0;
    if (rank == 1) {
        if (cudaMalloc((void **)&dev, maxn * sizeof(double)) != cudaSuccess)
            die("cudaMalloc failed");
        cudaMemset(dev, 0, maxn * sizeof(double));
        cudaStreamSynchronize(0);
    }
    if (rank == 0)
        printf("# acc_latency: %s, host-staged accumulate into GPU memory (send, D2H, add, "
               "H2D, ack)\n%-6s %10s %8s %12s %12s %12s\n",
               mpi_name(), "mode", "bytes", "iters", "median_us", "p10_us", "p90_us");
    for (size_t bytes = 8; bytes <= (size_t)o->max; bytes *= 2) {
        int n = (int)(bytes / sizeof(double)), iters = o->iters, warm = 10;
        if (bytes >= (1 << 20))
            iters = iters / 10 > 20 ? iters / 10 : 20;
        else if (bytes >= (64 << 10))
            iters = iters / 4 > 50 ? iters / 4 : 50;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int it = -warm; it < iters; it++) {
            double t0 = now_us();
            if (rank == 0) {
                MPI_Send(src, n, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(&ack, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (it >= 0)
                    t[it] = now_us() - t0;
            } else {
                MPI_Recv(in, n, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                cudaMemcpy(tmp, dev, bytes, cudaMemcpyDeviceToHost);
                for (int i = 0; i < n; i++)
                    tmp[i] += in[i];
                cudaMemcpy(dev, tmp, bytes, cudaMemcpyHostToDevice);
                MPI_Send(&ack, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            double med = pct(t, iters, 0.5), p10 = pct(t, iters, 0.1), p90 = pct(t, iters, 0.9);
            printf("%-6s %10zu %8d %12.2f %12.2f %12.2f\n", "staged", bytes, iters, med, p10, p90);
            printf("csv,latency,%s,device,lock,staged,%zu,%d,%.3f,%.3f,%.3f\n", mpi_name(), bytes,
                   iters, med, p10, p90);
            fflush(stdout);
        }
    }
    if (dev)
        cudaFree(dev);
    free(src);
    free(in);
    free(tmp);
    free(t);
}
#endif

/* Where the last reductions went: "xtq" if the layer routed them. */
static const char *coll_variant(uint64_t *last)
{
    typedef int (*fn)(uint64_t *, uint64_t *, uint64_t *);
    fn f = (fn)(uintptr_t)dlsym(RTLD_DEFAULT, "MPIX_Xtq_coll_counts");
    uint64_t routed = 0;
    if (!f)
        return "mpi";
    f(&routed, NULL, NULL);
    bool more = routed > *last;
    *last = routed;
    return more ? "xtq" : "mpi";
}

static void allreduce(const struct opts *o)
{
    const char *mpi = mpi_name();
    uint64_t last = 0;

    coll_variant(&last);
    if (rank == 0)
        printf("%-10s %-8s %12s %12s %12s %6s\n", "bytes", "path", "median_us", "p10_us", "p90_us",
               "iters");
    for (long bytes = 8; bytes <= o->max; bytes *= 2) {
        size_t n = (size_t)bytes / sizeof(double);
        double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
        /* Fewer repetitions for large vectors: about the same time per row. */
        int iters = bytes <= 65536 ? o->iters : (int)fmax(10.0, o->iters * 65536.0 / bytes);
        double *t = malloc((size_t)iters * sizeof(double));
        double *all = malloc((size_t)nranks * sizeof(double));
        if (!in || !out || !t || !all)
            die("out of memory");
        for (size_t i = 0; i < n; i++)
            in[i] = (double)(rank + 1) * (double)(i % 1000);
        for (int w = 0; w < 3; w++) /* warm-up (makes the layer's team) */
            MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int it = 0; it < iters; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now_us();
            MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            double dt = now_us() - t0;
            /* The slowest rank's time, by a call the layer never routes. */
            MPI_Allgather(&dt, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
            t[it] = all[0];
            for (int r = 1; r < nranks; r++)
                t[it] = fmax(t[it], all[r]);
        }
        double want = (double)nranks * (nranks + 1) / 2;
        for (size_t i = 0; i < n; i++)
            if (out[i] != want * (double)(i % 1000))
                die("wrong allreduce result");
        const char *var = coll_variant(&last);
        qsort(t, (size_t)iters, sizeof(double), cmp_double);
        if (rank == 0) {
            printf("%-10ld %-8s %12.2f %12.2f %12.2f %6d\n", bytes, var, pct(t, iters, 0.5),
                   pct(t, iters, 0.1), pct(t, iters, 0.9), iters);
            printf("csv,allreduce,%s,%s,%ld,%d,%.3f,%.3f,%.3f\n", mpi, var, bytes, iters,
                   pct(t, iters, 0.5), pct(t, iters, 0.1), pct(t, iters, 0.9));
        }
        free(in);
        free(out);
        free(t);
        free(all);
    }
}

int main(int argc, char **argv)
{
    struct opts o = {"create", 4 << 20, 200, "lock,fence,flush", 8, 500};
    int provided;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 2)
        die("usage: acc_latency latency|overlap [options]");
    if (nranks != 2 && !(nranks > 2 && !strcmp(argv[1], "allreduce")))
        die("run with 2 ranks (allreduce: 2 or more)");
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--window"))
            o.window = argv[i + 1];
        else if (!strcmp(argv[i], "--max"))
            o.max = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            o.iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--modes"))
            o.modes = argv[i + 1];
        else if (!strcmp(argv[i], "--bytes"))
            o.bytes = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--work-ms"))
            o.work_ms = atof(argv[i + 1]);
        else
            die("unknown option");
    }
    if (!strcmp(argv[1], "latency"))
        latency(&o);
    else if (!strcmp(argv[1], "overlap"))
        overlap(&o);
    else if (!strcmp(argv[1], "allreduce"))
        allreduce(&o);
#ifdef XTQ_BENCH_CUDA
    else if (!strcmp(argv[1], "staged"))
        staged(&o);
#endif
    else
        die("usage: acc_latency latency|overlap [options]");
    MPI_Finalize();
    return 0;
}
