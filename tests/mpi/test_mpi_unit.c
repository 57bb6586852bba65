/*
 * White-box tests of the MPI layer (linked with its objects): the
 * target-side task run directly on a window in this process (bounds,
 * layouts, fetching kinds, locks, atomicity under concurrent workers,
 * unaligned operands), datatype flattening and the MPI -> xtq mappings.
 * A singleton MPI process; the layer itself is not started (PMPI_Init).
 */
#include "xmpi.h"

#include "xtq_test.h"

#include <complex.h>

/* ---- the task ----------------------------------------------------------------- */

struct win {
    struct xtq__mpi_target t;
    uint8_t *mem; /* guard, window, guard */
    uint8_t *base;
    size_t size;
};

#define GUARD 64

static void win_open(struct win *w, size_t size)
{
    w->mem = malloc(size + 2 * GUARD);
    CHECK(w->mem);
    memset(w->mem, 0xee, size + 2 * GUARD);
    w->base = w->mem + GUARD;
    memset(w->base, 0, size);
    w->size = size;
    xtq__mpi_target_init(&w->t, w->base, size);
}

static void win_close(struct win *w)
{
    for (size_t i = 0; i < GUARD; i++) {
        CHECK_EQ(w->mem[i], 0xee);
        CHECK_EQ(w->mem[GUARD + w->size + i], 0xee);
    }
    xtq__mpi_target_fini(&w->t);
    free(w->mem);
}

/* What the engine does for a bounded registration: check, then rewrite. */
static int engine_run(struct win *w, struct xtq__mpi_args *a, const void *payload, size_t plen,
                      void *result, size_t rlen)
{
    if (a->target > w->size || a->extent > w->size - a->target)
        return -XTQ_ERANGE;
    a->target = (uint64_t)(uintptr_t)(w->base + a->target);
    a->payload = (uint64_t)(uintptr_t)payload;
    return xtq__mpi_task_run(&w->t, a, plen, result, rlen);
}

static struct xtq__mpi_args args(int kind, int op, int dt, uint64_t off, uint64_t extent,
                                 uint64_t count, uint32_t nblocks)
{
    struct xtq__mpi_args a;
    memset(&a, 0, sizeof(a));
    a.kind = (uint8_t)kind;
    a.op = (uint8_t)op;
    a.dtype = (uint8_t)dt;
    a.target = off;
    a.extent = extent;
    a.count = count;
    a.nblocks = nblocks;
    a.magic = XTQ__MPI_MAGIC;
    return a;
}

XTQ_TEST(task_accumulate)
{
    struct win w;
    int64_t in[100], *t;
    win_open(&w, 1000 * sizeof(int64_t));
    t = (int64_t *)w.base;
    for (int i = 0; i < 100; i++) {
        in[i] = i;
        t[10 + i] = 1000;
    }
    struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, 80, sizeof(in), 100, 0);
    CHECK_OK(engine_run(&w, &a, in, sizeof(in), NULL, 0));
    for (int i = 0; i < 100; i++)
        CHECK_EQ(t[10 + i], 1000 + i);
    CHECK_EQ(t[9], 0);
    CHECK_EQ(t[110], 0);
    /* get_accumulate: the old values come back, packed */
    int64_t res[100];
    a = args(XTQ__MPI_GET_ACC, XTQ_OP_MAX, XTQ_DT_INT64, 80, sizeof(in), 100, 0);
    for (int i = 0; i < 100; i++)
        in[i] = 1050;
    CHECK_OK(engine_run(&w, &a, in, sizeof(in), res, sizeof(res)));
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(res[i], 1000 + i);
        CHECK_EQ(t[10 + i], i < 50 ? 1050 : 1000 + i);
    }
    /* NO_OP reads without an operand */
    a = args(XTQ__MPI_GET_ACC, XTQ_OP_NO_OP, XTQ_DT_INT64, 80, 8, 1, 0);
    CHECK_OK(engine_run(&w, &a, NULL, 0, res, 8));
    CHECK_EQ(res[0], 1050);
    win_close(&w);
}

