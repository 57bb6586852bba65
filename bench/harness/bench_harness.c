/* The shared benchmark harness: see bench_harness.h. */
#include "bench_harness.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long long bh_parse_size(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s || v < 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    return *end ? -1 : v;
}

const char *bh_size_str(size_t size, char *buf, size_t cap)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, cap, "%zuMiB", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, cap, "%zuKiB", size >> 10);
    else
        snprintf(buf, cap, "%zuB", size);
    return buf;
}

static int parse_sizes(const char *list, bh_opts_t *o)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", list);
    o->nsizes = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok, '-');
        long long lo, hi;
        if (dash) {
            *dash = '\0';
            lo = bh_parse_size(tok);
            hi = bh_parse_size(dash + 1);
        } else {
            lo = hi = bh_parse_size(tok);
        }
        if (lo < 0 || hi < lo)
            return -1;
        /* A range walks powers of two: 0, 1, 2, 4, ... */
        for (long long s = lo; s <= hi; s = s ? s * 2 : 1) {
            if (o->nsizes == BH_MAX_SIZES)
                return -1;
            o->sizes[o->nsizes++] = (size_t)s;
            if (!dash)
                break;
        }
    }
    return o->nsizes ? 0 : -1;
}

static int parse_modes(const char *list, bh_opts_t *o, const char *const *names, unsigned n)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    o->modes = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "all") == 0) {
            o->modes = (1u << n) - 1;
            continue;
        }
        unsigned i;
        for (i = 0; i < n && strcmp(tok, names[i]) != 0; i++)
            ;
        if (i == n) {
            fprintf(stderr, "unknown mode '%s'\n", tok);
            return -1;
        }
        o->modes |= 1u << i;
    }
    return o->modes ? 0 : -1;
}

static void usage(const char *prog, const char *const *names, unsigned n, const char *extra)
{
    printf("usage: %s [--sizes LIST] [--iters N] [--warmup N] [--modes LIST] [--csv PATH]%s\n"
           "  --sizes  comma list with K/M suffixes, or A-B (powers of two), e.g. 0-1M or 64,4K\n"
           "  --modes  comma list of:",
           prog, extra ? " [options]" : "");
    for (unsigned i = 0; i < n; i++)
        printf(" %s", names[i]);
    printf(" (or all)\n");
    if (extra)
        printf("%s", extra);
}

int bh_parse_args(int argc, char **argv, bh_opts_t *o, const char *const *names, unsigned nmodes,
                  bh_extra_fn extra, void *extra_arg, const char *usage_extra)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(argv[0], names, nmodes, usage_extra);
            exit(0);
        } else if (strcmp(a, "--sizes") == 0 && v) {
            bad = parse_sizes(v, o);
            i++;
        } else if (strcmp(a, "--iters") == 0 && v) {
            o->iters = (unsigned)strtoul(v, NULL, 0);
            bad = o->iters == 0;
            i++;
        } else if (strcmp(a, "--warmup") == 0 && v) {
            o->warmup = (unsigned)strtoul(v, NULL, 0);
            i++;
        } else if (strcmp(a, "--modes") == 0 && v) {
            bad = parse_modes(v, o, names, nmodes);
            i++;
        } else if (strcmp(a, "--csv") == 0 && v) {
            o->csv_path = v;
            i++;
        } else {
            int used = extra ? extra(a, v, extra_arg) : -1;
            if (used < 1) {
                fprintf(stderr, "%s: unknown or incomplete option '%s' (--help)\n", argv[0], a);
                return -1;
            }
            i += used - 1;
            continue;
        }
        if (bad) {
            fprintf(stderr, "%s: bad value for %s: '%s'\n", argv[0], a, v);
            return -1;
        }
    }
    return 0;
}

uint64_t bh_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bh_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bh_process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Threads by name: /proc/self/task/TID/comm, and the first field of
 * /proc/self/task/TID/schedstat (time on a CPU, ns: finer than the clock
 * ticks of /proc/.../stat). */
