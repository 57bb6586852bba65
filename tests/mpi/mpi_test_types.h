/*
 * What the MPI layer's test programs share: checks that abort every rank,
 * the predefined types with values whose sums and products stay exact,
 * MPI's rules for which operation goes with which type, and comparison
 * that ignores padding. Header-only (static): each test program is one
 * plain MPI source plus this.
 */
#ifndef XTQ_MPI_TEST_TYPES_H
#define XTQ_MPI_TEST_TYPES_H

#include <mpi.h>

#include <complex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xtq_test.h"

static int rank, nranks;

#define T_FAIL(...)                                                                                \
    do {                                                                                           \
        fprintf(stderr, "FAIL rank %d %s:%d [%s]: ", rank, __FILE__, __LINE__, xtq_test_current);  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        fflush(stderr);                                                                            \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    } while (0)
#define T_CHECK(c)                                                                                 \
    do {                                                                                           \
        if (!(c))                                                                                  \
            T_FAIL("CHECK(%s)", #c);                                                               \
    } while (0)
#define T_MPI(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int l_ = 0;                                                                            \
            MPI_Error_string(rc_, s_, &l_);                                                        \
            T_FAIL("%s: %s", #call, s_);                                                           \
        }                                                                                          \
    } while (0)

/* ---- types and values ------------------------------------------------------ */

enum cls { INT, UINT, REAL, CPLX, BOOL, BYTE, PAIR };

struct ttype {
    MPI_Datatype t;
    const char *name;
    enum cls c;
    int size;  /* bytes of one element as laid out in memory (C sizeof) */
    int vsize; /* pairs: bytes of the value field */
    int ioff;  /* pairs: offset of the index */
};

struct fi {
    float v;
    int i;
};
struct di {
    double v;
    int i;
};
struct li {
    long v;
    int i;
};
struct ii {
    int v;
    int i;
};
struct si {
    short v;
    int i;
};
struct ldi {
    long double v;
    int i;
};

#define PAIRT(T, mpi, n)                                                                           \
    {                                                                                              \
        mpi, n, PAIR, sizeof(struct T), sizeof(((struct T *)0)->v), offsetof(struct T, i)          \
    }

static struct ttype types[40];
static int ntypes;

static inline void types_init(void)
{
    const struct ttype all[] = {
        {MPI_SIGNED_CHAR, "signed_char", INT, 1, 0, 0},
        {MPI_UNSIGNED_CHAR, "unsigned_char", UINT, 1, 0, 0},
        {MPI_SHORT, "short", INT, sizeof(short), 0, 0},
        {MPI_UNSIGNED_SHORT, "unsigned_short", UINT, sizeof(short), 0, 0},
        {MPI_INT, "int", INT, sizeof(int), 0, 0},
        {MPI_UNSIGNED, "unsigned", UINT, sizeof(int), 0, 0},
        {MPI_LONG, "long", INT, sizeof(long), 0, 0},
        {MPI_UNSIGNED_LONG, "unsigned_long", UINT, sizeof(long), 0, 0},
        {MPI_LONG_LONG, "long_long", INT, sizeof(long long), 0, 0},
        {MPI_UNSIGNED_LONG_LONG, "unsigned_long_long", UINT, sizeof(long long), 0, 0},
        {MPI_INT8_T, "int8", INT, 1, 0, 0},
        {MPI_UINT8_T, "uint8", UINT, 1, 0, 0},
        {MPI_INT16_T, "int16", INT, 2, 0, 0},
        {MPI_UINT16_T, "uint16", UINT, 2, 0, 0},
        {MPI_INT32_T, "int32", INT, 4, 0, 0},
        {MPI_UINT32_T, "uint32", UINT, 4, 0, 0},
        {MPI_INT64_T, "int64", INT, 8, 0, 0},
        {MPI_UINT64_T, "uint64", UINT, 8, 0, 0},
        {MPI_AINT, "aint", INT, sizeof(MPI_Aint), 0, 0},
        {MPI_FLOAT, "float", REAL, sizeof(float), sizeof(float), 0},
        {MPI_DOUBLE, "double", REAL, sizeof(double), sizeof(double), 0},
        {MPI_LONG_DOUBLE, "long_double", REAL, sizeof(long double), 10, 0},
        {MPI_C_FLOAT_COMPLEX, "c_float_complex", CPLX, sizeof(float complex), sizeof(float), 0},
        {MPI_C_DOUBLE_COMPLEX, "c_double_complex", CPLX, sizeof(double complex), sizeof(double), 0},
        {MPI_C_LONG_DOUBLE_COMPLEX, "c_long_double_complex", CPLX, sizeof(long double complex), 10,
         0},
        {MPI_C_BOOL, "c_bool", BOOL, sizeof(_Bool), 0, 0},
        {MPI_BYTE, "byte", BYTE, 1, 0, 0},
        PAIRT(fi, MPI_FLOAT_INT, "float_int"),
        PAIRT(di, MPI_DOUBLE_INT, "double_int"),
        PAIRT(li, MPI_LONG_INT, "long_int"),
        PAIRT(ii, MPI_2INT, "2int"),
        PAIRT(si, MPI_SHORT_INT, "short_int"),
        PAIRT(ldi, MPI_LONG_DOUBLE_INT, "long_double_int"),
    };
    ntypes = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        types[ntypes++] = all[i];
    /* long double: 10 meaningful bytes on x86-64 */
    for (int i = 0; i < ntypes; i++)
        if (types[i].vsize == 10 && sizeof(long double) != 16)
            types[i].vsize = sizeof(long double);
}

