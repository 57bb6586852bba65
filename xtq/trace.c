/* Stage tracing: per-thread rings of (stage, key, ns), written at exit. */
#include "internal.h"

#include "trace.h"

#include <time.h>
#include <unistd.h>

#define TRACE_RING_SIZE (1u << 16) /* records per thread; the newest are kept */

struct trace_rec {
    uint64_t ns;
    uint64_t key;
    uint32_t stage;
    uint32_t pad_;
};

struct trace_ring {
    struct trace_ring *next;
    uint32_t thread;        /* small index, for the output */
    _Atomic uint64_t count; /* records ever appended */
    struct trace_rec rec[TRACE_RING_SIZE];
};

enum trace_format { TRACE_CSV, TRACE_CHROME };

atomic_int xtq__trace_enabled;

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct trace_ring *trace_rings; /* every thread's ring, newest first */
static uint32_t trace_nthreads;
static enum trace_format trace_format;
static char trace_path[4096];
static int trace_rank = -1;
static __thread struct trace_ring *my_ring;

static const char *const stage_names[] = {
#define XTQ__TRACE_NAME_(id, name) name,
    XTQ__TRACE_STAGE_LIST(XTQ__TRACE_NAME_)
#undef XTQ__TRACE_NAME_
};

const char *xtq__trace_stage_name(enum xtq__trace_stage stage)
{
    return (unsigned)stage < XTQ_TRACE_STAGE_COUNT ? stage_names[stage] : "?";
}

static struct trace_ring *ring_new(void)
{
    struct trace_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    pthread_mutex_lock(&trace_lock);
    r->thread = trace_nthreads++;
    r->next = trace_rings;
    trace_rings = r;
    pthread_mutex_unlock(&trace_lock);
    return r;
}

void xtq__trace_record(enum xtq__trace_stage stage, uint64_t key)
{
    struct trace_ring *r = my_ring;
    if (unlikely(!r)) {
        r = my_ring = ring_new();
        if (!r)
            return; /* out of memory: lose the record, never the task */
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t n = atomic_load_explicit(&r->count, memory_order_relaxed);
    struct trace_rec *rec = &r->rec[n & (TRACE_RING_SIZE - 1)];
    rec->ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    rec->key = key;
    rec->stage = (uint32_t)stage;
    /* Release: the writer at exit sees complete records below count. */
    atomic_store_explicit(&r->count, n + 1, memory_order_release);
}

/* PATH with "%r" replaced by the rank; without "%r", ".RANK" is appended
 * when a launcher gave us a rank, so ranks never overwrite each other. */
static void output_path(char *out, size_t cap)
{
    const char *p = strstr(trace_path, "%r");
    if (p)
        snprintf(out, cap, "%.*s%d%s", (int)(p - trace_path), trace_path, trace_rank, p + 2);
    else if (trace_rank >= 0)
        snprintf(out, cap, "%s.%d", trace_path, trace_rank);
    else
        snprintf(out, cap, "%s", trace_path);
}

int xtq__trace_flush(void)
{
    char path[4200];
    int rc = 0;
    if (!trace_path[0])
        return 0;
    output_path(path, sizeof(path));
    FILE *f = fopen(path, "w");
    if (!f) {
        xtq_warn(CORE, "XTQ_TRACE: cannot write %s", path);
        rc = -XTQ_EIO;
        goto out;
    }
    int pid = trace_rank >= 0 ? trace_rank : (int)getpid();
    if (trace_format == TRACE_CSV)
        fprintf(f, "rank,thread,stage,key,ns\n");
    else
        fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    bool first = true;
    pthread_mutex_lock(&trace_lock);
    for (struct trace_ring *r = trace_rings; r; r = r->next) {
        uint64_t n = atomic_load_explicit(&r->count, memory_order_acquire);
        uint64_t start = n > TRACE_RING_SIZE ? n - TRACE_RING_SIZE : 0;
        for (uint64_t i = start; i < n; i++) {
            const struct trace_rec *rec = &r->rec[i & (TRACE_RING_SIZE - 1)];
            const char *name = xtq__trace_stage_name((enum xtq__trace_stage)rec->stage);
            if (trace_format == TRACE_CSV) {
                fprintf(f, "%d,%u,%s,0x%llx,%llu\n", pid, r->thread, name,
                        (unsigned long long)rec->key, (unsigned long long)rec->ns);
            } else {
                /* Instant events; Perfetto groups them by process (rank) and thread. */
                fprintf(f,
                        "%s{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%u,"
                        "\"ts\":%llu.%03llu,\"args\":{\"key\":\"0x%llx\"}}",
                        first ? "" : ",\n", name, pid, r->thread,
                        (unsigned long long)(rec->ns / 1000), (unsigned long long)(rec->ns % 1000),
                        (unsigned long long)rec->key);
            }
            first = false;
        }
    }
    pthread_mutex_unlock(&trace_lock);
    if (trace_format == TRACE_CHROME)
        fprintf(f, "\n]}\n");
    if (fclose(f) != 0)
        rc = -XTQ_EIO;
out:
    return rc;
}

static void trace_at_exit(void)
{
    atomic_store_explicit(&xtq__trace_enabled, 0, memory_order_relaxed);
    xtq__trace_flush();
}

static int launcher_rank(void)
{
    static const char *const vars[] = {"PMIX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return -1;
}

/* Read XTQ_TRACE before any trace point can run (the flag is then fixed). */
__attribute__((constructor)) static void trace_init(void)
{
    const char *v = xtq__param_string(XTQ__PARAM_XTQ_TRACE);
    const char *path;
    if (!v || !*v || strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        return;
    if (strncmp(v, "csv:", 4) == 0) {
        trace_format = TRACE_CSV;
        path = v + 4;
    } else if (strncmp(v, "chrome:", 7) == 0) {
        trace_format = TRACE_CHROME;
        path = v + 7;
    } else {
        xtq_warn(CORE, "XTQ_TRACE=%s: expected off, csv:PATH or chrome:PATH; tracing stays off", v);
        return;
    }
    if (!*path || strlen(path) >= sizeof(trace_path)) {
        xtq_warn(CORE, "XTQ_TRACE=%s: bad path; tracing stays off", v);
        return;
    }
    snprintf(trace_path, sizeof(trace_path), "%s", path);
    trace_rank = launcher_rank();
    atexit(trace_at_exit);
    atomic_store_explicit(&xtq__trace_enabled, 1, memory_order_relaxed);
}
