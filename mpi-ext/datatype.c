/*
 * MPI datatypes and operations, mapped onto <xtq/reduce.h>.
 *
 * Predefined types map to enum xtq_datatype (the one table of element
 * types every layer shares). Derived types are flattened once, through
 * PMPI_Type_get_envelope / get_contents, into byte blocks of one
 * instance, and cached on the datatype as an attribute (freed with it).
 * Operations still in flight hold their own reference, so a program may
 * free a datatype while they are.
 */
#include "xmpi.h"

#include <limits.h>

/* ---- predefined types and operations --------------------------------------- */

struct named_type {
    MPI_Datatype type;
    int dt;
};

static struct named_type named[96];
static unsigned nnamed;

static int int_dt(int size, bool is_signed)
{
    switch (size) {
    case 1:
        return is_signed ? XTQ_DT_INT8 : XTQ_DT_UINT8;
    case 2:
        return is_signed ? XTQ_DT_INT16 : XTQ_DT_UINT16;
    case 4:
        return is_signed ? XTQ_DT_INT32 : XTQ_DT_UINT32;
    case 8:
        return is_signed ? XTQ_DT_INT64 : XTQ_DT_UINT64;
    default:
        return XTQ__MPI_DT_MIXED;
    }
}

static int real_dt(int size)
{
    if (size == (int)sizeof(float))
        return XTQ_DT_FLOAT;
    if (size == (int)sizeof(double))
        return XTQ_DT_DOUBLE;
    return XTQ__MPI_DT_MIXED;
}

static int complex_dt(int size)
{
    if (size == 2 * (int)sizeof(float))
        return XTQ_DT_C_FLOAT_COMPLEX;
    if (size == 2 * (int)sizeof(double))
        return XTQ_DT_C_DOUBLE_COMPLEX;
    return XTQ__MPI_DT_MIXED;
}

static void add_named(MPI_Datatype type, int dt)
{
    if (type == MPI_DATATYPE_NULL || nnamed == XMPI_ARRAY_SIZE(named))
        return;
    named[nnamed].type = type;
    named[nnamed].dt = dt;
    nnamed++;
}

/* Fortran types exist in both MPIs' C headers; their sizes come from the
 * Fortran compiler the MPI was built with. */
static int type_size(MPI_Datatype t)
{
    int size = 0;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS)
        return 0;
    return size;
}