/* Target blocks in the payload prefix, relative to the target pointer. */
XTQ_TEST(task_blocks)
{
    struct win w;
    struct {
        struct xtq__mpi_block b[3];
        double v[6];
    } p = {{{0, 1}, {32, 2}, {128, 3}}, {1, 2, 3, 4, 5, 6}};
    double *t, res[6];
    win_open(&w, 4096);
    t = (double *)(w.base + 256);
    struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_DOUBLE, 256, 128 + 24, 6, 3);
    CHECK_OK(engine_run(&w, &a, &p, sizeof(p), NULL, 0));
    CHECK(t[0] == 1 && t[4] == 2 && t[5] == 3 && t[16] == 4 && t[17] == 5 && t[18] == 6);
    CHECK(t[1] == 0 && t[6] == 0 && t[19] == 0);
    /* get: block order, packed */
    a = args(XTQ__MPI_GET, XTQ_OP_NO_OP, XTQ_DT_DOUBLE, 256, 128 + 24, 6, 3);
    CHECK_OK(engine_run(&w, &a, &p, sizeof(p.b), res, sizeof(res)));
    for (int i = 0; i < 6; i++)
        CHECK(res[i] == i + 1);
    /* put */
    a = args(XTQ__MPI_PUT, 0, XTQ_DT_DOUBLE, 256, 128 + 24, 6, 3);
    CHECK_OK(engine_run(&w, &a, &p, sizeof(p), NULL, 0));
    CHECK(t[16] == 4);
    win_close(&w);
}

/* A wrong or hostile origin: nothing outside the window, nothing at all
 * when anything is off. */
XTQ_TEST(task_bounds)
{
    struct win w;
    int32_t v[4] = {1, 1, 1, 1};
    struct {
        struct xtq__mpi_block b;
        int32_t v[4];
    } p = {{12, 4}, {1, 1, 1, 1}};
    int32_t res[4];
    win_open(&w, 16 * sizeof(int32_t));

    struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 64, 4, 1, 0);
    CHECK_ERR(engine_run(&w, &a, v, 4, NULL, 0), -XTQ_ERANGE); /* one past the end */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 60, 8, 2, 0);
    CHECK_ERR(engine_run(&w, &a, v, 8, NULL, 0), -XTQ_ERANGE); /* straddles */
    /* the count larger than the checked extent */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 4, 4, 0);
    CHECK_ERR(engine_run(&w, &a, v, 16, NULL, 0), -XTQ_ERANGE);
    /* a block beyond the extent */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 16, 4, 1);
    CHECK_ERR(engine_run(&w, &a, &p, sizeof(p), NULL, 0), -XTQ_ERANGE);
    /* blocks that do not add up to count */
    p.b.offset = 0;
    p.b.count = 3;
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 16, 4, 1);
    CHECK_ERR(engine_run(&w, &a, &p, sizeof(p), NULL, 0), -XTQ_EINVAL);
    /* a pointer the engine would never give (wrapped offset) */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 4, 1, 0);
    a.target = (uint64_t)(uintptr_t)(w.base - 8);
    a.payload = (uint64_t)(uintptr_t)v;
    CHECK_ERR(xtq__mpi_task_run(&w.t, &a, 4, NULL, 0), -XTQ_ERANGE);
    /* a payload shorter than the arguments claim */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 16, 4, 0);
    CHECK_ERR(engine_run(&w, &a, v, 12, NULL, 0), -XTQ_EMSGSIZE);
    /* another build's arguments, an invalid pair, a short result */
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 4, 1, 0);
    a.magic = 0x1234;
    CHECK_ERR(engine_run(&w, &a, v, 4, NULL, 0), -XTQ_EVERSION);
    a = args(XTQ__MPI_ACC, XTQ_OP_MAXLOC, XTQ_DT_INT32, 0, 4, 1, 0);
    CHECK_ERR(engine_run(&w, &a, v, 4, NULL, 0), -XTQ_EINVAL);
    a = args(XTQ__MPI_GET_ACC, XTQ_OP_SUM, XTQ_DT_INT32, 0, 16, 4, 0);
    CHECK_ERR(engine_run(&w, &a, v, 16, res, 8), -XTQ_EINVAL);
    a = args(99, XTQ_OP_SUM, XTQ_DT_INT32, 0, 4, 1, 0);
    CHECK_ERR(engine_run(&w, &a, v, 4, NULL, 0), -XTQ_EINVAL);
    for (int i = 0; i < 16; i++)
        CHECK_EQ(((int32_t *)w.base)[i], 0);
    win_close(&w);
}

