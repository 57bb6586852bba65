/* Reductions (xtq/reduce.h): the MPI validity table, every supported
 * operation on every type against a scalar reference, wrap-around of signed
 * integers, MAXLOC/MINLOC ties, 16-bit reals' rounding, and refusals. */
#include <complex.h>
#include <math.h>

#include <xtq/xtq.h>

#include "xtq_test.h"

/* The MPI standard's table (6.9.2), written out independently of the
 * library's classification. */
XTQ_TEST(supported_table)
{
    CHECK(xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_INT32));
    CHECK(xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_C_DOUBLE_COMPLEX));
    CHECK(!xtq_reduce_supported(XTQ_OP_MAX, XTQ_DT_C_FLOAT_COMPLEX));
    CHECK(!xtq_reduce_supported(XTQ_OP_BAND, XTQ_DT_DOUBLE));
    CHECK(xtq_reduce_supported(XTQ_OP_BAND, XTQ_DT_BYTE));
    CHECK(!xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_BYTE));
    CHECK(xtq_reduce_supported(XTQ_OP_LXOR, XTQ_DT_BOOL));
    CHECK(!xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_BOOL));
    CHECK(!xtq_reduce_supported(XTQ_OP_LAND, XTQ_DT_FLOAT));
    CHECK(xtq_reduce_supported(XTQ_OP_MINLOC, XTQ_DT_DOUBLE_INT));
    CHECK(!xtq_reduce_supported(XTQ_OP_MINLOC, XTQ_DT_DOUBLE));
    CHECK(!xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_2INT));
    for (int t = 0; t < XTQ_DT_COUNT; t++) {
        CHECK(xtq_reduce_supported(XTQ_OP_REPLACE, (enum xtq_datatype)t));
        CHECK(xtq_reduce_supported(XTQ_OP_NO_OP, (enum xtq_datatype)t));
        CHECK(xtq_datatype_size((enum xtq_datatype)t) > 0);
        CHECK(strcmp(xtq_datatype_name((enum xtq_datatype)t), "?") != 0);
    }
    CHECK(!xtq_reduce_supported(XTQ_OP_SUM, XTQ_DT_COUNT));
    CHECK(!xtq_reduce_supported(XTQ_OP_COUNT, XTQ_DT_INT8));
    CHECK_EQ(xtq_datatype_size(XTQ_DT_COUNT), 0);
    CHECK_EQ(xtq_datatype_size(XTQ_DT_DOUBLE_INT), 16);
    CHECK_EQ(xtq_datatype_size(XTQ_DT_FLOAT_INT), 8);
    for (int o = 0; o < XTQ_OP_COUNT; o++)
        CHECK(strcmp(xtq_op_name((enum xtq_op)o), "?") != 0);
}

XTQ_TEST(refusals)
{
    int32_t a[2] = {1, 2}, b[2] = {3, 4};
    CHECK_ERR(xtq_reduce_local(XTQ_OP_MAXLOC, XTQ_DT_INT32, a, b, 2), -XTQ_EINVAL);
    CHECK_ERR(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_INT32, NULL, b, 2), -XTQ_EINVAL);
    CHECK_ERR(xtq_reduce_local(XTQ_OP_SUM, (enum xtq_datatype)99, a, b, 2), -XTQ_EINVAL);
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_INT32, NULL, NULL, 0));
    CHECK(a[0] == 1 && a[1] == 2);
}

/* Deterministic pseudo-random values (not zeros: they hide mistakes). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define N 1031 /* odd: exercises the vector loops' tails */

/* Integers: every integer operation against a scalar reference computed in
 * 64-bit unsigned arithmetic, truncated to the width. */
