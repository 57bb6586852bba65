/*
 * The CPU reduction kernel on its own: xtq_reduce_local(SUM) against
 * memcpy of the same bytes, in the same process, alternating, per type
 * and size. A reduction reads two buffers and writes one, a copy reads
 * one and writes one: vectorised loops take 1 to 1.5 times a copy's time;
 * loops left scalar took 3.3-4 times in cache (the -O2 build of
 * xtq/reduce.c before session 8). The collective engine, mpi-ext and the
 * training shim reduce through this function. Public API only.
 *
 *   xtq_bench_reduce [--sizes 64K,1M,16M] [--iters N] [--modes float,...]
 *                    [--csv PATH] [--commit C]
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xtq/xtq.h>

#include "bench_harness.h"

enum { M_INT32, M_INT64, M_FLOAT, M_DOUBLE, M_COUNT };
static const char *const mode_names[M_COUNT] = {"int32", "int64", "float", "double"};
static const enum xtq_datatype mode_type[M_COUNT] = {XTQ_DT_INT32, XTQ_DT_INT64, XTQ_DT_FLOAT,
                                                     XTQ_DT_DOUBLE};

static const char *commit = "unknown";

static int extra(const char *opt, const char *value, void *arg)
{
    (void)arg;
    if (!strcmp(opt, "--commit") && value) {
        commit = value;
        return 2;
    }
    return -1;
}

/* Bytes per second of `bytes`-long operations repeated `reps` times. */
static double rate(uint64_t ns, size_t bytes, unsigned reps)
{
    return ns ? (double)bytes * reps / ((double)ns * 1e-9) : 0.0;
}

int main(int argc, char **argv)
{
    bh_opts_t o = {.sizes = {64 << 10, 1 << 20, 16 << 20}, .nsizes = 3, .iters = 5,
                   .warmup = 1, .modes = (1u << M_COUNT) - 1};
    if (bh_parse_args(argc, argv, &o, mode_names, M_COUNT, extra, NULL,
                      "  --commit C     recorded in the output\n"))
        return 2;
    size_t max = 0;
    for (unsigned s = 0; s < o.nsizes; s++)
        max = o.sizes[s] > max ? o.sizes[s] : max;
    uint8_t *a = aligned_alloc(64, max + 64), *b = aligned_alloc(64, max + 64),
            *c = aligned_alloc(64, max + 64);
    if (!a || !b || !c) {
        fprintf(stderr, "xtq_bench_reduce: out of memory for %zu bytes\n", max);
        return 1;
    }
    memset(a, 0, max);
    memset(b, 1, max);
    memset(c, 0, max);

    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    printf("# xtq_bench_reduce: machine %s, %ld cpus, commit %s; command:", host,
           sysconf(_SC_NPROCESSORS_ONLN), commit);
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# each measurement: 512 MiB of operations (at least 3); the best of --iters "
           "rounds, reduce and copy alternating\n");

    static const char *const cols[] = {"type", "size", "reduce_GBps", "copy_GBps",
                                       "reduce/copy"};
    bh_table_t t;
    bh_table_init(&t, cols, 5);
    for (unsigned m = 0; m < M_COUNT; m++) {
        if (!(o.modes & (1u << m)))
            continue;
        size_t esz = xtq_datatype_size(mode_type[m]);
        for (unsigned s = 0; s < o.nsizes; s++) {
            size_t bytes = o.sizes[s] / esz * esz;
            if (!bytes)
                continue;
            unsigned reps = (unsigned)((512ull << 20) / bytes);
            reps = reps < 3 ? 3 : reps;
            uint64_t best_r = UINT64_MAX, best_c = UINT64_MAX;
            for (unsigned it = 0; it < o.warmup + o.iters; it++) {
                uint64_t t0 = bh_now_ns();
                for (unsigned r = 0; r < reps; r++)
                    if (xtq_reduce_local(XTQ_OP_SUM, mode_type[m], a, b, bytes / esz) != 0) {
                        fprintf(stderr, "xtq_bench_reduce: xtq_reduce_local failed\n");
                        return 1;
                    }
                uint64_t t1 = bh_now_ns();
                for (unsigned r = 0; r < reps; r++) {
                    memcpy(c, b, bytes);
                    __asm__ volatile("" : : "r"(c) : "memory"); /* every copy happens */
                }
                uint64_t t2 = bh_now_ns();
                if (it < o.warmup)
                    continue;
                best_r = t1 - t0 < best_r ? t1 - t0 : best_r;
                best_c = t2 - t1 < best_c ? t2 - t1 : best_c;
            }
            char sz[32];
            bh_table_add(&t, "%s|%s|%.2f|%.2f|%.2f", mode_names[m],
                         bh_size_str(bytes, sz, sizeof(sz)), rate(best_r, bytes, reps) / 1e9,
                         rate(best_c, bytes, reps) / 1e9, (double)best_r / (double)best_c);
        }
    }
    bh_table_print(&t, stdout);
    if (o.csv_path) {
        char comment[256];
        snprintf(comment, sizeof(comment), "# xtq_bench_reduce machine %s commit %s", host,
                 commit);
        bh_table_write_csv(&t, o.csv_path, comment);
    }
    bh_table_free(&t);
    free(a);
    free(b);
    free(c);
    return 0;
}
