/* EXPERIMENT (not for main): rdtsc marks on the enqueue and retire paths. */
#ifndef XTQ_DIAG_TSC_H
#define XTQ_DIAG_TSC_H
#include <stdint.h>
#include <x86intrin.h>
#define XTQ_DIAG_N 24
extern int xtq__diag_on;
extern __thread uint64_t xtq__diag_t[XTQ_DIAG_N];
#define DIAG(k)                                                                            \
    do {                                                                                    \
        if (__builtin_expect(xtq__diag_on, 0))                                             \
            xtq__diag_t[(k)] = __rdtsc();                                                   \
    } while (0)
void xtq__diag_commit(int first, int last);
#endif
