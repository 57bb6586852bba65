/*
 * Fig. 7 reducer: turns per-iteration stage timestamps into the median time
 * spent in each stage of a remote task, per (mode, size).
 *
 *   xtq_bench_breakdown BENCH.csv OUT.dat [TRACE.csv ...]
 *
 * BENCH.csv is what `xtq_bench_rtt --breakdown` writes (mode,size,iter,
 * stage,ns): the stages the benchmark sees itself. TRACE.csv files are
 * libxtq's own (XTQ_TRACE=csv:PATH, one per rank: rank,thread,stage,key,ns)
 * and fill in the stages inside the library (message sent, received by the
 * engine, rewritten and enqueued, doorbell). One task is in flight at a time,
 * so a library record belongs to the iteration whose [put_issued,
 * completion] window contains it; all ranks share CLOCK_MONOTONIC (one host).
 * OUT.dat has one row per (mode, size): the label, then each stage's median
 * in microseconds (a stage's time runs from the previous stage to it), then
 * the median total: the input of plot_breakdown.gp. A stage seen in fewer
 * than half the iterations (a mode that has no such stage, or a trace not
 * given) has no figure: "-" in both outputs, never 0; its time is counted
 * in the next stage that was seen.
 *
 * With BD_SAMPLES=PATH in the environment it also writes every iteration's
 * stages there (mode,size,iter, then each stage's ns from put_issued, 0
 * where not seen): the distributions behind the medians.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_harness.h"

static const char *const stages[] = {"put_issued", "msg_sent",   "engine_recv", "enqueued",
                                     "doorbell",   "task_start", "task_end",    "completion"};
#define NSTAGES 8
#define MAX_GROUPS 16
#define MAX_ITERS 200000

struct lib_rec {
    uint64_t ns;
    int stage;
};

struct group {
    char mode[16];
    size_t size;
    unsigned niters;
    uint64_t (*t)[NSTAGES]; /* [iter][stage], 0 = not seen */
};

static struct group groups[MAX_GROUPS];
static unsigned ngroups;
static struct lib_rec *lib;
static size_t nlib, caplib;

static int stage_index(const char *name)
{
    for (int i = 0; i < NSTAGES; i++)
        if (strcmp(name, stages[i]) == 0)
            return i;
    return -1;
}

static struct group *group_get(const char *mode, size_t size)
{
    for (unsigned i = 0; i < ngroups; i++)
        if (groups[i].size == size && strcmp(groups[i].mode, mode) == 0)
            return &groups[i];
    if (ngroups == MAX_GROUPS)
        return NULL;
    struct group *g = &groups[ngroups++];
    snprintf(g->mode, sizeof(g->mode), "%s", mode);
    g->size = size;
    g->t = calloc(MAX_ITERS, sizeof(*g->t));
    return g->t ? g : NULL;
}

static int load_bench(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    char line[256], mode[16], stage[32];
    size_t size;
    unsigned iter;
    unsigned long long ns;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%15[^,],%zu,%u,%31[^,],%llu", mode, &size, &iter, stage, &ns) != 5)
            continue; /* header */
        int s = stage_index(stage);
        struct group *g = group_get(mode, size);
        if (s < 0 || !g || iter >= MAX_ITERS)
            continue;
        g->t[iter][s] = ns;
        if (iter + 1 > g->niters)
            g->niters = iter + 1;
    }
    fclose(f);
    return 0;
}

static int load_trace(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    char line[256], stage[32];
    int rank;
    unsigned thread;
    unsigned long long key, ns;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%d,%u,%31[^,],%llx,%llu", &rank, &thread, stage, &key, &ns) != 5)
            continue;
        int s = stage_index(stage);
        if (s < 0)
            continue;
        if (nlib == caplib) {
            caplib = caplib ? caplib * 2 : 4096;
            lib = realloc(lib, caplib * sizeof(*lib));
            if (!lib)
                return -1;
        }
        lib[nlib++] = (struct lib_rec){ns, s};
    }
    fclose(f);
    return 0;
}

static int cmp_lib(const void *a, const void *b)
{
    const struct lib_rec *x = a, *y = b;
    return x->ns < y->ns ? -1 : x->ns > y->ns;
}

/* Fill stages the benchmark could not see from the library's records in
 * the iteration's window; the library's own timestamps win inside it. */