#define CHECK_INT_TYPE(T, DT)                                                              \
    do {                                                                                   \
        static T io[N], in[N], orig[N];                                                    \
        static const enum xtq_op ops[] = {XTQ_OP_SUM, XTQ_OP_PROD, XTQ_OP_MAX, XTQ_OP_MIN,  \
                                          XTQ_OP_LAND, XTQ_OP_LOR, XTQ_OP_LXOR,            \
                                          XTQ_OP_BAND, XTQ_OP_BOR, XTQ_OP_BXOR};            \
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {                        \
            for (int i = 0; i < N; i++) {                                                  \
                uint64_t r1 = rnd(), r2 = rnd();                                           \
                if (i % 7 == 0) r1 = 0; /* logical ops need zeros */                       \
                memcpy(&orig[i], &r1, sizeof(T));                                          \
                memcpy(&in[i], &r2, sizeof(T));                                            \
            }                                                                              \
            memcpy(io, orig, sizeof(io));                                                  \
            CHECK_OK(xtq_reduce_local(ops[k], DT, io, in, N));                             \
            for (int i = 0; i < N; i++) {                                                  \
                T a = orig[i], b = in[i], want;                                            \
                uint64_t ua = (uint64_t)a, ub = (uint64_t)b;                               \
                switch (ops[k]) {                                                          \
                case XTQ_OP_SUM: want = (T)(ua + ub); break;                               \
                case XTQ_OP_PROD: want = (T)(ua * ub); break;                              \
                case XTQ_OP_MAX: want = a > b ? a : b; break;                              \
                case XTQ_OP_MIN: want = a < b ? a : b; break;                              \
                case XTQ_OP_LAND: want = (T)(a != 0 && b != 0); break;                     \
                case XTQ_OP_LOR: want = (T)(a != 0 || b != 0); break;                      \
                case XTQ_OP_LXOR: want = (T)((a != 0) != (b != 0)); break;                 \
                case XTQ_OP_BAND: want = (T)(ua & ub); break;                              \
                case XTQ_OP_BOR: want = (T)(ua | ub); break;                               \
                default: want = (T)(ua ^ ub); break;                                       \
                }                                                                          \
                if (memcmp(&io[i], &want, sizeof(T)) != 0)                                 \
                    XTQ_FAIL("%s %s element %d wrong", xtq_op_name(ops[k]), #T, i);        \
            }                                                                              \
        }                                                                                  \
    } while (0)

XTQ_TEST(integers)
{
    CHECK_INT_TYPE(int8_t, XTQ_DT_INT8);
    CHECK_INT_TYPE(uint8_t, XTQ_DT_UINT8);
    CHECK_INT_TYPE(int16_t, XTQ_DT_INT16);
    CHECK_INT_TYPE(uint16_t, XTQ_DT_UINT16);
    CHECK_INT_TYPE(int32_t, XTQ_DT_INT32);
    CHECK_INT_TYPE(uint32_t, XTQ_DT_UINT32);
    CHECK_INT_TYPE(int64_t, XTQ_DT_INT64);
    CHECK_INT_TYPE(uint64_t, XTQ_DT_UINT64);
    /* Signed overflow wraps (two's complement), it is not undefined. */
    int32_t a = INT32_MAX, b = 1;
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_INT32, &a, &b, 1));
    CHECK_EQ(a, INT32_MIN);
}

#define CHECK_REAL_TYPE(T, DT)                                                             \
    do {                                                                                   \
        static T io[N], in[N], orig[N];                                                    \
        static const enum xtq_op ops[] = {XTQ_OP_SUM, XTQ_OP_PROD, XTQ_OP_MAX, XTQ_OP_MIN}; \
        for (size_t k = 0; k < 4; k++) {                                                   \
            for (int i = 0; i < N; i++) {                                                  \
                orig[i] = (T)((double)(rnd() % 2001) / 8.0 - 125.0);                       \
                in[i] = (T)((double)(rnd() % 2001) / 8.0 - 125.0);                         \
            }                                                                              \
            memcpy(io, orig, sizeof(io));                                                  \
            CHECK_OK(xtq_reduce_local(ops[k], DT, io, in, N));                             \
            for (int i = 0; i < N; i++) {                                                  \
                T a = orig[i], b = in[i];                                                  \
                T want = ops[k] == XTQ_OP_SUM ? a + b : ops[k] == XTQ_OP_PROD ? a * b      \
                         : ops[k] == XTQ_OP_MAX ? (a > b ? a : b) : (a < b ? a : b);        \
                if (io[i] != want)                                                         \
                    XTQ_FAIL("%s %s element %d wrong", xtq_op_name(ops[k]), #T, i);        \
            }                                                                              \
        }                                                                                  \
    } while (0)

XTQ_TEST(reals)
{
    CHECK_REAL_TYPE(float, XTQ_DT_FLOAT);
    CHECK_REAL_TYPE(double, XTQ_DT_DOUBLE);
    CHECK_REAL_TYPE(long double, XTQ_DT_LONG_DOUBLE);
}

XTQ_TEST(complex)
{
    double complex a[3] = {1 + 2 * I, -3 + 0.5 * I, 0}, b[3] = {2 - I, 4 + 4 * I, 1};
    double complex s[3], p[3];
    memcpy(s, a, sizeof(a));
    memcpy(p, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_C_DOUBLE_COMPLEX, s, b, 3));
    CHECK_OK(xtq_reduce_local(XTQ_OP_PROD, XTQ_DT_C_DOUBLE_COMPLEX, p, b, 3));
    for (int i = 0; i < 3; i++) {
        CHECK(s[i] == a[i] + b[i]);
        CHECK(p[i] == a[i] * b[i]);
    }
    float complex fa = 1 + I, fb = 1 - I;
    CHECK_OK(xtq_reduce_local(XTQ_OP_PROD, XTQ_DT_C_FLOAT_COMPLEX, &fa, &fb, 1));
    CHECK(crealf(fa) == 2.0f && cimagf(fa) == 0.0f);
    long double complex la = 2, lb = 3 * I;
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_C_LONG_DOUBLE_COMPLEX, &la, &lb, 1));
    CHECK(creall(la) == 2 && cimagl(la) == 3);
}

