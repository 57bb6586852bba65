/*
 * The mpi back-end: MPI_Iallreduce on a duplicate of the caller's
 * communicator (MPI_COMM_WORLD by default), errors returned rather than
 * fatal. libxtq's types map to MPI's predefined ones; float16 and
 * bfloat16, which MPI 3.1 lacks, travel as 2-byte types reduced by user
 * operations that call xtq_reduce_local.
 */
#include <mpi.h>

#include "shim_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(shim_breq_t), "MPI_Request fits a shim request");

struct mpi_backend {
    struct shim_backend base;
    MPI_Comm comm;
};

/* 2-byte types and their user operations, shared by every communicator of
 * the process (a user function has no context pointer). */
static MPI_Datatype half_types[2] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
static MPI_Op half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
static const enum xtq_op half_op_ids[4] = {XTQ_OP_SUM, XTQ_OP_PROD, XTQ_OP_MAX, XTQ_OP_MIN};
static unsigned half_users;
static int we_initialized;

static enum xtq_datatype half_type_of(MPI_Datatype dt)
{
    return dt == half_types[1] ? XTQ_DT_BFLOAT16 : XTQ_DT_FLOAT16;
}

#define HALF_FN(name, xop)                                                                         \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt)                            \
    {                                                                                              \
        xtq_reduce_local(xop, half_type_of(*dt), inout, in, (size_t)*len);                         \
    }
HALF_FN(half_sum, XTQ_OP_SUM)
HALF_FN(half_prod, XTQ_OP_PROD)
HALF_FN(half_max, XTQ_OP_MAX)
HALF_FN(half_min, XTQ_OP_MIN)
static MPI_User_function *const half_fns[4] = {half_sum, half_prod, half_max, half_min};

