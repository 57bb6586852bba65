/*
 * Single-precision matrix products for the CPU trainer: a 6x16 register
 * tile that the compiler vectorises (AVX2/FMA and AVX-512 clones chosen
 * at load time, plain x86-64 otherwise), B panels streamed from L1/L2.
 * Row-major throughout. No external BLAS: for these shapes (batch 16-256,
 * layers of 10-784) it is within reach of one and keeps the trainer
 * single-threaded, so ranks do not fight over cores (docs/training.md).
 */
#include "train.h"

#include <stdlib.h>
#include <string.h>

#define MR 6
#define NR 16

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define GEMM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GEMM_CLONES
#endif

/* 8 floats; unaligned loads and stores. The AVX clones keep each in one
 * ymm register, the default build in two xmm registers. */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

/*
 * C[m x n] (+)= A' B where A' (i, p) = A[i * rsa + p * csa] and B (p, j) =
 * B[p * ldb + j]. One MR x NR tile of C: 12 vector accumulators, two
 * vector loads of B and MR broadcasts of A per step of p.
 */
static inline __attribute__((always_inline)) void
tile_full(size_t k, const float *restrict a, size_t rsa, size_t csa, const float *restrict b,
          size_t ldb, float *restrict c, size_t ldc, int acc_in)
{
    v8 acc[MR][2];
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = (v8){0};
    for (size_t p = 0; p < k; p++) {
        const v8 b0 = *(const v8 *)(b + p * ldb), b1 = *(const v8 *)(b + p * ldb + 8);
        for (int r = 0; r < MR; r++) {
            float av = a[r * rsa + p * csa];
            acc[r][0] += av * b0;
            acc[r][1] += av * b1;
        }
    }
    for (int r = 0; r < MR; r++) {
        v8 *c0 = (v8 *)(c + r * ldc), *c1 = (v8 *)(c + r * ldc + 8);
        *c0 = acc_in ? *c0 + acc[r][0] : acc[r][0];
        *c1 = acc_in ? *c1 + acc[r][1] : acc[r][1];
    }
}

/* Edge tiles (mr < MR or nr < NR). */
static inline __attribute__((always_inline)) void
tile_edge(size_t k, const float *restrict a, size_t rsa, size_t csa, const float *restrict b,
          size_t ldb, float *restrict c, size_t ldc, size_t mr, size_t nr, int acc_in)
{
    float acc[MR][NR];
    memset(acc, 0, sizeof(acc));
    for (size_t p = 0; p < k; p++) {
        const float *bp = b + p * ldb;
        for (size_t r = 0; r < mr; r++) {
            float av = a[r * rsa + p * csa];
            for (size_t j = 0; j < nr; j++)
                acc[r][j] += av * bp[j];
        }
    }
    for (size_t r = 0; r < mr; r++)
        for (size_t j = 0; j < nr; j++)
            c[r * ldc + j] = acc_in ? c[r * ldc + j] + acc[r][j] : acc[r][j];
}

GEMM_CLONES
static void gemm_strided(size_t m, size_t n, size_t k, const float *a, size_t rsa, size_t csa,
                         const float *b, size_t ldb, float *c, size_t ldc, int accumulate)
{
    for (size_t j = 0; j < n; j += NR) {
        size_t nr = n - j < NR ? n - j : NR;
        for (size_t i = 0; i < m; i += MR) {
            size_t mr = m - i < MR ? m - i : MR;
            if (mr == MR && nr == NR)
                tile_full(k, a + i * rsa, rsa, csa, b + j, ldb, c + i * ldc + j, ldc, accumulate);
            else
                tile_edge(k, a + i * rsa, rsa, csa, b + j, ldb, c + i * ldc + j, ldc, mr, nr,
                          accumulate);
        }
    }
}

void gemm_nn(size_t m, size_t n, size_t k, const float *a, const float *b, float *c, int accumulate)
{
    gemm_strided(m, n, k, a, k, 1, b, n, c, n, accumulate);
}

void gemm_tn(size_t m, size_t n, size_t k, const float *a, const float *b, float *c, int accumulate)
{
    /* A is k x m: A' (i, p) = A[p * m + i]. */
    gemm_strided(m, n, k, a, 1, m, b, n, c, n, accumulate);
}

void gemm_nt(size_t m, size_t n, size_t k, const float *a, const float *b, float *c, float *scratch)
{
    /* B is n x k; its transpose (k x n) goes to scratch so the tile streams
     * contiguous rows. */
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++)
            scratch[p * n + j] = b[j * k + p];
    gemm_strided(m, n, k, a, k, 1, scratch, n, c, n, 0);
}