static void named_init(void)
{
    nnamed = 0;
    /* C integers: sizes from the C compiler. */
    add_named(MPI_CHAR, int_dt(sizeof(char), (char)-1 < 0));
    add_named(MPI_SIGNED_CHAR, XTQ_DT_INT8);
    add_named(MPI_UNSIGNED_CHAR, XTQ_DT_UINT8);
    add_named(MPI_SHORT, int_dt(sizeof(short), true));
    add_named(MPI_UNSIGNED_SHORT, int_dt(sizeof(short), false));
    add_named(MPI_INT, int_dt(sizeof(int), true));
    add_named(MPI_UNSIGNED, int_dt(sizeof(int), false));
    add_named(MPI_LONG, int_dt(sizeof(long), true));
    add_named(MPI_UNSIGNED_LONG, int_dt(sizeof(long), false));
    add_named(MPI_LONG_LONG_INT, int_dt(sizeof(long long), true));
    add_named(MPI_LONG_LONG, int_dt(sizeof(long long), true));
    add_named(MPI_UNSIGNED_LONG_LONG, int_dt(sizeof(long long), false));
    add_named(MPI_INT8_T, XTQ_DT_INT8);
    add_named(MPI_INT16_T, XTQ_DT_INT16);
    add_named(MPI_INT32_T, XTQ_DT_INT32);
    add_named(MPI_INT64_T, XTQ_DT_INT64);
    add_named(MPI_UINT8_T, XTQ_DT_UINT8);
    add_named(MPI_UINT16_T, XTQ_DT_UINT16);
    add_named(MPI_UINT32_T, XTQ_DT_UINT32);
    add_named(MPI_UINT64_T, XTQ_DT_UINT64);
    add_named(MPI_AINT, int_dt(sizeof(MPI_Aint), true));
    add_named(MPI_OFFSET, int_dt(sizeof(MPI_Offset), true));
    add_named(MPI_COUNT, int_dt(sizeof(MPI_Count), true));
    add_named(MPI_WCHAR, int_dt(sizeof(wchar_t), (wchar_t)-1 < 0));
    /* Reals, complex, logical, byte. */
    add_named(MPI_FLOAT, XTQ_DT_FLOAT);
    add_named(MPI_DOUBLE, XTQ_DT_DOUBLE);
    add_named(MPI_LONG_DOUBLE, XTQ_DT_LONG_DOUBLE);
    add_named(MPI_C_COMPLEX, XTQ_DT_C_FLOAT_COMPLEX);
    add_named(MPI_C_FLOAT_COMPLEX, XTQ_DT_C_FLOAT_COMPLEX);
    add_named(MPI_C_DOUBLE_COMPLEX, XTQ_DT_C_DOUBLE_COMPLEX);
    add_named(MPI_C_LONG_DOUBLE_COMPLEX, XTQ_DT_C_LONG_DOUBLE_COMPLEX);
    add_named(MPI_C_BOOL, XTQ_DT_BOOL);
    add_named(MPI_BYTE, XTQ_DT_BYTE);
    /* Value-index pairs (MINLOC / MAXLOC). */
    add_named(MPI_FLOAT_INT, XTQ_DT_FLOAT_INT);
    add_named(MPI_DOUBLE_INT, XTQ_DT_DOUBLE_INT);
    add_named(MPI_LONG_INT, XTQ_DT_LONG_INT);
    add_named(MPI_2INT, XTQ_DT_2INT);
    add_named(MPI_SHORT_INT, XTQ_DT_SHORT_INT);
    add_named(MPI_LONG_DOUBLE_INT, XTQ_DT_LONG_DOUBLE_INT);
    /* Fortran. LOGICAL is an integer of its size: the logical operations
     * on integers give 0 or 1, gfortran's .false. and .true. */
    add_named(MPI_INTEGER, int_dt(type_size(MPI_INTEGER), true));
    add_named(MPI_INTEGER1, XTQ_DT_INT8);
    add_named(MPI_INTEGER2, XTQ_DT_INT16);
    add_named(MPI_INTEGER4, XTQ_DT_INT32);
    add_named(MPI_INTEGER8, XTQ_DT_INT64);
    add_named(MPI_LOGICAL, int_dt(type_size(MPI_LOGICAL), true));
    add_named(MPI_REAL, real_dt(type_size(MPI_REAL)));
    add_named(MPI_DOUBLE_PRECISION, real_dt(type_size(MPI_DOUBLE_PRECISION)));
    add_named(MPI_REAL4, XTQ_DT_FLOAT);
    add_named(MPI_REAL8, XTQ_DT_DOUBLE);
    add_named(MPI_COMPLEX, complex_dt(type_size(MPI_COMPLEX)));
    add_named(MPI_DOUBLE_COMPLEX, complex_dt(type_size(MPI_DOUBLE_COMPLEX)));
    if (type_size(MPI_INTEGER) == (int)sizeof(int))
        add_named(MPI_2INTEGER, XTQ_DT_2INT);
}

/* enum xtq_datatype of a predefined type, XTQ__MPI_DT_MIXED for one the
 * layer cannot compute on (MPI_CHARACTER, MPI_PACKED, ...), or -2 when
 * `type` is not predefined. */
static int named_dt(MPI_Datatype type)
{
    for (unsigned i = 0; i < nnamed; i++)
        if (named[i].type == type)
            return named[i].dt;
    return -2;
}