uint64_t bh_threads_cpu_ns(const char *prefix)
{
    uint64_t sum = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *ent;
    if (!d)
        return 0;
    while ((ent = readdir(d)) != NULL) {
        char path[300], comm[32] = "";
        unsigned long long run = 0;
        FILE *f;
        if (ent->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", ent->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = '\0';
        fclose(f);
        if (strncmp(comm, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", ent->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        if (fscanf(f, "%llu", &run) == 1)
            sum += run;
        fclose(f);
    }
    closedir(d);
    return sum;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples. */
static double percentile(const uint64_t *s, unsigned n, double p)
{
    unsigned idx = (unsigned)(p * (double)n + 0.999999);
    if (idx > 0)
        idx--;
    if (idx >= n)
        idx = n - 1;
    return (double)s[idx];
}

bh_stats_t bh_summarize(uint64_t *samples, unsigned n)
{
    bh_stats_t st = {0};
    if (!n)
        return st;
    qsort(samples, n, sizeof(*samples), cmp_u64);
    double sum = 0;
    for (unsigned i = 0; i < n; i++)
        sum += (double)samples[i];
    st.count = n;
    st.min_ns = (double)samples[0];
    st.mean_ns = sum / n;
    st.median_ns = n % 2 ? (double)samples[n / 2]
                         : ((double)samples[n / 2 - 1] + (double)samples[n / 2]) / 2;
    st.p99_ns = percentile(samples, n, 0.99);
    return st;
}

void bh_table_init(bh_table_t *t, const char *const *cols, unsigned ncols)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols < BH_MAX_COLS ? ncols : BH_MAX_COLS;
    for (unsigned i = 0; i < t->ncols; i++)
        t->cols[i] = cols[i];
}

int bh_table_add(bh_table_t *t, const char *fmt, ...)
{
    char line[BH_MAX_COLS * 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (t->nrows == t->caprows) {
        unsigned cap = t->caprows ? t->caprows * 2 : 32;
        void *p = realloc(t->cells, cap * sizeof(*t->cells));
        if (!p)
            return -1;
        t->cells = p;
        t->caprows = cap;
    }
    char *save, *tok = strtok_r(line, "|", &save);
    for (unsigned c = 0; c < t->ncols; c++) {
        snprintf(t->cells[t->nrows][c], sizeof(t->cells[0][0]), "%s", tok ? tok : "");
        tok = tok ? strtok_r(NULL, "|", &save) : NULL;
    }
    t->nrows++;
    return 0;
}

void bh_table_print(const bh_table_t *t, FILE *out)
{
    size_t w[BH_MAX_COLS];
    for (unsigned c = 0; c < t->ncols; c++) {
        w[c] = strlen(t->cols[c]);
        for (unsigned r = 0; r < t->nrows; r++)
            if (strlen(t->cells[r][c]) > w[c])
                w[c] = strlen(t->cells[r][c]);
    }
    for (unsigned c = 0; c < t->ncols; c++)
        fprintf(out, "%*s%s", (int)w[c], t->cols[c], c + 1 < t->ncols ? "  " : "\n");
    for (unsigned r = 0; r < t->nrows; r++)
        for (unsigned c = 0; c < t->ncols; c++)
            fprintf(out, "%*s%s", (int)w[c], t->cells[r][c], c + 1 < t->ncols ? "  " : "\n");
}

int bh_table_write_csv(const bh_table_t *t, const char *path, const char *comment)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (comment)
        fprintf(f, "%s", comment);
    for (unsigned c = 0; c < t->ncols; c++)
        fprintf(f, "%s%s", t->cols[c], c + 1 < t->ncols ? "," : "\n");
    for (unsigned r = 0; r < t->nrows; r++)
        for (unsigned c = 0; c < t->ncols; c++)
            fprintf(f, "%s%s", t->cells[r][c], c + 1 < t->ncols ? "," : "\n");
    return fclose(f) ? -1 : 0;
}

void bh_table_free(bh_table_t *t)
{
    free(t->cells);
    memset(t, 0, sizeof(*t));
}
