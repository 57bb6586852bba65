/*
 * GPU task round trip, in one process: a host thread plays the target's
 * engine and enqueues a kernel dispatch on the CUDA agent (XTQ), or starts
 * the same computation another way. Each round trip runs from before the
 * enqueue (or launch) until the host sees the completion; the task sums
 * the payload's 4-byte words into device memory, checked after every
 * round trip (the completion must order the sum before it).
 *
 *   xtq_gpu_rtt [-n iters] [-o results.csv] [-c commit] [-m mode,...] [-x] [-t seconds]
 *
 * -m picks modes (default: all but dgraph); -x runs without the agent's
 * processor (no queue: the GPU runs nothing else; xtq modes are left
 * out); -t ends the run after that many seconds with what it was doing
 * (a device graph's setup waits for the device to idle, which it never
 * does while a persistent processor runs).
 *
 * Modes (medians in microseconds):
 *   xtq        the engine's path: packet, arguments and a payload of up to
 *              XTQ_CUDA_INLINE_MAX bytes inline (one read), completion by
 *              st.release.sys; the host waits for the completion signal,
 *              which the agent's retire thread decrements
 *   xtq_word   the same, but the waiting thread reads the completion word
 *              itself: the retire thread's hand-off left out
 *   xtq_fence  xtq with the completion ordered by __threadfence_system()
 *   xtq_plain  a plain AQL packet (no inline copy, as xtq_queue_submit
 *              writes it): the processor reads the header, then the body,
 *              then the arguments, then the task reads the payload in place
 *              (never staged: nothing says how long it is)
 *   xtq_proc   xtq with every work-group in the processor's blocks
 *   xtq_grid   xtq with every multi-group dispatch on a launched grid
 *   cdp        no agent: a poller kernel answers a host doorbell and
 *              launches the sum grid (dynamic parallelism)
 *   dgraph     the same with a device graph launch
 *   hsa_flag   cudaLaunchKernel, wait for a mapped flag the kernel writes
 *   hsa_sync   cudaLaunchKernel + cudaStreamSynchronize
 * xtq_proc and xtq_grid run where a dispatch has more than one work-group.
 * Uses internal entry points (the agent without a context); the two-rank
 * A tool, not a benchmark of the public API: it drives the agent without a
 * context through internal entry points (the provider's open, the
 * processor's stage profile). The public-API round trip is
 * xtq_bench_rtt --agent cuda.
 */
#include "internal.h"

#include <getopt.h>
#include <signal.h>
#include <immintrin.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <xtq/cuda_abi.h>

#include "gpu_rtt.h"

enum {
    M_XTQ,
    M_XTQ_WORD,
    M_XTQ_FENCE,
    M_XTQ_PLAIN,
    M_XTQ_PROC,
    M_XTQ_GRID,
    M_CDP,
    M_DGRAPH,
    M_HSA_FLAG,
    M_HSA_SYNC,
    M_COUNT
};
static const char *mode_name[M_COUNT] = {"xtq",      "xtq_word", "xtq_fence", "xtq_plain",
                                         "xtq_proc", "xtq_grid", "cdp",       "dgraph",
                                         "hsa_flag", "hsa_sync"};

