/*
 * GPU task round trip, in one process: a host thread plays the target's
 * engine and writes a kernel-dispatch packet into the CUDA agent's queue
 * (XTQ), or launches the same kernel with the CUDA runtime (HSA mode).
 * Each round trip ends when the host sees the completion (XTQ: the
 * completion signal at 0; HSA: a mapped counter written by the kernel, or
 * cudaStreamSynchronize). The task reads the payload and writes a result.
 *
 *   xtq_gpu_rtt [-n iters] [-o results.csv] [-c commit]
 *
 * Modes (medians in microseconds):
 *   xtq       payload read in place from pinned host memory
 *   xtq_dev   payload already in device memory (placement lower bound)
 *   xtq_copy  host copies the payload to device memory, then enqueues
 *   hsa_flag  cudaLaunchKernel, wait for a mapped flag the kernel writes
 *   hsa_sync  cudaLaunchKernel + cudaStreamSynchronize
 * A tool, not a benchmark of the public API: it drives the agent without a
 * context through internal entry points (the provider's open, the
 * processor's stage profile), to find the floors of GPU task placement.
 * The public-API round trip is bench/rtt.c --agent cuda.
 */
#include "internal.h"

#include <getopt.h>

#include <cuda_runtime_api.h>

#include "gpu_rtt.h"

enum { M_XTQ, M_XTQ_DEV, M_XTQ_COPY, M_HSA_FLAG, M_HSA_SYNC, M_COUNT };
static const char *mode_name[M_COUNT] = {"xtq", "xtq_dev", "xtq_copy", "hsa_flag", "hsa_sync"};

#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
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
 * the doorbell, and the host seeing the completion). */
#define PROF_N 1000
#define PROF_STAGES 7
static const char *prof_name[PROF_STAGES] = {"body",  "args", "publish", "start",
                                             "task",  "fence", "host+link"};
static uint64_t prof[PROF_STAGES][PROF_N];