static void merge_library(struct group *g)
{
    for (unsigned i = 0; i < g->niters; i++) {
        uint64_t lo = g->t[i][0], hi = g->t[i][NSTAGES - 1];
        if (!lo || !hi || !nlib)
            continue;
        size_t a = 0, b = nlib;
        while (a < b) { /* first record at or after lo */
            size_t m = (a + b) / 2;
            if (lib[m].ns < lo)
                a = m + 1;
            else
                b = m;
        }
        bool seen[NSTAGES] = {false};
        for (size_t k = a; k < nlib && lib[k].ns <= hi; k++) {
            int s = lib[k].stage;
            if (s == 0 || s == NSTAGES - 1 || seen[s])
                continue; /* the window's ends stay the benchmark's */
            seen[s] = true;
            g->t[i][s] = lib[k].ns;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s BENCH.csv OUT.dat [TRACE.csv ...]\n", argv[0]);
        return 2;
    }
    if (load_bench(argv[1]) < 0)
        return 1;
    for (int i = 3; i < argc; i++)
        if (load_trace(argv[i]) < 0)
            return 1;
    qsort(lib, nlib, sizeof(*lib), cmp_lib);

    FILE *out = fopen(argv[2], "w");
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "# median microseconds per stage (from the previous stage to this one)\n");
    fprintf(out, "label");
    for (int s = 1; s < NSTAGES; s++)
        fprintf(out, " %s", stages[s]);
    fprintf(out, " total\n");
    printf("%-12s", "mode/size");
    for (int s = 1; s < NSTAGES; s++)
        printf(" %11s", stages[s]);
    printf(" %11s\n", "total");

    uint64_t *col = malloc(MAX_ITERS * sizeof(*col));
    const char *dump_path = getenv("BD_SAMPLES");
    FILE *dump = dump_path && *dump_path ? fopen(dump_path, "w") : NULL;
    if (dump) {
        fprintf(dump, "mode,size,iter");
        for (int s = 1; s < NSTAGES; s++)
            fprintf(dump, ",%s", stages[s]);
        fprintf(dump, "\n");
    }
    for (unsigned gi = 0; gi < ngroups; gi++) {
        struct group *g = &groups[gi];
        merge_library(g);
        for (unsigned i = 0; dump && i < g->niters; i++) {
            const uint64_t *t = g->t[i];
            if (!t[0])
                continue;
            fprintf(dump, "%s,%zu,%u", g->mode, g->size, i);
            for (int s = 1; s < NSTAGES; s++)
                fprintf(dump, ",%llu", t[s] ? (unsigned long long)(t[s] - t[0]) : 0ull);
            fprintf(dump, "\n");
        }
        char label[64], sz[32];
        int ln = 0;
        for (const char *c = g->mode; *c && ln < 16; c++) /* "xtq" -> "XTQ" */
            label[ln++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        snprintf(label + ln, sizeof(label) - (size_t)ln, "-%s",
                 bh_size_str(g->size, sz, sizeof(sz)));
        fprintf(out, "%s", label);
        printf("%-12s", label);
        for (int s = 1; s <= NSTAGES; s++) {
            unsigned n = 0, seen = 0;
            for (unsigned i = 0; i < g->niters; i++) {
                uint64_t *t = g->t[i];
                if (!t[0] || !t[NSTAGES - 1])
                    continue;
                if (s < NSTAGES && t[s])
                    seen++;
                if (s == NSTAGES) { /* total */
                    col[n++] = t[NSTAGES - 1] - t[0];
                    continue;
                }
                /* Cumulative, monotone: a missing stage takes no time, and
                 * its time falls into the next stage that was seen. */
                uint64_t prev = t[0], cur = t[0];
                for (int k = 1; k <= s; k++) {
                    prev = cur;
                    if (t[k] > cur)
                        cur = t[k];
                }
                col[n++] = cur - prev;
            }
            if (n == 0 || (s < NSTAGES && seen * 2 < n)) {
                fprintf(out, " -");
                printf(" %11s", "-");
                continue;
            }
            bh_stats_t st = bh_summarize(col, n);
            fprintf(out, " %.3f", st.median_ns / 1e3);
            printf(" %11.3f", st.median_ns / 1e3);
        }
        fprintf(out, "\n");
        printf("\n");
    }
    free(col);
    if (dump)
        fclose(dump);
    fclose(out);
    return 0;
}