#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (cudaError_t)(call);                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#define XK(call)                                                                          \
    do {                                                                                  \
        int r_ = (call);                                                                  \
        if (r_ != 0) {                                                                    \
            fprintf(stderr, "%s: %s\n", #call, xtq_strerror(r_));                         \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

static uint64_t pct(const uint64_t *sorted, int n, double p)
{
    return sorted[(int)((n - 1) * p)];
}

/* Processor stages (cuda_abi.h prof[]): the time from each to the next,
 * and, last, the host's round trip minus the GPU's span (the GPU seeing
 * the packet after the host wrote it, and the host seeing the completion
 * after the GPU stored it). */
#define PROF_N 1000
#define PROF_STAGES 7
/* "publish" and "launch" are a dispatch of several work-groups' (its
 * description written for the other blocks, or the grid's launch and
 * prologue up to its first group); 0 for one work-group. Row 7: of
 * "launch", the part before the grid's first instruction. */
static const char *prof_name[PROF_STAGES] = {"unpack", "check+args", "publish", "launch",
                                             "task",   "complete",   "host+link"};
static uint64_t prof[PROF_STAGES + 1][PROF_N];

/* Launches from the GPU without the agent: a poller answers n bells. */
#define POLLER_BATCH 100
/* A round trip that takes this long is a failure, not a measurement. */
#define STALL_NS 5000000000ull

/* Spin until `cond` holds; false when it did not within STALL_NS. */
#define SPIN_UNTIL(cond)                                                                  \
    ({                                                                                    \
        uint64_t s0_ = xtq__now_ns();                                                     \
        bool ok_ = true;                                                                  \
        for (unsigned n_ = 0; !(cond); n_++) {                                            \
            xtq__cpu_relax();                                                             \
            if ((n_ & 4095) == 0 && xtq__now_ns() - s0_ > STALL_NS) {                     \
                ok_ = false;                                                              \
                break;                                                                    \
            }                                                                             \
        }                                                                                 \
        ok_;                                                                              \
    })

struct bench {
    xtq_agent_t *agent;
    xtq_queue_t *q;
    xtq_kernel_t *k;
    xtq_signal_t *sig;
    struct rtt_args *ka; /* pinned host: the plain packets' arguments */
    uint32_t *payload;
    unsigned long long *dresult;
    unsigned *done;
    unsigned *bell;
    cudaStream_t stream, poll_stream;
    unsigned inline_max;
};

/* One XTQ round trip; returns when the host saw the completion (false:
 * it did not come). */
static bool xtq_once(struct bench *b, int m, size_t len, unsigned groups)
{
    xtq_aql_packet_t p;
    uint64_t i;
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.setup = 1;
    p.kernel.workgroup_size_x = RTT_WG;
    p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.grid_size_x = groups * RTT_WG;
    p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.kernel_object = b->k->object;
    p.kernel.kernarg_address = b->ka;
    p.kernel.completion_signal = xtq_signal_handle(b->sig);
    if (m == M_XTQ_PLAIN) {
        /* As xtq_queue_submit writes it: no inline copy, no lengths. */
        while (xtq_queue_reserve(b->q, 1, &i) != 0)
            xtq__cpu_relax();
        xtq_aql_packet_t *slot = xtq_queue_slot(b->q, i);
        memcpy(slot->bytes + 4, p.bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
        b->q->cookies[i & b->q->mask] = NULL;
        xtq_queue_publish(b->q, i, p.kernel.header, p.kernel.setup);
        xtq_queue_ring_doorbell(b->q, i);
    } else {
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = b->ka,
                                 .kernarg_len = sizeof(*b->ka),
                                 .payload = b->payload,
                                 .payload_len = len};
        while (xtq__cuda_enqueue(b->q, &d, &i) != 0)
            xtq__cpu_relax();
    }
    if (m == M_XTQ_WORD) {
        /* The retire thread still decrements the signal: main waits for
         * it outside the measured time. */
        const _Atomic uint64_t *w = xtq__cuda_done_word(b->q, i);
        return SPIN_UNTIL((uint32_t)atomic_load_explicit(w, memory_order_acquire) ==
                          (uint32_t)(i + 1));
    }
    return SPIN_UNTIL(atomic_load_explicit(&b->sig->value, memory_order_acquire) == 0);
}

/* Modes that failed here (cdp, dgraph: device launches refused). */
static bool failed[M_COUNT];
static bool wanted[M_COUNT];

/* -t: what the run was doing when the watchdog fired. */
static char doing[160] = "starting";

static void watchdog(int sig)
{
    char msg[256];
    int n = snprintf(msg, sizeof(msg), "watchdog: no progress while %s\n", doing);
    if (n > 0)
        (void)!write(1, msg, (size_t)n);
    _exit(3);
}

static bool mode_runs(int m, unsigned groups)
{
    if (failed[m] || !wanted[m])
        return false;
    if (m == M_XTQ_PROC || m == M_XTQ_GRID)
        return groups > 1;
    return true;
}

/* How the host writes the echo's doorbell: one word, or six cache lines
 * of 8-byte words (lines 1-5, then line 0 with the counter in its first
 * word, as the CUDA agent's inline_fill writes a small task), plainly, after
 * prefetching them for writing, as 64-byte AVX-512 stores, or lines 1-5
 * non-temporal (then a fence) and line 0 plain. */
enum { ECHO_WORD, ECHO_LINES, ECHO_PREFETCHW, ECHO_AVX512, ECHO_STREAM };

__attribute__((target("avx512f"))) static void echo_lines_avx512(uint64_t *l, unsigned k)
{
    for (int line = 1; line < 6; line++) {
        __m512i v = _mm512_set1_epi64((long long)(((uint64_t)k << 32) | (unsigned)line));
        _mm512_store_si512((void *)(l + 8 * line), v);
    }
    __m512i v0 = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, (long long)k);
    _mm512_store_si512((void *)l, v0);
}

static void echo_ring(unsigned *bell, int how, unsigned k)
{
    uint64_t *l = (uint64_t *)bell;
    switch (how) {
    case ECHO_WORD:
        atomic_store_explicit((_Atomic unsigned *)bell, k, memory_order_release);
        return;
    case ECHO_AVX512:
        echo_lines_avx512(l, k);
        return;
    case ECHO_PREFETCHW:
        for (int line = 0; line < 6; line++)
            __builtin_prefetch(l + 8 * line, 1);
        break;
    default:
        break;
    }
    for (int line = 1; line < 6; line++)
        for (int w = 0; w < 8; w++) {
            const uint64_t v = ((uint64_t)k << 32) | (unsigned)(line * 8 + w);
            if (how == ECHO_STREAM)
                _mm_stream_si64((long long *)(l + 8 * line + w), (long long)v);
            else
                atomic_store_explicit((_Atomic uint64_t *)(l + 8 * line + w), v,
                                      memory_order_relaxed);
        }
    if (how == ECHO_STREAM)
        _mm_sfence();
    for (int w = 7; w >= 1; w--)
        atomic_store_explicit((_Atomic uint64_t *)(l + w), (uint64_t)w, memory_order_relaxed);
    atomic_store_explicit((_Atomic uint64_t *)l, k, memory_order_release);
}

/*
 * The floor (rtt_echo_start): a host store to a word the GPU polls, the
 * GPU's answer in host memory, as seen by this thread; a poll of 1 line
 * and of 32 (512 bytes, what the processor's poll reads for a small task),
 * answered with a plain or a release store; and, with the 32-line poll and
 * a plain answer, the host writing six lines as a small task's enqueue
 * does, in the ways of echo_ring. Run before the processor starts, on its
 * own; printed as "echo".
 */
static void echo_floor(int iters, cudaStream_t stream)
{
    static const struct {
        unsigned lines;
        int release, how;
        const char *name;
        unsigned stagger_ns, warps, copies;
    } cfg[] = {{1, 0, ECHO_WORD, "1 line", 0, 0, 0},
               {32, 0, ECHO_WORD, "32 lines", 0, 0, 0},
               {32, 1, ECHO_WORD, "32 lines, release", 0, 0, 0},
               {32, 0, ECHO_LINES, "host writes 6 lines", 0, 0, 0},
               {32, 0, ECHO_PREFETCHW, "6 lines prefetchw", 0, 0, 0},
               {32, 0, ECHO_AVX512, "6 lines avx512", 0, 0, 0},
               {32, 0, ECHO_STREAM, "6 lines, 5 streamed", 0, 0, 0},
               /* Two polls in flight, staggered (the processor polls one
                * at a time): does the second shorten the wait? */
               {32, 0, ECHO_WORD, "32 lines, 2 polls 300 ns apart", 300, 0, 0},
               {32, 0, ECHO_WORD, "32 lines, 2 polls 500 ns apart", 500, 0, 0},
               {32, 0, ECHO_WORD, "32 lines, 2 polls 700 ns apart", 700, 0, 0},
               /* Polls from several warps of the block (rtt_echo_warps_start):
                * of one copy of the doorbell, and each of its own. */
               {32, 0, ECHO_WORD, "1 warp", 0, 1, 1},
               {32, 0, ECHO_WORD, "2 warps 550 ns apart, 1 copy", 550, 2, 1},
               {32, 0, ECHO_WORD, "2 warps 550 ns apart, 2 copies", 550, 2, 2},
               {32, 0, ECHO_WORD, "4 warps 275 ns apart, 1 copy", 275, 4, 1},
               {32, 0, ECHO_WORD, "4 warps 275 ns apart, 4 copies", 275, 4, 4}};
    unsigned *bell, *ans;
    CK(cudaHostAlloc((void **)&bell, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&ans, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    const int warm = iters / 10 + 10;
    printf("echo (one block polling host memory and answering there; no processor) median us:");
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
        if (cfg[c].how == ECHO_AVX512 && !__builtin_cpu_supports("avx512f")) {
            printf(" %s: no AVX-512", cfg[c].name);
            continue;
        }
        memset(bell, 0, 4096);
        *(volatile unsigned *)ans = 0;
        if (cfg[c].warps)
            CK(rtt_echo_warps_start(bell, ans, (unsigned)(warm + iters), cfg[c].warps,
                                    cfg[c].copies, cfg[c].stagger_ns, stream));
        else
            CK(rtt_echo_start(bell, ans, (unsigned)(warm + iters), cfg[c].lines, cfg[c].release,
                              cfg[c].stagger_ns, stream));
        bool ok = true;
        for (int it = -warm; it < iters && ok; it++) {
            const unsigned k = (unsigned)(it + warm + 1);
            uint64_t t0 = xtq__now_ns();
            if (cfg[c].copies > 1)
                for (unsigned cp = 1; cp < cfg[c].copies; cp++)
                    atomic_store_explicit((_Atomic unsigned *)(bell + 128u * cp), k,
                                          memory_order_release);
            echo_ring(bell, cfg[c].how, k);
            ok = SPIN_UNTIL(*(volatile unsigned *)ans == k);
            if (it >= 0)
                t[it] = xtq__now_ns() - t0;
        }
        if (!ok) {
            printf(" %s: no answer in %llu s", cfg[c].name, STALL_NS / 1000000000ull);
            /* Let the kernel finish: ring it through. */
            for (unsigned cp = 0; cp < (cfg[c].copies ? cfg[c].copies : 1u); cp++)
                atomic_store_explicit((_Atomic unsigned *)(bell + 128u * cp),
                                      (unsigned)(warm + iters), memory_order_release);
        } else {
            printf(" %s %.2f", cfg[c].name, median(t, iters) / 1e3);
        }
        CK(cudaStreamSynchronize(stream));
    }
    printf("\n");
    free(t);
    CK(cudaFreeHost(bell));
    CK(cudaFreeHost(ans));
}

int main(int argc, char **argv)
{
    int iters = 2000, opt, limit_s = 0;
    bool no_processor = false;
    const char *csv = NULL, *commit = "unknown", *modes = NULL;
    while ((opt = getopt(argc, argv, "n:o:c:m:xt:")) != -1) {
        if (opt == 'n')
            iters = atoi(optarg);
        else if (opt == 'o')
            csv = optarg;
        else if (opt == 'c')
            commit = optarg;
        else if (opt == 'm')
            modes = optarg;
        else if (opt == 'x')
            no_processor = true;
        else if (opt == 't')
            limit_s = atoi(optarg);
    }
    for (int m = 0; m < M_COUNT; m++) {
        char list[256];
        snprintf(list, sizeof(list), ",%s,", modes ? modes : "");
        char key[32];
        snprintf(key, sizeof(key), ",%s,", mode_name[m]);
        wanted[m] = modes ? strstr(list, key) != NULL : m != M_DGRAPH;
        if (no_processor && m <= M_XTQ_GRID)
            wanted[m] = false;
    }
    if (limit_s > 0) {
        signal(SIGALRM, watchdog);
        alarm((unsigned)limit_s);
    }
    char reason[192];
    unsigned ndev = 0;
    if (xtq__cuda_agent_provider.probe(reason, sizeof(reason), &ndev) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    struct bench b;
    memset(&b, 0, sizeof(b));
    XK(xtq__cuda_agent_provider.open(NULL, 0, &b.agent));
    XK(rtt_attach(b.agent));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    b.inline_max = (unsigned)xtq__param_size(XTQ__PARAM_XTQ_CUDA_INLINE_MAX);
    const unsigned grid_min = (unsigned)xtq__param_int(XTQ__PARAM_XTQ_CUDA_GRID_MIN);

    const size_t max_len = 1 << 20;
    CK(cudaHostAlloc((void **)&b.payload, max_len, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&b.ka, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&b.done, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&b.bell, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaMalloc((void **)&b.dresult, 64));
    srand(1);
    for (size_t i = 0; i < max_len / 4; i++)
        b.payload[i] = (uint32_t)rand();
    CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b.poll_stream, cudaStreamNonBlocking));

    uint64_t fn = rtt_task_address();
    if (fn == 0) {
        fprintf(stderr, "task address lookup failed\n");
        return 1;
    }
    XK(xtq_kernel_create_cuda(b.agent, fn, sizeof(struct rtt_args), &b.k));
    echo_floor(iters, b.stream);
    /* The processor starts with the first queue. */
    if (!no_processor)
        XK(xtq_queue_create(b.agent, 64, &b.q));
    XK(xtq_cuda_signal_create(b.agent, 0, &b.sig));

    static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    uint64_t med[NS][M_COUNT];
    int bad = 0;
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out,
                "# device=%s commit=%s processor_blocks=%u iters=%d inline_max=%u grid_min=%u\n"
                "size_bytes,mode,median_us,p10_us,p90_us,p99_us\n",
                prop.name, commit, b.agent->info.workers, iters, b.inline_max, grid_min);

    for (int si = 0; si < NS; si++) {
        const size_t len = sizes[si];
        const uint32_t words = (uint32_t)(len / 4);
        const unsigned groups = (unsigned)((len + 4 * 4 * RTT_WG - 1) / (4 * 4 * RTT_WG));
        unsigned long long base_sum = 0;
        for (uint32_t i = 1; i < words; i++)
            base_sum += b.payload[i];
        for (int m = 0; m < M_COUNT; m++) {
            med[si][m] = 0;
            if (!mode_runs(m, groups))
                continue;
            const int n = len >= 262144 ? iters / 4 : iters;
            const int warm = n / 10 + 10;
            b.ka->result = b.dresult;
            b.ka->payload = b.payload;
            b.ka->words = words;
            snprintf(doing, sizeof(doing), "%s %zu B (%s)", mode_name[m], len,
                     no_processor ? "no processor" : "processor running");
            if (!no_processor) {
                XK(xtq__cuda_tune(b.agent, XTQ__CUDA_KNOB_COMPLETE,
                                  m == M_XTQ_FENCE ? XTQ__CUDA_COMPLETE_FENCE
                                                   : XTQ__CUDA_COMPLETE_RELEASE));
                XK(xtq__cuda_tune(b.agent, XTQ__CUDA_KNOB_GRID_MIN,
                                  m == M_XTQ_PROC ? 0 : m == M_XTQ_GRID ? 2 : grid_min));
            }
            CK(cudaMemsetAsync(b.dresult, 0, 64, b.stream));
            CK(cudaStreamSynchronize(b.stream));
            unsigned long long want = 0;
            unsigned launched = 0; /* device launches of the current poller */
            for (int it = -warm; it < n; it++) {
                /* A new first word every time: a stale copy gives a wrong sum. */
                b.payload[0] = (uint32_t)(it + warm) * 2654435761u;
                want += base_sum + (words ? b.payload[0] : 0);
                atomic_store_explicit(&b.sig->value, 1, memory_order_release);
                *(volatile unsigned *)b.done = 0;
                if ((m == M_CDP || m == M_DGRAPH) && launched % POLLER_BATCH == 0) {
                    if (launched)
                        CK(rtt_poller_wait(b.poll_stream));
                    *(volatile unsigned *)b.bell = 0;
                    snprintf(doing, sizeof(doing), "%s %zu B: setting up and starting the poller (%s)",
                             mode_name[m], len, no_processor ? "no processor" : "processor running");
                    int e = rtt_poller_start(m == M_CDP ? RTT_LAUNCH_CDP : RTT_LAUNCH_GRAPH, b.ka,
                                             groups, b.bell, b.done, POLLER_BATCH, b.poll_stream);
                    if (e) {
                        /* Not this machine's: the other modes still run. */
                        printf("%s %zu B: cannot start the poller: %s\n", mode_name[m], len,
                               cudaGetErrorString((cudaError_t)e));
                        failed[m] = true;
                        launched = POLLER_BATCH;
                        break;
                    }
                    launched = 0;
                    snprintf(doing, sizeof(doing), "%s %zu B (%s)", mode_name[m], len,
                             no_processor ? "no processor" : "processor running");
                }
                bool ok = true;
                uint64_t t0 = xtq__now_ns();
                if (m <= M_XTQ_GRID) {
                    ok = xtq_once(&b, m, len, groups);
                } else if (m == M_CDP || m == M_DGRAPH) {
                    launched++;
                    atomic_store_explicit((_Atomic unsigned *)b.bell, launched,
                                          memory_order_release);
                    ok = SPIN_UNTIL(*(volatile unsigned *)b.done == launched);
                } else {
                    CK(rtt_launch(b.ka, groups, m == M_HSA_FLAG ? b.done : NULL, b.stream));
                    if (m == M_HSA_FLAG) {
                        while (*(volatile unsigned *)b.done != groups)
                            xtq__cpu_relax();
                    } else {
                        CK(cudaStreamSynchronize(b.stream));
                    }
                }
                uint64_t t1 = xtq__now_ns();
                if (ok && m == M_XTQ_WORD) /* the signal, outside the measured time */
                    ok = SPIN_UNTIL(atomic_load_explicit(&b.sig->value, memory_order_acquire) == 0);
                if (!ok) {
                    printf("%s %zu B iteration %d: no completion in %llu s\n", mode_name[m], len,
                           it, STALL_NS / 1000000000ull);
                    fflush(stdout);
                    if (m <= M_XTQ_GRID)
                        exit(2); /* the agent is stuck: nothing after this is worth timing */
                    failed[m] = true;
                    break;
                }
                /* The completion came after the sum: it must be there. */
                unsigned long long got = 0;
                CK(cudaMemcpyAsync(&got, b.dresult, sizeof(got), cudaMemcpyDeviceToHost,
                                   b.stream));
                CK(cudaStreamSynchronize(b.stream));
                if (got != want) {
                    if (bad < 5)
                        fprintf(stderr, "%s %zu B iteration %d: sum %llu, expected %llu\n",
                                mode_name[m], len, it, got, want);
                    bad++;
                    want = got;
                }
                if (it >= 0)
                    t[it] = t1 - t0;
                /* Where the time goes: the processor's own stage clock. */
                if (m == M_XTQ && it >= 0 && it < PROF_N) {
                    uint64_t pr[8];
                    XK(xtq__cuda_profile(b.agent, pr));
                    /* seen, unpacked, args, (published), start, end, done */
                    prof[0][it] = pr[1] - pr[0];
                    prof[1][it] = pr[2] - pr[1];
                    /* A processor block may start group 0 before block 0
                     * stamps "published": then it is all "publish". */
                    uint64_t pub = pr[3] < pr[4] ? pr[3] : pr[4];
                    prof[2][it] = pub - pr[2];
                    prof[3][it] = pr[4] - pub;
                    /* A grid's first instruction: its launch, then its prologue. */
                    bool grid = pr[7] > pub && pr[7] <= pr[4];
                    prof[7][it] = grid ? pr[7] - pub : 0;
                    prof[4][it] = pr[5] - pr[4];
                    prof[5][it] = pr[6] - pr[5];
                    prof[6][it] = (t1 - t0) - (pr[6] - pr[0]);
                }
            }
            if (m == M_HSA_FLAG)
                CK(cudaStreamSynchronize(b.stream));
            if (m == M_CDP || m == M_DGRAPH) {
                /* Let the poller finish its batch, then collect it. */
                while (launched < POLLER_BATCH) {
                    launched++;
                    atomic_store_explicit((_Atomic unsigned *)b.bell, launched,
                                          memory_order_release);
                    if (!failed[m])
                        (void)SPIN_UNTIL(*(volatile unsigned *)b.done == launched);
                }
                int e = rtt_poller_wait(b.poll_stream);
                if (e) {
                    printf("%s %zu B: poller: %s\n", mode_name[m], len,
                           cudaGetErrorString((cudaError_t)e));
                    failed[m] = true;
                }
            }
            if (failed[m])
                continue;
            if (m == M_XTQ) {
                int np = n < PROF_N ? n : PROF_N;
                printf("profile %zu B xtq (median us):", len);
                for (int st = 0; st < PROF_STAGES; st++)
                    printf(" %s %.2f", prof_name[st], median(prof[st], np) / 1e3);
                if (median(prof[7], np))
                    printf(" (launch to the grid's entry %.2f)", median(prof[7], np) / 1e3);
                printf("\n");
            }
            med[si][m] = median(t, n);
            printf("%8zu %-9s median %8.2f us  p99 %8.2f us\n", len, mode_name[m],
                   med[si][m] / 1e3, pct(t, n, 0.99) / 1e3);
            fflush(stdout);
            if (out)
                fprintf(out, "%zu,%s,%.2f,%.2f,%.2f,%.2f\n", len, mode_name[m], med[si][m] / 1e3,
                        pct(t, n, 0.10) / 1e3, pct(t, n, 0.90) / 1e3, pct(t, n, 0.99) / 1e3);
        }
    }
    uint64_t gs[2] = {0, 0};
    XK(xtq__cuda_grid_stats(b.agent, gs));
    alarm(0);
    printf("device: %s (%d SMs); processor blocks: %u; commit %s; iters %d; inline_max %u; "
           "grid_min %u; grid launches %llu (refused %llu)\n",
           prop.name, prop.multiProcessorCount, b.agent->info.workers, commit, iters,
           b.inline_max, grid_min, (unsigned long long)gs[0], (unsigned long long)gs[1]);
    printf("%8s", "bytes");
    for (int m = 0; m < M_COUNT; m++)
        printf(" %9s", mode_name[m]);
    printf("   (median us; p99 in csv; - not run)\n");
    for (int si = 0; si < NS; si++) {
        printf("%8zu", sizes[si]);
        for (int m = 0; m < M_COUNT; m++)
            if (med[si][m])
                printf(" %9.2f", med[si][m] / 1e3);
            else
                printf(" %9s", "-");
        printf("\n");
    }
    printf("wrong results: %d\n", bad);
    printf("ratios 64B: xtq/hsa_sync=%.3f (xtq %.2f us, hsa_sync %.2f us), xtq/hsa_flag=%.3f, "
           "xtq_plain/xtq=%.2f, xtq_fence/xtq=%.3f, xtq/xtq_word=%.3f\n",
           (double)med[0][M_XTQ] / med[0][M_HSA_SYNC], med[0][M_XTQ] / 1e3,
           med[0][M_HSA_SYNC] / 1e3, (double)med[0][M_XTQ] / med[0][M_HSA_FLAG],
           (double)med[0][M_XTQ_PLAIN] / med[0][M_XTQ], (double)med[0][M_XTQ_FENCE] / med[0][M_XTQ],
           (double)med[0][M_XTQ] / med[0][M_XTQ_WORD]);
    printf("ratios 1MiB: xtq/hsa_sync=%.3f, xtq_grid/xtq_proc=%.3f, cdp/hsa_sync=%.3f, "
           "dgraph/hsa_sync=%.3f\n",
           (double)med[NS - 1][M_XTQ] / med[NS - 1][M_HSA_SYNC],
           (double)med[NS - 1][M_XTQ_GRID] / med[NS - 1][M_XTQ_PROC],
           (double)med[NS - 1][M_CDP] / med[NS - 1][M_HSA_SYNC],
           (double)med[NS - 1][M_DGRAPH] / med[NS - 1][M_HSA_SYNC]);
    if (out)
        fclose(out);
    xtq_kernel_destroy(b.k);
    if (b.q)
        xtq_queue_destroy(b.q);
    b.agent->ops->close(b.agent);
    return bad ? 1 : 0;
}