int main(int argc, char **argv)
{
    int iters = 2000, opt;
    const char *csv = NULL, *commit = "unknown";
    while ((opt = getopt(argc, argv, "n:o:c:")) != -1) {
        if (opt == 'n')
            iters = atoi(optarg);
        else if (opt == 'o')
            csv = optarg;
        else if (opt == 'c')
            commit = optarg;
    }
    char reason[192];
    unsigned ndev = 0;
    if (xtq__cuda_agent_provider.probe(reason, sizeof(reason), &ndev) != 0) {
        printf("SKIP: %s\n", reason);
        return 77;
    }
    xtq_agent_t *agent;
    XK(xtq__cuda_agent_provider.open(NULL, 0, &agent));
    XK(rtt_attach(agent));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    const size_t max_len = 1 << 20;
    uint32_t *payload, *dpayload;
    unsigned long long *result;
    struct rtt_args *ka;
    unsigned *done;
    CK(cudaHostAlloc((void **)&payload, max_len, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&result, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&ka, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&done, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaMalloc((void **)&dpayload, max_len));
    srand(1);
    for (size_t i = 0; i < max_len / 4; i++)
        payload[i] = (uint32_t)rand();
    CK(cudaMemcpy(dpayload, payload, max_len, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    xtq_kernel_t *k;
    uint64_t fn = rtt_task_address();
    if (fn == 0) {
        fprintf(stderr, "task address lookup failed\n");
        return 1;
    }
    XK(xtq_kernel_create_cuda(agent, fn, sizeof(struct rtt_args), &k));
    xtq_queue_t *q;
    XK(xtq_queue_create(agent, 64, &q));
    xtq_signal_t *sig;
    XK(xtq_cuda_signal_create(agent, 0, &sig));

    static const size_t sizes[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
    enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
    uint64_t med[NS][M_COUNT], p99[NS][M_COUNT];
    int bad = 0;
    uint64_t *t = calloc((size_t)iters, sizeof(*t));
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out)
        fprintf(out, "# device=%s commit=%s processor_blocks=%u iters=%d\n"
                     "size_bytes,mode,median_us,p10_us,p90_us,p99_us\n",
                prop.name, commit, agent->info.workers, iters);

    for (int si = 0; si < NS; si++) {
        size_t len = sizes[si];
        uint32_t words = (uint32_t)(len / 4);
        unsigned groups = (unsigned)((len + 4 * 4 * RTT_WG - 1) / (4 * 4 * RTT_WG));
        unsigned long long want = 0;
        for (uint32_t i = 0; i < words; i++)
            want += payload[i];
        for (int m = 0; m < M_COUNT; m++) {
            int n = m == M_XTQ_COPY || len >= 262144 ? iters / 4 : iters;
            int warm = n / 10 + 10;
            ka->result = result;
            ka->payload = m == M_XTQ_DEV || m == M_XTQ_COPY ? dpayload : payload;
            ka->words = words;
            for (int it = -warm; it < n; it++) {
                *(volatile unsigned long long *)result = 0;
                *(volatile unsigned *)done = 0;
                atomic_store_explicit(&sig->value, 1, memory_order_release);
                uint64_t t0 = xtq__now_ns();
                if (m <= M_XTQ_COPY) {
                    if (m == M_XTQ_COPY) {
                        CK(cudaMemcpyAsync(dpayload, payload, len, cudaMemcpyHostToDevice, stream));
                        CK(cudaStreamSynchronize(stream));
                    }
                    uint64_t i;
                    while (xtq_queue_reserve(q, 1, &i) != 0)
                        xtq__cpu_relax();
                    xtq_kernel_dispatch_packet_t *p = &xtq_queue_slot(q, i)->kernel;
                    p->workgroup_size_x = RTT_WG;
                    p->workgroup_size_y = p->workgroup_size_z = 1;
                    p->reserved0 = 0;
                    p->grid_size_x = groups * RTT_WG;
                    p->grid_size_y = p->grid_size_z = 1;
                    p->private_segment_size = p->group_segment_size = 0;
                    p->kernel_object = k->object;
                    p->kernarg_address = ka;
                    p->reserved2 = 0;
                    p->completion_signal = xtq_signal_handle(sig);
                    q->cookies[i & q->mask] = NULL;
                    xtq_queue_publish(q, i,
                                      xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0,
                                                     XTQ_FENCE_SCOPE_SYSTEM, XTQ_FENCE_SCOPE_SYSTEM),
                                      1);
                    xtq_queue_ring_doorbell(q, i);
                    while (atomic_load_explicit(&sig->value, memory_order_acquire) != 0)
                        xtq__cpu_relax();
                } else {
                    CK((cudaError_t)rtt_launch(ka, groups, m == M_HSA_FLAG ? done : NULL, stream));
                    if (m == M_HSA_FLAG) {
                        while (*(volatile unsigned *)done != groups)
                            xtq__cpu_relax();
                    } else {
                        CK(cudaStreamSynchronize(stream));
                    }
                }
                uint64_t t1 = xtq__now_ns();
                if (*(volatile unsigned long long *)result != want)
                    bad++;
                if (it >= 0)
                    t[it] = t1 - t0;
                /* Where the time goes: the processor's own stage clock. */
                if (m == M_XTQ && it >= 0 && it < PROF_N && len <= 4096) {
                    uint64_t pr[8];
                    XK(xtq__cuda_profile(agent, pr));
                    for (int st = 0; st < PROF_STAGES - 1; st++)
                        prof[st][it] = pr[st + 1] - pr[st];
                    prof[PROF_STAGES - 1][it] = (t1 - t0) - (pr[PROF_STAGES - 1] - pr[0]);
                }
            }
            if (m == M_HSA_FLAG)
                CK(cudaStreamSynchronize(stream));
            if (m == M_XTQ && len <= 4096) {
                int np = n < PROF_N ? n : PROF_N;
                printf("profile %zu B xtq (median us):", len);
                for (int st = 0; st < PROF_STAGES; st++)
                    printf(" %s %.2f", prof_name[st], median(prof[st], np) / 1e3);
                printf("\n");
            }
            med[si][m] = median(t, n);
            p99[si][m] = pct(t, n, 0.99);
            if (out)
                fprintf(out, "%zu,%s,%.2f,%.2f,%.2f,%.2f\n", len, mode_name[m], med[si][m] / 1e3,
                        pct(t, n, 0.10) / 1e3, pct(t, n, 0.90) / 1e3, p99[si][m] / 1e3);
        }
    }
    printf("device: %s (%d SMs); processor blocks: %u; commit %s; iters %d\n", prop.name,
           prop.multiProcessorCount, agent->info.workers, commit, iters);
    printf("%9s", "bytes");
    for (int m = 0; m < M_COUNT; m++)
        printf(" %10s", mode_name[m]);
    printf("   (median us; p99 in csv)\n");
    for (int si = 0; si < NS; si++) {
        printf("%9zu", sizes[si]);
        for (int m = 0; m < M_COUNT; m++)
            printf(" %10.2f", med[si][m] / 1e3);
        printf("\n");
    }
    printf("wrong results: %d\n", bad);
    printf("ratios 64B: xtq/hsa=%.3f (hsa_sync %.2f us, xtq %.2f us), xtq/hsa_flag=%.3f, "
           "hsa/xtq=%.2fx\n",
           (double)med[0][M_XTQ] / med[0][M_HSA_SYNC], med[0][M_HSA_SYNC] / 1e3, med[0][M_XTQ] / 1e3,
           (double)med[0][M_XTQ] / med[0][M_HSA_FLAG],
           (double)med[0][M_HSA_SYNC] / med[0][M_XTQ]);
    if (out)
        fclose(out);
    xtq_kernel_destroy(k);
    xtq_queue_destroy(q);
    agent->ops->close(agent);
    return bad ? 1 : 0;
}
