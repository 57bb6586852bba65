/* EXPERIMENT (not for main): medians of the deltas between DIAG marks. */
#include "diag_tsc.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int xtq__diag_on;
__thread uint64_t xtq__diag_t[XTQ_DIAG_N];
#define CAP 16384
static uint32_t samp[XTQ_DIAG_N][CAP];
static atomic_uint nsamp[XTQ_DIAG_N];
static uint64_t tsc0, ns0;
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
void xtq__diag_commit(int first, int last)
{
    for (int k = first + 1; k <= last; k++) {
        uint64_t d = xtq__diag_t[k] - xtq__diag_t[k - 1];
        unsigned i = atomic_fetch_add(&nsamp[k], 1);
        if (i < CAP)
            samp[k][i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
    }
}
static int cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}
static void report(void)
{
    double ghz = (double)(__rdtsc() - tsc0) / (double)(now_ns() - ns0);
    char line[2048];
    int o = snprintf(line, sizeof(line), "diag pid %d (%.2f GHz):", (int)getpid(), ghz);
    for (int k = 0; k < XTQ_DIAG_N; k++) {
        unsigned n = atomic_load(&nsamp[k]);
        if (!n)
            continue;
        if (n > CAP)
            n = CAP;
        qsort(samp[k], n, sizeof(uint32_t), cmp);
        o += snprintf(line + o, sizeof(line) - (size_t)o, " d%d=%.0f/%.0f", k, samp[k][n / 2] / ghz,
                      samp[k][n * 9 / 10] / ghz);
    }
    fprintf(stderr, "%s (ns median/p90)\n", line);
}
__attribute__((constructor)) static void diag_init(void)
{
    if (getenv("XTQ_DIAG") && atoi(getenv("XTQ_DIAG"))) {
        xtq__diag_on = 1;
        tsc0 = __rdtsc();
        ns0 = now_ns();
        atexit(report);
    }
}