static MPI_Datatype mpi_type(enum xtq_datatype t)
{
    switch (t) {
    case XTQ_DT_INT8:
        return MPI_INT8_T;
    case XTQ_DT_UINT8:
        return MPI_UINT8_T;
    case XTQ_DT_INT16:
        return MPI_INT16_T;
    case XTQ_DT_UINT16:
        return MPI_UINT16_T;
    case XTQ_DT_INT32:
        return MPI_INT32_T;
    case XTQ_DT_UINT32:
        return MPI_UINT32_T;
    case XTQ_DT_INT64:
        return MPI_INT64_T;
    case XTQ_DT_UINT64:
        return MPI_UINT64_T;
    case XTQ_DT_FLOAT16:
        return half_types[0];
    case XTQ_DT_BFLOAT16:
        return half_types[1];
    case XTQ_DT_FLOAT:
        return MPI_FLOAT;
    case XTQ_DT_DOUBLE:
        return MPI_DOUBLE;
    case XTQ_DT_LONG_DOUBLE:
        return MPI_LONG_DOUBLE;
    case XTQ_DT_C_FLOAT_COMPLEX:
        return MPI_C_FLOAT_COMPLEX;
    case XTQ_DT_C_DOUBLE_COMPLEX:
        return MPI_C_DOUBLE_COMPLEX;
    case XTQ_DT_C_LONG_DOUBLE_COMPLEX:
        return MPI_C_LONG_DOUBLE_COMPLEX;
    case XTQ_DT_BOOL:
        return MPI_C_BOOL;
    case XTQ_DT_BYTE:
        return MPI_BYTE;
    case XTQ_DT_FLOAT_INT:
        return MPI_FLOAT_INT;
    case XTQ_DT_DOUBLE_INT:
        return MPI_DOUBLE_INT;
    case XTQ_DT_LONG_INT:
        return MPI_LONG_INT;
    case XTQ_DT_2INT:
        return MPI_2INT;
    case XTQ_DT_SHORT_INT:
        return MPI_SHORT_INT;
    case XTQ_DT_LONG_DOUBLE_INT:
        return MPI_LONG_DOUBLE_INT;
    default:
        return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(enum xtq_op op, enum xtq_datatype t)
{
    if (t == XTQ_DT_FLOAT16 || t == XTQ_DT_BFLOAT16) {
        for (int i = 0; i < 4; i++)
            if (half_op_ids[i] == op)
                return half_ops[i];
        return MPI_OP_NULL;
    }
    switch (op) {
    case XTQ_OP_SUM:
        return MPI_SUM;
    case XTQ_OP_PROD:
        return MPI_PROD;
    case XTQ_OP_MAX:
        return MPI_MAX;
    case XTQ_OP_MIN:
        return MPI_MIN;
    case XTQ_OP_LAND:
        return MPI_LAND;
    case XTQ_OP_LOR:
        return MPI_LOR;
    case XTQ_OP_LXOR:
        return MPI_LXOR;
    case XTQ_OP_BAND:
        return MPI_BAND;
    case XTQ_OP_BOR:
        return MPI_BOR;
    case XTQ_OP_BXOR:
        return MPI_BXOR;
    case XTQ_OP_MAXLOC:
        return MPI_MAXLOC;
    case XTQ_OP_MINLOC:
        return MPI_MINLOC;
    default:
        return MPI_OP_NULL; /* REPLACE and NO_OP are not reductions */
    }
}

static int mpi_error(int code, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    fprintf(stderr, "xtq_shim(mpi): %s: %s\n", what, msg);
    return -XTQ_EIO;
}

static void finalize_at_exit(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

static int mpi_available(const char **why)
{
    *why = "";
    return 1;
}

static int half_types_create(void)
{
    if (half_users++)
        return 0;
    for (int i = 0; i < 2; i++) {
        MPI_Type_contiguous(2, MPI_BYTE, &half_types[i]);
        MPI_Type_commit(&half_types[i]);
    }
    for (int i = 0; i < 4; i++)
        MPI_Op_create(half_fns[i], 1, &half_ops[i]);
    return 0;
}

static void half_types_release(void)
{
    int fin = 0;
    if (--half_users)
        return;
    MPI_Finalized(&fin);
    if (fin)
        return;
    for (int i = 0; i < 2; i++)
        MPI_Type_free(&half_types[i]);
    for (int i = 0; i < 4; i++)
        MPI_Op_free(&half_ops[i]);
}

int shim__mpi_comm_open(const xtq_shim_attr_t *attr, MPI_Comm *comm, struct shim_backend *base,
                        char *err, size_t errlen)
{
    int init = 0, fin = 0, rc;
    MPI_Finalized(&fin);
    if (fin) {
        snprintf(err, errlen, "MPI was already finalized");
        return -XTQ_EFINALIZED;
    }
    MPI_Initialized(&init);
    if (!init) {
        int provided;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            snprintf(err, errlen, "MPI_Init_thread failed");
            return -XTQ_EIO;
        }
        if (!we_initialized)
            atexit(finalize_at_exit);
        we_initialized = 1;
    }
    MPI_Comm parent = MPI_COMM_WORLD;
    if ((attr->field_mask & XTQ_SHIM_ATTR_FIELD_MPI_COMM) && attr->mpi_comm)
        parent = *(const MPI_Comm *)attr->mpi_comm;
    rc = MPI_Comm_dup(parent, comm);
    if (rc != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Comm_dup failed");
        return -XTQ_EIO;
    }
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(*comm, &rank);
    MPI_Comm_size(*comm, &size);
    base->rank = (size_t)rank;
    base->size = (size_t)size;
    return 0;
}

void shim__mpi_comm_close(MPI_Comm *comm)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Comm_free(comm);
}

int shim__mpi_allreduce(MPI_Comm comm, const void *send, void *recv, size_t count,
                        enum xtq_datatype type, enum xtq_op op)
{
    MPI_Datatype dt = mpi_type(type);
    MPI_Op o = dt == MPI_DATATYPE_NULL ? MPI_OP_NULL : mpi_op(op, type);
    if (o == MPI_OP_NULL)
        return -XTQ_ENOSYS;
    if (count > (size_t)INT32_MAX)
        return -XTQ_EOVERFLOW;
    int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, dt, o, comm);
    return rc == MPI_SUCCESS ? 0 : mpi_error(rc, "MPI_Allreduce");
}