struct top {
    MPI_Op op;
    const char *name;
};
static const struct top ops[] = {
    {MPI_SUM, "sum"},         {MPI_PROD, "prod"},   {MPI_MAX, "max"},       {MPI_MIN, "min"},
    {MPI_LAND, "land"},       {MPI_LOR, "lor"},     {MPI_LXOR, "lxor"},     {MPI_BAND, "band"},
    {MPI_BOR, "bor"},         {MPI_BXOR, "bxor"},   {MPI_MAXLOC, "maxloc"}, {MPI_MINLOC, "minloc"},
    {MPI_REPLACE, "replace"}, {MPI_NO_OP, "no_op"},
};

/* MPI's rules (section 6.9.2, 11.3.4). */
static inline bool valid(MPI_Op op, enum cls c)
{
    if (op == MPI_REPLACE || op == MPI_NO_OP)
        return true;
    if (op == MPI_SUM || op == MPI_PROD)
        return c == INT || c == UINT || c == REAL || c == CPLX;
    if (op == MPI_MAX || op == MPI_MIN)
        return c == INT || c == UINT || c == REAL;
    if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR)
        return c == INT || c == UINT || c == BOOL;
    if (op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR)
        return c == INT || c == UINT || c == BYTE;
    return c == PAIR; /* MAXLOC, MINLOC */
}

/* Small values: products and sums stay exact in every type. */
static inline void fill(const struct ttype *t, void *buf, int count, int seed)
{
    uint8_t *b = buf;
    memset(buf, 0, (size_t)count * (size_t)t->size);
    for (int i = 0; i < count; i++) {
        uint8_t *e = b + (size_t)i * t->size;
        int v = (int)(((unsigned)i * 7u + (unsigned)seed * 13u) % 7u) - 3; /* -3..3 */
        int u = v + 3;                                                     /* 0..6 */
        switch (t->c) {
        case INT:
            if (t->size == 1)
                *(int8_t *)e = (int8_t)v;
            else if (t->size == 2)
                *(int16_t *)e = (int16_t)v;
            else if (t->size == 4)
                *(int32_t *)e = v;
            else
                *(int64_t *)e = v;
            break;
        case UINT:
            if (t->size == 1)
                *(uint8_t *)e = (uint8_t)u;
            else if (t->size == 2)
                *(uint16_t *)e = (uint16_t)u;
            else if (t->size == 4)
                *(uint32_t *)e = (uint32_t)u;
            else
                *(uint64_t *)e = (uint64_t)u;
            break;
        case REAL:
            if (t->t == MPI_FLOAT)
                *(float *)e = (float)v;
            else if (t->t == MPI_DOUBLE)
                *(double *)e = v;
            else
                *(long double *)e = v;
            break;
        case CPLX:
            if (t->t == MPI_C_FLOAT_COMPLEX)
                *(float complex *)e = v + (u % 3) * I;
            else if (t->t == MPI_C_DOUBLE_COMPLEX)
                *(double complex *)e = v + (u % 3) * I;
            else
                *(long double complex *)e = v + (u % 3) * I;
            break;
        case BOOL:
            *(_Bool *)e = (u & 1) != 0;
            break;
        case BYTE:
            *e = (uint8_t)(i * 37 + seed * 11);
            break;
        case PAIR:
            if (t->t == MPI_FLOAT_INT)
                ((struct fi *)e)->v = (float)v;
            else if (t->t == MPI_DOUBLE_INT)
                ((struct di *)e)->v = v;
            else if (t->t == MPI_LONG_INT)
                ((struct li *)e)->v = v;
            else if (t->t == MPI_2INT)
                ((struct ii *)e)->v = v;
            else if (t->t == MPI_SHORT_INT)
                ((struct si *)e)->v = (short)v;
            else
                ((struct ldi *)e)->v = v;
            memcpy(e + t->ioff, &(int){(i + seed) % 5}, sizeof(int));
            break;
        }
    }
}

/* Equal where the type has meaning (not in padding). */
static inline bool same(const struct ttype *t, const void *a, const void *b, int count, int *at)
{
    for (int i = 0; i < count; i++) {
        const uint8_t *x = (const uint8_t *)a + (size_t)i * t->size;
        const uint8_t *y = (const uint8_t *)b + (size_t)i * t->size;
        bool ok;
        if (t->c == PAIR)
            ok = memcmp(x, y, (size_t)t->vsize) == 0 && memcmp(x + t->ioff, y + t->ioff, 4) == 0;
        else if (t->c == REAL || t->c == CPLX)
            ok = t->c == REAL ? memcmp(x, y, (size_t)t->vsize) == 0
                              : memcmp(x, y, (size_t)t->vsize) == 0 &&
                                    memcmp(x + t->size / 2, y + t->size / 2, (size_t)t->vsize) == 0;
        else
            ok = memcmp(x, y, (size_t)t->size) == 0;
        if (!ok) {
            *at = i;
            return false;
        }
    }
    return true;
}

#endif /* XTQ_MPI_TEST_TYPES_H */
