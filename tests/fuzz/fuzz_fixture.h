/*
 * What the rewrite fuzzer's target registered, shared with the seed-corpus
 * generator so seeds name real indices with matching kernel-argument sizes.
 */
#ifndef XTQ_FUZZ_FIXTURE_H
#define XTQ_FUZZ_FIXTURE_H

#include <stdint.h>

#define FUZZ_JOB_KEY 0x58545146555a5aull
#define FUZZ_NRANKS  4u
#define FUZZ_MAX_MSG ((size_t)1 << 20)
#define FUZZ_TABLE   16u

enum { FUZZ_CPU = 0, FUZZ_GPU = 1 }; /* agent kinds used: CPU and CUDA */

struct fuzz_queue_slot {
    uint32_t index;
    int agent; /* FUZZ_CPU / FUZZ_GPU */
};
/* bounded: XTQ_REGISTER_BOUNDED over `buffer_size` bytes (<= FUZZ_BUFFER);
 * max_items: the registration's max_work_items (0: the default, 2^32). */
struct fuzz_kernel_slot {
    uint32_t index;
    int agent;
    uint32_t kernarg_size;
    int has_buffer;
    int has_signal;
    int bounded;
    uint32_t buffer_size;
    uint64_t max_items;
};
struct fuzz_function_slot {
    uint32_t index;
    int agent;
    int has_buffer;
    int bounded;
    uint32_t buffer_size;
};

#define FUZZ_BUFFER 64u

static const struct fuzz_queue_slot fuzz_queues[] = {{0, FUZZ_CPU}, {1, FUZZ_GPU}, {7, FUZZ_CPU}};
static const struct fuzz_kernel_slot fuzz_kernels[] = {
    {0, FUZZ_CPU, 16, 0, 0, 0, 0, 0},
    {1, FUZZ_CPU, 32, 1, 1, 0, 0, 0},
    {2, FUZZ_GPU, 24, 1, 0, 0, 0, 0},
    {9, FUZZ_CPU, 72, 0, 1, 0, 0, 0},
    {15, FUZZ_GPU, 16, 1, 1, 0, 0, 0},
    {3, FUZZ_CPU, 24, 1, 0, 1, 48, 0},  /* bounded */
    {5, FUZZ_CPU, 32, 1, 1, 1, 64, 64}, /* bounded, at most 64 work-items */
    {6, FUZZ_GPU, 16, 0, 0, 0, 0, 1000},
};
static const struct fuzz_function_slot fuzz_functions[] = {
    {0, FUZZ_CPU, 0, 0, 0},
    {3, FUZZ_CPU, 1, 0, 0},
    {4, FUZZ_GPU, 1, 0, 0},
    {5, FUZZ_CPU, 1, 1, 40}, /* bounded */
};

#endif /* XTQ_FUZZ_FIXTURE_H */