XTQ_TEST(task_cas)
{
    struct win w;
    uint64_t op_cmp[2], res = 0, *t;
    win_open(&w, 64);
    t = (uint64_t *)w.base;
    t[1] = 5;
    op_cmp[0] = 9; /* new value */
    op_cmp[1] = 5; /* compare */
    struct xtq__mpi_args a = args(XTQ__MPI_CAS, XTQ_OP_REPLACE, XTQ_DT_UINT64, 8, 8, 1, 0);
    CHECK_OK(engine_run(&w, &a, op_cmp, sizeof(op_cmp), &res, 8));
    CHECK_EQ(res, 5);
    CHECK_EQ(t[1], 9);
    a = args(XTQ__MPI_CAS, XTQ_OP_REPLACE, XTQ_DT_UINT64, 8, 8, 1, 0);
    op_cmp[0] = 11;
    CHECK_OK(engine_run(&w, &a, op_cmp, sizeof(op_cmp), &res, 8));
    CHECK_EQ(res, 9);
    CHECK_EQ(t[1], 9); /* compare failed: unchanged */
    win_close(&w);
}

XTQ_TEST(task_locks)
{
    struct win w;
    uint64_t granted;
    win_open(&w, 8);
#define LOCK(kind, type, org, rc_expected)                                                         \
    do {                                                                                           \
        struct xtq__mpi_args a_ = args(kind, type, 0, 0, 0, 0, 0);                                 \
        a_.origin = org;                                                                           \
        granted = 99;                                                                              \
        CHECK_ERR(xtq__mpi_task_run(&w.t, &a_, 0, &granted, sizeof(granted)), rc_expected);        \
    } while (0)
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 1, 0);
    CHECK_EQ(granted, 1);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 2, 0);
    CHECK_EQ(granted, 1);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_EXCLUSIVE, 3, 0);
    CHECK_EQ(granted, 0); /* refused while shared holders remain */
    LOCK(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_SHARED, 1, 0);
    LOCK(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_SHARED, 2, 0);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_EXCLUSIVE, 3, 0);
    CHECK_EQ(granted, 1);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 1, 0);
    CHECK_EQ(granted, 0);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_EXCLUSIVE, 4, 0);
    CHECK_EQ(granted, 0);
    LOCK(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_EXCLUSIVE, 4, -XTQ_EINVAL); /* not the holder */
    LOCK(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_SHARED, 4, -XTQ_EINVAL);    /* nothing shared */
    LOCK(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_EXCLUSIVE, 3, 0);
    LOCK(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 1, 0);
    CHECK_EQ(granted, 1);
    LOCK(XTQ__MPI_LOCK, 7, 1, -XTQ_EINVAL);
#undef LOCK
    win_close(&w);
}

/* The lock carried by data commands (lazy lock epochs): ACQUIRE refused
 * applies nothing and changes no lock state; a failed command changes no
 * lock state; ACQUIRE | RELEASE on one command leaves the lock free. */
XTQ_TEST(task_lock_flags)
{
    struct win w;
    int64_t one = 1, *t, got = -1;
    uint64_t granted;
    win_open(&w, 4 * sizeof(int64_t));
    t = (int64_t *)w.base;
#define DATA(fl, org, off, rc_expected)                                                            \
    do {                                                                                           \
        struct xtq__mpi_args a_ = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, off, 8, 1, 0);      \
        a_.origin = org;                                                                           \
        a_.flags = (uint8_t)(fl);                                                                  \
        CHECK_ERR(engine_run(&w, &a_, &one, sizeof(one), NULL, 0), rc_expected);                   \
    } while (0)