int xtq__mpi_op(MPI_Op op)
{
    static const struct {
        MPI_Op op;
        enum xtq_op xop;
    } ops[] = {
        {MPI_SUM, XTQ_OP_SUM},         {MPI_PROD, XTQ_OP_PROD},     {MPI_MAX, XTQ_OP_MAX},
        {MPI_MIN, XTQ_OP_MIN},         {MPI_LAND, XTQ_OP_LAND},     {MPI_LOR, XTQ_OP_LOR},
        {MPI_LXOR, XTQ_OP_LXOR},       {MPI_BAND, XTQ_OP_BAND},     {MPI_BOR, XTQ_OP_BOR},
        {MPI_BXOR, XTQ_OP_BXOR},       {MPI_MAXLOC, XTQ_OP_MAXLOC}, {MPI_MINLOC, XTQ_OP_MINLOC},
        {MPI_REPLACE, XTQ_OP_REPLACE}, {MPI_NO_OP, XTQ_OP_NO_OP},
    };
    for (unsigned i = 0; i < XMPI_ARRAY_SIZE(ops); i++)
        if (ops[i].op == op)
            return (int)ops[i].xop;
    return -1;
}

/* ---- flattening ---------------------------------------------------------------- */

struct builder {
    struct xtq__mpi_span *b;
    size_t n, cap;
    int dt;      /* -2: nothing yet */
    bool failed; /* out of memory */
};

static void append(struct builder *bd, int64_t off, uint64_t len, int dt)
{
    if (len == 0)
        return;
    if (bd->dt == -2)
        bd->dt = dt;
    else if (bd->dt != dt)
        bd->dt = XTQ__MPI_DT_MIXED;
    if (bd->n && bd->b[bd->n - 1].off + (int64_t)bd->b[bd->n - 1].len == off) {
        bd->b[bd->n - 1].len += len;
        return;
    }
    if (bd->n == bd->cap) {
        size_t cap = bd->cap ? bd->cap * 2 : 16;
        struct xtq__mpi_span *nb = realloc(bd->b, cap * sizeof(*nb));
        if (!nb) {
            bd->failed = true;
            return;
        }
        bd->b = nb;
        bd->cap = cap;
    }
    bd->b[bd->n].off = off;
    bd->b[bd->n].len = len;
    bd->n++;
}

/* Append `reps` copies of `child` at disp, disp + stride, ... */
static void append_layout(struct builder *bd, const struct xtq__mpi_layout *c, int64_t disp,
                          uint64_t reps, int64_t stride)
{
    if (reps == 0)
        return;
    if (c->contiguous && stride == (int64_t)c->size) {
        append(bd, disp, reps * c->size, c->dt);
        return;
    }
    for (uint64_t r = 0; r < reps && !bd->failed; r++)
        for (size_t i = 0; i < c->nblocks; i++)
            append(bd, disp + (int64_t)r * stride + c->blocks[i].off, c->blocks[i].len, c->dt);
}

static struct xtq__mpi_layout *finish(struct builder *bd, MPI_Datatype type, int *err)
{
    struct xtq__mpi_layout *l;
    MPI_Aint lb, extent, tlb, textent;
    uint64_t pos = 0;

    if (bd->failed) {
        *err = MPI_ERR_NO_MEM;
        return NULL;
    }
    l = malloc(sizeof(*l) + bd->n * sizeof(l->blocks[0]));
    if (!l) {
        *err = MPI_ERR_NO_MEM;
        return NULL;
    }
    PMPI_Type_get_extent(type, &lb, &extent);
    PMPI_Type_get_true_extent(type, &tlb, &textent);
    atomic_init(&l->refs, 1);
    l->dt = bd->dt == -2 ? XTQ_DT_BYTE : bd->dt;
    l->elsize = l->dt >= 0 ? xtq_datatype_size((enum xtq_datatype)l->dt) : 1;
    l->extent = extent;
    l->true_lb = tlb;
    l->true_ub = tlb + textent;
    l->nblocks = bd->n;
    for (size_t i = 0; i < bd->n; i++) {
        l->blocks[i] = bd->b[i];
        l->blocks[i].pos = pos;
        pos += bd->b[i].len;
    }
    l->size = pos;
    l->contiguous =
        (bd->n == 0) || (bd->n == 1 && l->blocks[0].off == 0 && (MPI_Aint)l->size == extent);
    if (bd->n) {
        /* The blocks are the truth for where data goes (a pair type's
         * padding is part of its xtq element). */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (size_t i = 0; i < bd->n; i++) {
            lo = l->blocks[i].off < lo ? l->blocks[i].off : lo;
            hi = l->blocks[i].off + (int64_t)l->blocks[i].len > hi
                     ? l->blocks[i].off + (int64_t)l->blocks[i].len
                     : hi;
        }
        l->true_lb = lo;
        l->true_ub = hi;
    }
    free(bd->b);
    bd->b = NULL;
    return l;
}