static int mpi_open(const xtq_shim_attr_t *attr, struct shim_backend **out, char *err,
                    size_t errlen)
{
    struct mpi_backend *be = calloc(1, sizeof(*be));
    if (!be) {
        snprintf(err, errlen, "out of memory");
        return -XTQ_ENOMEM;
    }
    int rc = shim__mpi_comm_open(attr, &be->comm, &be->base, err, errlen);
    if (rc) {
        free(be);
        return rc;
    }
    be->base.ops = &shim__mpi_ops;
    be->base.caps = 0; /* host memory only: the core stages device buffers */
    half_types_create();
    *out = &be->base;
    return 0;
}

static int mpi_close(struct shim_backend *base)
{
    struct mpi_backend *be = container_of(base, struct mpi_backend, base);
    shim__mpi_comm_close(&be->comm);
    half_types_release();
    free(be);
    return 0;
}

static int mpi_supported(struct shim_backend *be, enum xtq_datatype type, enum xtq_op op)
{
    return mpi_type(type) != MPI_DATATYPE_NULL && mpi_op(op, type) != MPI_OP_NULL;
}

static int mpi_iallreduce(struct shim_backend *base, const void *send, void *recv, size_t count,
                          enum xtq_datatype type, enum xtq_op op, enum xtq_shim_mem mem,
                          shim_breq_t *req)
{
    struct mpi_backend *be = container_of(base, struct mpi_backend, base);
    MPI_Request *r = (MPI_Request *)req->bytes;
    if (mem != XTQ_SHIM_MEM_HOST)
        return -XTQ_ENOSYS;
    if (count > (size_t)INT32_MAX)
        return -XTQ_EOVERFLOW; /* MPI 3.1 counts are ints */
    int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(type),
                            mpi_op(op, type), be->comm, r);
    return rc == MPI_SUCCESS ? 0 : mpi_error(rc, "MPI_Iallreduce");
}

/* MPI wants an array of MPI_Request; ours are unions. */
#define REQ_STACK 16

static int mpi_reqs_call(shim_breq_t *reqs, size_t n, int *done)
{
    MPI_Request stack[REQ_STACK], *r = n <= REQ_STACK ? stack : malloc(n * sizeof(*r));
    if (!r)
        return -XTQ_ENOMEM;
    for (size_t i = 0; i < n; i++)
        memcpy(&r[i], reqs[i].bytes, sizeof(MPI_Request));
    int rc;
    if (done)
        rc = MPI_Testall((int)n, r, done, MPI_STATUSES_IGNORE);
    else
        rc = MPI_Waitall((int)n, r, MPI_STATUSES_IGNORE);
    for (size_t i = 0; i < n; i++)
        memcpy(reqs[i].bytes, &r[i], sizeof(MPI_Request));
    if (r != stack)
        free(r);
    return rc == MPI_SUCCESS ? 0 : mpi_error(rc, done ? "MPI_Testall" : "MPI_Waitall");
}

static int mpi_testall(struct shim_backend *be, shim_breq_t *reqs, size_t n, int *done)
{
    *done = 0;
    return mpi_reqs_call(reqs, n, done);
}

static int mpi_waitall(struct shim_backend *be, shim_breq_t *reqs, size_t n)
{
    return mpi_reqs_call(reqs, n, NULL);
}

static int mpi_barrier(struct shim_backend *base)
{
    struct mpi_backend *be = container_of(base, struct mpi_backend, base);
    int rc = MPI_Barrier(be->comm);
    return rc == MPI_SUCCESS ? 0 : mpi_error(rc, "MPI_Barrier");
}

const struct shim_backend_ops shim__mpi_ops = {
    .name = "mpi",
    .available = mpi_available,
    .open = mpi_open,
    .close = mpi_close,
    .supported = mpi_supported,
    .iallreduce = mpi_iallreduce,
    .testall = mpi_testall,
    .waitall = mpi_waitall,
    .barrier = mpi_barrier,
};