#define LOCKCMD(kind, type, org)                                                                   \
    do {                                                                                           \
        struct xtq__mpi_args a_ = args(kind, type, 0, 0, 0, 0, 0);                                 \
        a_.origin = org;                                                                           \
        granted = 99;                                                                              \
        CHECK_OK(xtq__mpi_task_run(&w.t, &a_, 0, &granted, sizeof(granted)));                      \
    } while (0)
    const uint8_t acq_x = XTQ__MPI_F_ACQUIRE(XTQ__MPI_LOCK_EXCLUSIVE);
    const uint8_t rel_x = XTQ__MPI_F_RELEASE(XTQ__MPI_LOCK_EXCLUSIVE);
    const uint8_t acq_s = XTQ__MPI_F_ACQUIRE(XTQ__MPI_LOCK_SHARED);
    const uint8_t rel_s = XTQ__MPI_F_RELEASE(XTQ__MPI_LOCK_SHARED);

    /* one command, the whole epoch: applied, lock free afterwards */
    DATA(acq_x | rel_x, 1, 0, 0);
    CHECK_EQ(t[0], 1);
    CHECK_EQ(w.t.exclusive, -1);
    CHECK_EQ(w.t.shared, 0);
    /* origin 1 takes it with its first command and keeps it */
    DATA(acq_x, 1, 0, 0);
    CHECK_EQ(w.t.exclusive, 1);
    /* origin 2's first commands are refused and not applied */
    DATA(acq_x | rel_x, 2, 8, -XTQ_EBUSY);
    DATA(acq_s, 2, 8, -XTQ_EBUSY);
    CHECK_EQ(t[1], 0);
    CHECK_EQ(w.t.exclusive, 1);
    CHECK_EQ(w.t.refused, 2);
    LOCKCMD(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 2);
    CHECK_EQ(granted, 0);
    CHECK_EQ(w.t.refused, 2); /* data commands only */
    /* origin 1's middle command, then its last releases */
    DATA(0, 1, 0, 0);
    /* a failed command (out of range at the task) releases nothing */
    {
        struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, 0, 8, 2, 0);
        a.origin = 1;
        a.flags = rel_x;
        int64_t two[2] = {1, 1};
        CHECK_ERR(engine_run(&w, &a, two, sizeof(two), NULL, 0), -XTQ_ERANGE);
        CHECK_EQ(w.t.exclusive, 1);
    }
    DATA(rel_x, 1, 0, 0);
    CHECK_EQ(t[0], 4);
    CHECK_EQ(w.t.exclusive, -1);
    /* a failed command with ACQUIRE takes nothing */
    {
        struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, 0, 8, 2, 0);
        a.origin = 3;
        a.flags = acq_x;
        int64_t two[2] = {1, 1};
        CHECK_ERR(engine_run(&w, &a, two, sizeof(two), NULL, 0), -XTQ_ERANGE);
        CHECK_EQ(w.t.exclusive, -1);
    }
    /* shared: two origins at once; exclusive refused meanwhile */
    DATA(acq_s, 2, 8, 0);
    {
        struct xtq__mpi_args a = args(XTQ__MPI_GET_ACC, XTQ_OP_NO_OP, XTQ_DT_INT64, 8, 8, 1, 0);
        a.origin = 3;
        a.flags = acq_s;
        CHECK_OK(engine_run(&w, &a, NULL, 0, &got, sizeof(got)));
        CHECK_EQ(got, 1);
    }
    CHECK_EQ(w.t.shared, 2);
    DATA(acq_x, 4, 16, -XTQ_EBUSY);
    CHECK_EQ(t[2], 0);
    DATA(rel_s, 2, 8, 0);
    LOCKCMD(XTQ__MPI_UNLOCK, XTQ__MPI_LOCK_SHARED, 3);
    CHECK_EQ(w.t.shared, 0);
    DATA(acq_x | rel_x, 4, 16, 0);
    CHECK_EQ(t[2], 1);
    /* malformed flags; flags on lock commands */
    DATA(0x30, 1, 0, -XTQ_EINVAL);
    DATA(XTQ__MPI_F_ACQUIRE(3), 1, 0, -XTQ_EINVAL);
    {
        struct xtq__mpi_args a = args(XTQ__MPI_LOCK, XTQ__MPI_LOCK_SHARED, 0, 0, 0, 0, 0);
        a.flags = acq_s;
        CHECK_ERR(xtq__mpi_task_run(&w.t, &a, 0, &granted, sizeof(granted)), -XTQ_EINVAL);
    }
    CHECK_EQ(w.t.exclusive, -1);
    CHECK_EQ(w.t.shared, 0);
#undef DATA
#undef LOCKCMD
    win_close(&w);
}