static int flatten(MPI_Datatype type, struct builder *bd, int64_t disp, int depth);

/* Flatten a child datatype into a layout of its own (then replicated). */
static struct xtq__mpi_layout *child_layout(MPI_Datatype t, int depth, int *err)
{
    struct builder cb = {.dt = -2};
    int rc = flatten(t, &cb, 0, depth + 1);
    if (rc != MPI_SUCCESS) {
        free(cb.b);
        *err = rc;
        return NULL;
    }
    return finish(&cb, t, err);
}

static int flatten_named(MPI_Datatype type, struct builder *bd, int64_t disp)
{
    int dt = named_dt(type), size = type_size(type);
    if (dt >= 0)
        append(bd, disp, xtq_datatype_size((enum xtq_datatype)dt), dt);
    else
        append(bd, disp, (uint64_t)size, XTQ__MPI_DT_MIXED);
    return MPI_SUCCESS;
}

static void free_contents_types(MPI_Datatype *types, int n)
{
    for (int i = 0; i < n; i++) {
        int ni, na, nd, comb;
        PMPI_Type_get_envelope(types[i], &ni, &na, &nd, &comb);
        if (comb != MPI_COMBINER_NAMED)
            PMPI_Type_free(&types[i]);
    }
}

/* Subarray: the innermost dimension's run of subsizes elements, for every
 * index of the outer dimensions. */
static void flatten_subarray(struct builder *bd, const struct xtq__mpi_layout *c, int64_t disp,
                             int nd, const int *sizes, const int *subs, const int *starts,
                             bool c_order)
{
    int64_t stride[32], idx[32];
    int64_t ext = c->extent;
    int inner = c_order ? nd - 1 : 0;

    for (int k = 0; k < nd; k++) {
        int d = c_order ? nd - 1 - k : k; /* from the fastest dimension outwards */
        stride[d] = k == 0 ? 1 : stride[c_order ? d + 1 : d - 1] * sizes[c_order ? d + 1 : d - 1];
        idx[d] = 0;
    }
    for (int d = 0; d < nd; d++)
        if (subs[d] == 0)
            return;
    for (;;) {
        int64_t e = 0;
        for (int d = 0; d < nd; d++)
            e += (starts[d] + (d == inner ? 0 : idx[d])) * stride[d];
        append_layout(bd, c, disp + e * ext, (uint64_t)subs[inner], ext);
        /* next index of the outer dimensions (odometer) */
        int k = 1;
        for (; k < nd; k++) {
            int d = c_order ? nd - 1 - k : k;
            if (++idx[d] < subs[d])
                break;
            idx[d] = 0;
        }
        if (k == nd)
            break;
    }
}

