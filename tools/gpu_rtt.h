/* Shared by bench/gpu_rtt.c and bench/gpu_rtt_kernels.cu. */
#ifndef XTQ_BENCH_GPU_RTT_H
#define XTQ_BENCH_GPU_RTT_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define RTT_WG 256
struct rtt_args {
    unsigned long long *result; /* argument 0: target buffer */
    const uint32_t *payload;    /* argument 1: payload */
    uint32_t words;
    uint32_t pad;
};
struct xtq_agent;
int rtt_attach(struct xtq_agent *agent);
uint64_t rtt_task_address(void);
int rtt_launch(const struct rtt_args *a, unsigned groups, unsigned *done, void *stream);
#ifdef __cplusplus
}
#endif
#endif