/* Misaligned payload and target: the same results as aligned. */
XTQ_TEST(task_unaligned)
{
    struct win w;
    uint8_t payload[8 * 16 + 1];
    long double ld[16], *lt;
    win_open(&w, 8 * 16 * 2 + 64);
    for (int i = 0; i < 16; i++) {
        double d = i + 0.5;
        memcpy(payload + 1 + 8 * i, &d, 8);
    }
    /* doubles at window offset 3 (misaligned), operand at payload + 1 */
    struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_DOUBLE, 3, 128, 16, 0);
    CHECK_OK(engine_run(&w, &a, payload + 1, 128, NULL, 0));
    a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_DOUBLE, 3, 128, 16, 0);
    CHECK_OK(engine_run(&w, &a, payload + 1, 128, NULL, 0));
    for (int i = 0; i < 16; i++) {
        double d;
        memcpy(&d, w.base + 3 + 8 * i, 8);
        CHECK(d == 2 * (i + 0.5));
    }
    win_close(&w);
    /* long double (16-byte alignment) at an 8-byte offset */
    win_open(&w, 16 * 17);
    for (int i = 0; i < 16; i++)
        ld[i] = i;
    a = args(XTQ__MPI_ACC, XTQ_OP_PROD, XTQ_DT_LONG_DOUBLE, 8, 16 * 16, 16, 0);
    lt = (long double *)(w.base + 8);
    for (int i = 0; i < 16; i++) {
        long double two = 2;
        memcpy((uint8_t *)lt + 16 * i, &two, sizeof(two));
    }
    CHECK_OK(engine_run(&w, &a, ld, sizeof(ld), NULL, 0));
    for (int i = 0; i < 16; i++) {
        long double v;
        memcpy(&v, (uint8_t *)lt + 16 * i, sizeof(v));
        CHECK(v == 2.0L * i);
    }
    win_close(&w);
}

/* Workers running tasks at once on one element, and on overlapping
 * ranges: the stripes keep every update (per-element atomicity). */
struct hammer {
    struct win *w;
    int iters;
    int id;
};

static void *hammer_thread(void *p)
{
    struct hammer *h = p;
    int64_t one[600];
    for (int i = 0; i < 600; i++)
        one[i] = 1;
    for (int i = 0; i < h->iters; i++) {
        /* one element, then a range spanning several stripes, shifted */
        struct xtq__mpi_args a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, 0, 8, 1, 0);
        CHECK_OK(engine_run(h->w, &a, one, 8, NULL, 0));
        uint64_t off = 8 * (uint64_t)(1 + (i + h->id) % 8);
        a = args(XTQ__MPI_ACC, XTQ_OP_SUM, XTQ_DT_INT64, 4096 - off, 600 * 8, 600, 0);
        CHECK_OK(engine_run(h->w, &a, one, sizeof(one), NULL, 0));
    }
    return NULL;
}