static int flatten(MPI_Datatype type, struct builder *bd, int64_t disp, int depth)
{
    int ni, na, nd, comb, rc = MPI_SUCCESS;
    int *ints = NULL;
    MPI_Aint *aints = NULL;
    MPI_Datatype *types = NULL;
    struct xtq__mpi_layout *c = NULL;

    if (depth > 64)
        return MPI_ERR_TYPE;
    PMPI_Type_get_envelope(type, &ni, &na, &nd, &comb);
    if (comb == MPI_COMBINER_NAMED)
        return flatten_named(type, bd, disp);

    ints = malloc(sizeof(int) * (size_t)(ni + 1));
    aints = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
    if (!ints || !aints || !types) {
        rc = MPI_ERR_NO_MEM;
        goto out;
    }
    PMPI_Type_get_contents(type, ni, na, nd, ints, aints, types);

    /* Every combiner below repeats one child, except STRUCT. */
    if (comb != MPI_COMBINER_STRUCT && nd >= 1) {
        c = child_layout(types[0], depth, &rc);
        if (!c)
            goto out_types;
    }
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: /* the resized extent is read from the type itself */
        append_layout(bd, c, disp, 1, 0);
        break;
    case MPI_COMBINER_CONTIGUOUS:
        append_layout(bd, c, disp, (uint64_t)ints[0], c->extent);
        break;
    case MPI_COMBINER_VECTOR:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + (int64_t)i * ints[2] * c->extent, (uint64_t)ints[1],
                          c->extent);
        break;
    case MPI_COMBINER_HVECTOR:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + (int64_t)i * aints[0], (uint64_t)ints[1], c->extent);
        break;
    case MPI_COMBINER_INDEXED:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + (int64_t)ints[1 + ints[0] + i] * c->extent,
                          (uint64_t)ints[1 + i], c->extent);
        break;
    case MPI_COMBINER_HINDEXED:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + aints[i], (uint64_t)ints[1 + i], c->extent);
        break;
    case MPI_COMBINER_INDEXED_BLOCK:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + (int64_t)ints[2 + i] * c->extent, (uint64_t)ints[1],
                          c->extent);
        break;
    case MPI_COMBINER_HINDEXED_BLOCK:
        for (int i = 0; i < ints[0]; i++)
            append_layout(bd, c, disp + aints[i], (uint64_t)ints[1], c->extent);
        break;
    case MPI_COMBINER_SUBARRAY: {
        int ndims = ints[0];
        if (ndims < 1 || ndims > 32) {
            rc = MPI_ERR_TYPE;
            break;
        }
        flatten_subarray(bd, c, disp, ndims, &ints[1], &ints[1 + ndims], &ints[1 + 2 * ndims],
                         ints[1 + 3 * ndims] == MPI_ORDER_C);
        break;
    }
    case MPI_COMBINER_STRUCT:
        for (int i = 0; i < ints[0] && rc == MPI_SUCCESS; i++) {
            struct xtq__mpi_layout *ci = child_layout(types[i], depth, &rc);
            if (!ci)
                break;
            append_layout(bd, ci, disp + aints[i], (uint64_t)ints[1 + i], ci->extent);
            xtq__mpi_layout_put(ci);
        }
        break;
    default:
        /* DARRAY, F90 parameterised types: not flattened (docs/mpi.md). */
        xmpi_warn_once("datatype combiner %d is not supported on accelerated windows", comb);
        rc = MPI_ERR_TYPE;
        break;
    }
    if (c)
        xtq__mpi_layout_put(c);
out_types:
    free_contents_types(types, nd);
out:
    free(ints);
    free(aints);
    free(types);
    if (rc == MPI_SUCCESS && bd->failed)
        rc = MPI_ERR_NO_MEM;
    return rc;
}

struct xtq__mpi_layout *xtq__mpi_layout_build(MPI_Datatype type, int *err)
{
    struct builder bd = {.dt = -2};
    int rc;

    if (type == MPI_DATATYPE_NULL) {
        *err = MPI_ERR_TYPE;
        return NULL;
    }
    rc = flatten(type, &bd, 0, 0);
    if (rc != MPI_SUCCESS) {
        free(bd.b);
        *err = rc;
        return NULL;
    }
    return finish(&bd, type, err);
}

void xtq__mpi_layout_put(struct xtq__mpi_layout *l)
{
    if (l && atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1)
        free(l);
}

/* ---- the cache: an attribute on each derived datatype ------------------------- */

/* Predefined types: built once at init, never freed before finalize. */
static struct xtq__mpi_layout *named_layout[XMPI_ARRAY_SIZE(named)];

static int type_attr_delete(MPI_Datatype type, int keyval, void *val, void *extra)
{
    xtq__mpi_layout_put(val);
    return MPI_SUCCESS;
}

struct xtq__mpi_layout *xtq__mpi_layout_get(MPI_Datatype type, int *err)
{
    struct xtq__mpi_layout *l;
    void *val;
    int flag = 0;

