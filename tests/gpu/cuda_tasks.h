/* Kernel arguments and task ids shared by the tests and their tasks. */
#ifndef XTQ_TEST_CUDA_TASKS_H
#define XTQ_TEST_CUDA_TASKS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TASK_GEOM,
    TASK_COUNT,
    TASK_READ_FLAG,
    TASK_SUM,
    TASK_HEAVY,
    TASK_FAIL,
    TASK_RESULT,
    TASK_KARG,
    TASK_COLL /* libxtq_coll's task (<xtq/coll_cuda.cuh>) */
};
#define HEAVY_N 96

/* Arguments 0 and 1 are the target buffer and the payload (XTQ layout). */
struct geom_args {
    uint32_t *out;
    const uint32_t *payload;
    uint32_t tag;
    uint32_t pad;
};
struct count_args {
    uint32_t *seen;
    const void *payload;
    uint64_t seq;
};
struct flag_args {
    uint32_t *out;
    const uint32_t *flag;
};
struct sum_args {
    unsigned long long *result; /* device memory: [0] sum, [1] payload address seen */
    const uint8_t *payload;
    uint32_t len;
    uint32_t pad;
};
struct heavy_args {
    float *out;
    const float *in;
};
/* Every work-item marks seen[its flat id]; work-item 0 of group
 * `fail_group` fails the dispatch with `status`. */
struct fail_args {
    uint32_t *seen;
    const void *payload;
    int32_t status;
    uint32_t fail_group;
};
/* Work-item i writes result word i (i < result_len / 4); work-item 0
 * reports what it saw in info[0] (result_len), info[1] (non-NULL), and
 * info[2], info[3] (payload_len, low and high word); the last work-item
 * of the dispatch adds the payload's first and last bytes as it sees them
 * in info[4] (first | last << 8), 0 without payload. */
struct result_args {
    uint32_t *info;
    const void *payload;
};
#define RESULT_WORD(i) ((uint32_t)(i) * 2654435761u + 7u)
/* Kernel arguments of any length up to XTQ_CUDA_MAX_KERNARG: the task
 * copies words[0 .. n-1] (as many as the kernel's arguments hold) to
 * out[0 .. n-1]. */
#define KARG_WORDS_MAX 1018
struct karg_args {
    uint32_t *out;
    const void *payload;
    uint32_t n;
    uint32_t pad;
    uint32_t words[KARG_WORDS_MAX];
};

#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint32_t geom_value(uint32_t x, uint32_t y, uint32_t z, uint32_t tag)
{
    return (x | (y << 10) | (z << 20)) ^ tag;
}

/* Attach / detach this module (its processor) on a CUDA agent. */
struct xtq_agent;
int cuda_tasks_attach(struct xtq_agent *agent);
int cuda_tasks_detach(struct xtq_agent *agent);
int cuda_tasks_attach_other(struct xtq_agent *agent);
/* The device address of a task (0 on failure). */
uint64_t cuda_task_address(int which);
void heavy_reference(const float *in, uint32_t lid, float *out);
/* libxtq_coll's CUDA task run on the host, work-item by work-item, and
 * the pairs it reduces (<xtq/coll_cuda.cuh>). */
struct xtq_coll_cuda_args;
void coll_task_run_host(const struct xtq_coll_cuda_args *a, uint32_t grid, uint32_t wg);
int coll_task_supported(int op, int type);

#ifdef __cplusplus
}
#endif
#endif