XTQ_TEST(bool_and_byte)
{
    _Bool a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1}, t[4];
    memcpy(t, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_LAND, XTQ_DT_BOOL, t, b, 4));
    CHECK(!t[0] && !t[1] && !t[2] && t[3]);
    memcpy(t, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_LOR, XTQ_DT_BOOL, t, b, 4));
    CHECK(!t[0] && t[1] && t[2] && t[3]);
    memcpy(t, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_LXOR, XTQ_DT_BOOL, t, b, 4));
    CHECK(!t[0] && t[1] && t[2] && !t[3]);
    uint8_t x[2] = {0xf0, 0x0f}, y[2] = {0x3c, 0x3c};
    CHECK_OK(xtq_reduce_local(XTQ_OP_BXOR, XTQ_DT_BYTE, x, y, 2));
    CHECK(x[0] == 0xcc && x[1] == 0x33);
}

XTQ_TEST(maxloc_minloc)
{
    struct { double v; int i; } a[4] = {{1, 5}, {2, 5}, {3, 9}, {-1, 0}},
                                b[4] = {{1, 2}, {1, 0}, {3, 4}, {-2, 7}}, t[4];
    memcpy(t, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_MAXLOC, XTQ_DT_DOUBLE_INT, t, b, 4));
    CHECK(t[0].v == 1 && t[0].i == 2); /* tie: smaller index */
    CHECK(t[1].v == 2 && t[1].i == 5);
    CHECK(t[2].v == 3 && t[2].i == 4);
    CHECK(t[3].v == -1 && t[3].i == 0);
    memcpy(t, a, sizeof(a));
    CHECK_OK(xtq_reduce_local(XTQ_OP_MINLOC, XTQ_DT_DOUBLE_INT, t, b, 4));
    CHECK(t[0].v == 1 && t[0].i == 2);
    CHECK(t[1].v == 1 && t[1].i == 0);
    CHECK(t[3].v == -2 && t[3].i == 7);
    struct { short v; int i; } s1 = {7, 3}, s2 = {9, 8};
    CHECK_OK(xtq_reduce_local(XTQ_OP_MAXLOC, XTQ_DT_SHORT_INT, &s1, &s2, 1));
    CHECK(s1.v == 9 && s1.i == 8);
    struct { long double v; int i; } l1 = {7, 3}, l2 = {-9, 8};
    CHECK_OK(xtq_reduce_local(XTQ_OP_MINLOC, XTQ_DT_LONG_DOUBLE_INT, &l1, &l2, 1));
    CHECK(l1.v == -9 && l1.i == 8);
}

XTQ_TEST(replace_and_no_op)
{
    double a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    CHECK_OK(xtq_reduce_local(XTQ_OP_NO_OP, XTQ_DT_DOUBLE, a, b, 3));
    CHECK(a[0] == 1 && a[2] == 3);
    CHECK_OK(xtq_reduce_local(XTQ_OP_REPLACE, XTQ_DT_DOUBLE, a, b, 3));
    CHECK(a[0] == 4 && a[2] == 6);
}

/* 16-bit reals: exact cases and round-to-nearest-even. */
XTQ_TEST(half_precision)
{
    /* binary16: 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200, 65504 = 0x7bff. */
    uint16_t a[4] = {0x3c00, 0x4000, 0x7bff, 0x0001}, b[4] = {0x4000, 0x4000, 0x7bff, 0x0001};
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_FLOAT16, a, b, 4));
    CHECK_EQ(a[0], 0x4200);     /* 1 + 2 = 3 */
    CHECK_EQ(a[1], 0x4400);     /* 2 + 2 = 4 */
    CHECK_EQ(a[2], 0x7c00);     /* overflow to inf */
    CHECK_EQ(a[3], 0x0002);     /* subnormals add exactly */
    /* 2048 + 1 is a tie in binary16 (spacing 2): rounds to even, 2048. */
    uint16_t c = 0x6800, d = 0x3c00;
    CHECK_OK(xtq_reduce_local(XTQ_OP_SUM, XTQ_DT_FLOAT16, &c, &d, 1));
    CHECK_EQ(c, 0x6800);
    /* bfloat16: 1.0 = 0x3f80, 2.0 = 0x4000; 1 * 2 = 2. */
    uint16_t e = 0x3f80, f = 0x4000;
    CHECK_OK(xtq_reduce_local(XTQ_OP_PROD, XTQ_DT_BFLOAT16, &e, &f, 1));
    CHECK_EQ(e, 0x4000);
    uint16_t g = 0xbf80, h = 0x3f80; /* max(-1, 1) = 1 */
    CHECK_OK(xtq_reduce_local(XTQ_OP_MAX, XTQ_DT_BFLOAT16, &g, &h, 1));
    CHECK_EQ(g, 0x3f80);
}