XTQ_TEST(task_atomicity)
{
    enum { THREADS = 4, ITERS = 20000 };
    struct win w;
    pthread_t th[THREADS];
    struct hammer h[THREADS];
    int64_t *t, total = 0;
    win_open(&w, 16384);
    t = (int64_t *)w.base;
    for (int i = 0; i < THREADS; i++) {
        h[i] = (struct hammer){&w, ITERS, i};
        CHECK(pthread_create(&th[i], NULL, hammer_thread, &h[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(t[0], THREADS * ITERS);
    for (int i = 1; i < 2048; i++)
        total += t[i];
    CHECK_EQ(total, (int64_t)THREADS * ITERS * 600);
    win_close(&w);
}

/* ---- datatypes ---------------------------------------------------------------- */

static struct xtq__mpi_layout *flat(MPI_Datatype t)
{
    int err = MPI_SUCCESS;
    struct xtq__mpi_layout *l = xtq__mpi_layout_get(t, &err);
    if (!l)
        XTQ_FAIL("layout: MPI error %d", err);
    return l;
}

XTQ_TEST(datatype_basic)
{
    static const struct {
        const char *name;
        int dt;
    } want[] = {
        {"int", XTQ_DT_INT32},   {"double", XTQ_DT_DOUBLE}, {"double_int", XTQ_DT_DOUBLE_INT},
        {"c_bool", XTQ_DT_BOOL}, {"byte", XTQ_DT_BYTE},     {"unsigned_long", XTQ_DT_UINT64}};
    MPI_Datatype types[] = {MPI_INT,    MPI_DOUBLE, MPI_DOUBLE_INT,
                            MPI_C_BOOL, MPI_BYTE,   MPI_UNSIGNED_LONG};

    PMPI_Init(NULL, NULL);
    CHECK_EQ(xtq__mpi_datatype_init(), MPI_SUCCESS);
    for (size_t i = 0; i < XMPI_ARRAY_SIZE(types); i++) {
        struct xtq__mpi_layout *l = flat(types[i]);
        if (l->dt != want[i].dt)
            XTQ_FAIL("%s maps to %d, expected %d", want[i].name, l->dt, want[i].dt);
        CHECK(l->contiguous);
        CHECK_EQ(l->size, xtq_datatype_size((enum xtq_datatype)l->dt));
        xtq__mpi_layout_put(l);
    }
    /* every predefined op, nothing else */
    MPI_Op ops[] = {MPI_SUM,  MPI_PROD, MPI_MAX,  MPI_MIN,    MPI_LAND,   MPI_LOR,     MPI_LXOR,
                    MPI_BAND, MPI_BOR,  MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    for (size_t i = 0; i < XMPI_ARRAY_SIZE(ops); i++)
        CHECK_EQ(xtq__mpi_op(ops[i]), (int)i);
    MPI_Op user;
    PMPI_Op_create((MPI_User_function *)(uintptr_t)abort, 1, &user);
    CHECK_EQ(xtq__mpi_op(user), -1);
    PMPI_Op_free(&user);
    xtq__mpi_datatype_fini();
    PMPI_Finalize();
}

struct span_list {
    int64_t off[64];
    uint64_t len[64];
    int n;
};

static void collect(void *arg, int64_t off, uint64_t len)
{
    struct span_list *s = arg;
    CHECK(s->n < 64);
    s->off[s->n] = off;
    s->len[s->n++] = len;
}

XTQ_TEST(datatype_derived)
{
    MPI_Datatype vec, idx, st, sub, subf, rsz, contig, hv;
    struct xtq__mpi_layout *l;
    struct span_list s;

    PMPI_Init(NULL, NULL);
    CHECK_EQ(xtq__mpi_datatype_init(), MPI_SUCCESS);
    /* vector: 3 blocks of 2 ints, stride 4 ints */
    PMPI_Type_vector(3, 2, 4, MPI_INT, &vec);
    PMPI_Type_commit(&vec);
    l = flat(vec);
    CHECK_EQ(l->dt, XTQ_DT_INT32);
    CHECK_EQ(l->nblocks, 3);
    CHECK_EQ(l->size, 24);
    CHECK(!l->contiguous);
    CHECK(l->blocks[1].off == 16 && l->blocks[1].len == 8 && l->blocks[2].pos == 16);
    /* data bytes 12..36 of 2 instances (extent 40): the last block of the
     * first meets the first block of the second, and they merge */
    memset(&s, 0, sizeof(s));
    xtq__mpi_spans(l, 12, 24, collect, &s);
    CHECK_EQ(s.n, 3);
    CHECK(s.off[0] == 20 && s.len[0] == 4);
    CHECK(s.off[1] == 32 && s.len[1] == 16);
    CHECK(s.off[2] == 56 && s.len[2] == 4);
    /* gather / scatter round trip */
    int src[40], packed[12], back[40];
    for (int i = 0; i < 40; i++) {
        src[i] = i;
        back[i] = -1;
    }
    xtq__mpi_gather(src, l, 0, 48, packed);
    int want_p[12] = {0, 1, 4, 5, 8, 9, 10, 11, 14, 15, 18, 19};
    for (int i = 0; i < 12; i++)
        CHECK_EQ(packed[i], want_p[i]);
    xtq__mpi_scatter(back, l, 0, 48, packed);
    for (int i = 0; i < 40; i++) {
        bool in = false;
        for (int k = 0; k < 12; k++)
            in |= want_p[k] == i;
        CHECK_EQ(back[i], in ? i : -1);
    }
    int64_t lo, hi;
    xtq__mpi_layout_bounds(l, 2, &lo, &hi);
    CHECK(lo == 0 && hi == 40 + 40);
    xtq__mpi_layout_put(l);

    /* indexed */
    int bl[3] = {1, 2, 1}, dsp[3] = {5, 0, 9};
    PMPI_Type_indexed(3, bl, dsp, MPI_DOUBLE, &idx);
    PMPI_Type_commit(&idx);
    l = flat(idx);
    CHECK_EQ(l->nblocks, 3);
    CHECK(l->blocks[0].off == 40 && l->blocks[1].off == 0 && l->blocks[1].len == 16);
    CHECK(l->true_lb == 0 && l->true_ub == 80);
    xtq__mpi_layout_put(l);

    /* struct of int and double: not one basic type */
    int sbl[2] = {1, 1};
    MPI_Aint sd[2] = {0, 8};
    MPI_Datatype sty[2] = {MPI_INT, MPI_DOUBLE};
    PMPI_Type_create_struct(2, sbl, sd, sty, &st);
    PMPI_Type_commit(&st);
    l = flat(st);
    CHECK_EQ(l->dt, XTQ__MPI_DT_MIXED);
    CHECK_EQ(l->size, 12);
    xtq__mpi_layout_put(l);

    /* subarray 2x3 at (1,1) of 4x5 ints, C and Fortran order */
    int sz[2] = {4, 5}, sb[2] = {2, 3}, stt[2] = {1, 1};
    PMPI_Type_create_subarray(2, sz, sb, stt, MPI_ORDER_C, MPI_INT, &sub);
    PMPI_Type_commit(&sub);
    l = flat(sub);
    CHECK_EQ(l->nblocks, 2);
    CHECK(l->blocks[0].off == 4 * (1 * 5 + 1) && l->blocks[0].len == 12);
    CHECK(l->blocks[1].off == 4 * (2 * 5 + 1));
    CHECK_EQ(l->extent, 4 * 20);
    xtq__mpi_layout_put(l);
    PMPI_Type_create_subarray(2, sz, sb, stt, MPI_ORDER_FORTRAN, MPI_INT, &subf);
    PMPI_Type_commit(&subf);
    l = flat(subf);
    /* Fortran: first index fastest: runs of 2 at columns 1, 2, 3 */
    CHECK_EQ(l->nblocks, 3);
    CHECK(l->blocks[0].off == 4 * (1 + 1 * 4) && l->blocks[0].len == 8);
    CHECK(l->blocks[2].off == 4 * (1 + 3 * 4));
    xtq__mpi_layout_put(l);

    /* resized: extent changes the stride, not the blocks */
    PMPI_Type_create_resized(MPI_INT, 0, 16, &rsz);
    PMPI_Type_commit(&rsz);
    l = flat(rsz);
    CHECK(l->nblocks == 1 && l->extent == 16 && !l->contiguous);
    xtq__mpi_layout_put(l);

    /* contiguous of contiguous is one block; hvector of it too when dense */
    PMPI_Type_contiguous(1000, MPI_DOUBLE, &contig);
    PMPI_Type_commit(&contig);
    l = flat(contig);
    CHECK(l->nblocks == 1 && l->contiguous && l->size == 8000);
    xtq__mpi_layout_put(l);
    PMPI_Type_create_hvector(4, 1, 8000, contig, &hv);
    PMPI_Type_commit(&hv);
    l = flat(hv);
    CHECK(l->nblocks == 1 && l->size == 32000);
    xtq__mpi_layout_put(l);

    /* the cache: the same layout again, and it survives the type */
    struct xtq__mpi_layout *a = flat(vec), *b = flat(vec);
    CHECK(a == b);
    PMPI_Type_free(&vec);
    CHECK_EQ(a->size, 24);
    xtq__mpi_layout_put(a);
    xtq__mpi_layout_put(b);

    PMPI_Type_free(&idx);
    PMPI_Type_free(&st);
    PMPI_Type_free(&sub);
    PMPI_Type_free(&subf);
    PMPI_Type_free(&rsz);
    PMPI_Type_free(&hv);
    PMPI_Type_free(&contig);
    xtq__mpi_datatype_fini();
    PMPI_Finalize();
}