    for (unsigned i = 0; i < nnamed; i++)
        if (named[i].type == type) {
            l = named_layout[i];
            atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
            return l;
        }
    if (type == MPI_DATATYPE_NULL) {
        *err = MPI_ERR_TYPE;
        return NULL;
    }
    if (xtq__mpi.type_keyval != MPI_KEYVAL_INVALID &&
        PMPI_Type_get_attr(type, xtq__mpi.type_keyval, &val, &flag) == MPI_SUCCESS && flag) {
        l = val;
        atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
        return l;
    }
    l = xtq__mpi_layout_build(type, err);
    if (!l)
        return NULL;
    /* Predefined types we do not map (MPI_PACKED, ...) take no attribute;
     * caching fails for them harmlessly. */
    if (xtq__mpi.type_keyval != MPI_KEYVAL_INVALID) {
        atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
        if (PMPI_Type_set_attr(type, xtq__mpi.type_keyval, l) != MPI_SUCCESS)
            atomic_fetch_sub_explicit(&l->refs, 1, memory_order_relaxed);
    }
    return l;
}

int xtq__mpi_datatype_init(void)
{
    int err = MPI_SUCCESS;

    named_init();
    for (unsigned i = 0; i < nnamed; i++) {
        named_layout[i] = xtq__mpi_layout_build(named[i].type, &err);
        if (!named_layout[i])
            return err;
    }
    return PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, type_attr_delete, &xtq__mpi.type_keyval,
                                   NULL);
}

void xtq__mpi_datatype_fini(void)
{
    for (unsigned i = 0; i < nnamed; i++) {
        xtq__mpi_layout_put(named_layout[i]);
        named_layout[i] = NULL;
    }
    nnamed = 0;
}

/* ---- walking count instances ------------------------------------------------------ */

/* The block holding data byte `within` of an instance (binary search). */
static size_t block_at(const struct xtq__mpi_layout *l, uint64_t within)
{
    size_t lo = 0, hi = l->nblocks;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (l->blocks[mid].pos <= within)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void xtq__mpi_spans(const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                    void (*fn)(void *arg, int64_t off, uint64_t len), void *arg)
{
    int64_t run_off = 0;
    uint64_t run_len = 0;

    if (n == 0 || l->size == 0)
        return;
    if (l->contiguous) {
        fn(arg, (int64_t)from, n);
        return;
    }
    uint64_t inst = from / l->size, within = from % l->size;
    size_t k = block_at(l, within);
    while (n) {
        const struct xtq__mpi_span *b = &l->blocks[k];
        uint64_t skip = within - b->pos, take = b->len - skip;
        int64_t off = (int64_t)inst * l->extent + b->off + (int64_t)skip;
        if (take > n)
            take = n;
        if (run_len && run_off + (int64_t)run_len == off) {
            run_len += take;
        } else {
            if (run_len)
                fn(arg, run_off, run_len);
            run_off = off;
            run_len = take;
        }
        n -= take;
        within += take;
        if (++k == l->nblocks) {
            k = 0;
            within = 0;
            inst++;
        }
    }
    if (run_len)
        fn(arg, run_off, run_len);
}

struct copy_arg {
    uint8_t *buf;
    uint8_t *packed;
    bool gather;
};

static void copy_span(void *arg, int64_t off, uint64_t len)
{
    struct copy_arg *c = arg;
    if (c->gather)
        memcpy(c->packed, c->buf + off, len);
    else
        memcpy(c->buf + off, c->packed, len);
    c->packed += len;
}

void xtq__mpi_gather(const void *buf, const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                     void *packed)
{
    struct copy_arg c = {(uint8_t *)(uintptr_t)buf, packed, true};
    xtq__mpi_spans(l, from, n, copy_span, &c);
}

void xtq__mpi_scatter(void *buf, const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                      const void *packed)
{
    struct copy_arg c = {buf, (uint8_t *)(uintptr_t)packed, false};
    xtq__mpi_spans(l, from, n, copy_span, &c);
}

void xtq__mpi_layout_bounds(const struct xtq__mpi_layout *l, uint64_t count, int64_t *lo,
                            int64_t *hi)
{
    int64_t last = count ? (int64_t)(count - 1) * l->extent : 0;
    *lo = l->true_lb < l->true_lb + last ? l->true_lb : l->true_lb + last;
    *hi = l->true_ub > l->true_ub + last ? l->true_ub : l->true_ub + last;
}
