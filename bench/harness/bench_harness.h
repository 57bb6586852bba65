/*
 * The one small harness shared by apps, benchmarks and integration tests
 * (STYLE.md item 11). It knows nothing of libxtq: argument parsing
 * (--sizes, --iters, --warmup, --modes, --csv), mode selection, monotonic and
 * thread-CPU timing, median / p99, a terminal table and CSV output.
 * Prefix: bh_.
 */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BH_MAX_SIZES 64
#define BH_MAX_MODES 16

typedef struct bh_opts {
    size_t sizes[BH_MAX_SIZES]; /* payload sizes, bytes */
    unsigned nsizes;
    unsigned iters;             /* measured iterations per (mode, size) */
    unsigned warmup;            /* iterations before measuring */
    unsigned modes;             /* bit i: mode_names[i] selected */
    const char *csv_path;       /* NULL: no CSV */
} bh_opts_t;

/*
 * Extra option handler: called for an option the harness does not know,
 * with its value (the next argument, or NULL when there is none). Returns
 * the number of arguments consumed (1 for a flag, 2 with the value), or -1
 * when the option is unknown.
 */
typedef int (*bh_extra_fn)(const char *opt, const char *value, void *arg);

/*
 * Parse the command line. `opts` must hold the defaults on entry.
 * --sizes LIST   comma list of sizes with K/M suffixes, or A-B for powers of
 *                two from A to B ("0,64,4K" or "0-1M": 0 then 1,2,4..1M)
 * --iters N  --warmup N
 * --modes LIST   comma list of names from mode_names[], or "all"
 * --csv PATH
 * --help prints usage (with `usage_extra`) and exits 0.
 * @return 0, or -1 after printing what was wrong.
 */
int bh_parse_args(int argc, char **argv, bh_opts_t *opts, const char *const *mode_names,
                  unsigned nmodes, bh_extra_fn extra, void *extra_arg, const char *usage_extra);

/* Parse "4K", "1M", "64" into bytes; -1 on error. */
long long bh_parse_size(const char *s);
/* Format a size as "64B", "4KiB", "1MiB". */
const char *bh_size_str(size_t size, char *buf, size_t cap);

/* CLOCK_MONOTONIC in ns. */
uint64_t bh_now_ns(void);
/* CLOCK_THREAD_CPUTIME_ID of the calling thread, in ns. */
uint64_t bh_thread_cpu_ns(void);
/* CLOCK_PROCESS_CPUTIME_ID: every thread of this process, in ns. */
uint64_t bh_process_cpu_ns(void);
/* CPU time (ns) so far of this process's threads whose name starts with
 * `prefix` ("xtq-progress": the engine's progress thread, the emulated
 * NIC; "xtq-cpu": CPU-agent workers). 0 when there are none. */
uint64_t bh_threads_cpu_ns(const char *prefix);

typedef struct bh_stats {
    double median_ns;
    double p99_ns;
    double min_ns;
    double mean_ns;
    unsigned count;
} bh_stats_t;

/* Sort `samples` in place and summarise them. */
bh_stats_t bh_summarize(uint64_t *samples, unsigned n);

/*
 * Result rows: a fixed set of named columns (the first is usually the mode,
 * the second the size), printed as an aligned table and as CSV.
 */
#define BH_MAX_COLS 16
typedef struct bh_table {
    const char *cols[BH_MAX_COLS];
    unsigned ncols;
    char (*cells)[BH_MAX_COLS][32];
    unsigned nrows, caprows;
} bh_table_t;

void bh_table_init(bh_table_t *t, const char *const *cols, unsigned ncols);
/* Append a row; `fmt` holds one conversion per column separated by '|',
 * e.g. "%s|%zu|%.2f". */
int bh_table_add(bh_table_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bh_table_print(const bh_table_t *t, FILE *out);
/* Write the table as CSV (header line first); comment lines starting with
 * '#' go before it when `comment` is not NULL. Returns 0 or -1. */
int bh_table_write_csv(const bh_table_t *t, const char *path, const char *comment);
void bh_table_free(bh_table_t *t);

#endif /* BENCH_HARNESS_H */
