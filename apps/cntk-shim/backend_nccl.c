/*
 * The nccl back-end: ncclAllReduce on device buffers, the reference a
 * GPU user compares XTQ with (issue 14: "the ratio to NCCL"). NCCL is
 * loaded with dlopen("libnccl.so.2") at open, so the build needs no NCCL
 * headers and a machine without NCCL reports why; the few types and
 * calls used are declared here (NCCL 2.x ABI: a 128-byte unique id, the
 * enums of nccl.h). The unique id travels over MPI (a duplicate of
 * attr->mpi_comm, as the mpi back-end's). NCCL's communicator is made at
 * the first device collective, with the GPU the caller made current by
 * then (xtq_train picks its rank's GPU after the shim opens). Collectives
 * run on a stream of the back-end's own, created blocking, so that they
 * follow the work the caller queued on the legacy default stream (as the
 * core's staging copies do); each request is an event recorded after its
 * collective. Host buffers (the core's own small exchanges, or a caller's)
 * go through a blocking MPI_Allreduce on the same communicator.
 */
#include <mpi.h>

#include "shim_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

typedef struct {
    char internal[128];
} nccl_unique_id;
typedef struct nccl_comm *nccl_comm_t;

/* ncclDataType_t and ncclRedOp_t (nccl.h, 2.x). */
enum {
    NCCL_INT8 = 0,
    NCCL_UINT8 = 1,
    NCCL_INT32 = 2,
    NCCL_UINT32 = 3,
    NCCL_INT64 = 4,
    NCCL_UINT64 = 5,
    NCCL_FLOAT16 = 6,
    NCCL_FLOAT32 = 7,
    NCCL_FLOAT64 = 8,
    NCCL_BFLOAT16 = 9,
};
enum { NCCL_SUM = 0, NCCL_PROD = 1, NCCL_MAX = 2, NCCL_MIN = 3 };

/* The library, loaded once per process and kept. */
static struct {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*comm_destroy)(nccl_comm_t);
    const char *(*error_string)(int);
    const char *why;
} nccl;

struct nccl_backend {
    struct shim_backend base;
    MPI_Comm comm;
    nccl_comm_t nc;
    cudaStream_t stream;
};

_Static_assert(sizeof(cudaEvent_t) <= sizeof(shim_breq_t), "an event fits a shim request");

static int nccl_load(void)
{
    static int loaded = -1;
    if (loaded >= 0)
        return loaded;
    loaded = 0;
    nccl.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib) {
        nccl.why = "libnccl.so.2 was not found (install NCCL 2.x)";
        return 0;
    }
    nccl.get_unique_id = (int (*)(nccl_unique_id *))dlsym(nccl.lib, "ncclGetUniqueId");
    nccl.comm_init_rank =
        (int (*)(nccl_comm_t *, int, nccl_unique_id, int))dlsym(nccl.lib, "ncclCommInitRank");
    nccl.all_reduce = (int (*)(const void *, void *, size_t, int, int, nccl_comm_t,
                               cudaStream_t))dlsym(nccl.lib, "ncclAllReduce");
    nccl.comm_destroy = (int (*)(nccl_comm_t))dlsym(nccl.lib, "ncclCommDestroy");
    nccl.error_string = (const char *(*)(int))dlsym(nccl.lib, "ncclGetErrorString");
    if (!nccl.get_unique_id || !nccl.comm_init_rank || !nccl.all_reduce || !nccl.comm_destroy) {
        nccl.why = "libnccl.so.2 lacks ncclGetUniqueId, ncclCommInitRank, ncclAllReduce or "
                   "ncclCommDestroy";
        return 0;
    }
    loaded = 1;
    return 1;
}

static int nccl_available(const char **why)
{
    if (!shim__cuda_available(why))
        return 0;
    if (!nccl_load()) {
        *why = nccl.why;
        return 0;
    }
    return 1;
}

static int nccl_type(enum xtq_datatype t)
{
    switch (t) {
    case XTQ_DT_INT8:
        return NCCL_INT8;
    case XTQ_DT_UINT8:
        return NCCL_UINT8;
    case XTQ_DT_INT32:
        return NCCL_INT32;
    case XTQ_DT_UINT32:
        return NCCL_UINT32;
    case XTQ_DT_INT64:
        return NCCL_INT64;
    case XTQ_DT_UINT64:
        return NCCL_UINT64;
    case XTQ_DT_FLOAT16:
        return NCCL_FLOAT16;
    case XTQ_DT_BFLOAT16:
        return NCCL_BFLOAT16;
    case XTQ_DT_FLOAT:
        return NCCL_FLOAT32;
    case XTQ_DT_DOUBLE:
        return NCCL_FLOAT64;
    default:
        return -1;
    }
}

static int nccl_op(enum xtq_op op)
{
    switch (op) {
    case XTQ_OP_SUM:
        return NCCL_SUM;
    case XTQ_OP_PROD:
        return NCCL_PROD;
    case XTQ_OP_MAX:
        return NCCL_MAX;
    case XTQ_OP_MIN:
        return NCCL_MIN;
    default:
        return -1;
    }
}

static const char *nccl_strerror(int rc)
{
    return nccl.error_string ? nccl.error_string(rc) : "NCCL error";
}

static int nccl_close(struct shim_backend *base)
{
    struct nccl_backend *be = container_of(base, struct nccl_backend, base);
    if (be->stream)
        cudaStreamSynchronize(be->stream);
    if (be->nc)
        nccl.comm_destroy(be->nc);
    if (be->stream)
        cudaStreamDestroy(be->stream);
    shim__mpi_comm_close(&be->comm);
    free(be);
    return 0;
}

static int nccl_open(const xtq_shim_attr_t *attr, struct shim_backend **out, char *err,
                     size_t errlen)
{
    const char *why = "";
    if (!nccl_available(&why)) {
        snprintf(err, errlen, "%s", why);
        return -XTQ_ENOSYS;
    }
    struct nccl_backend *be = calloc(1, sizeof(*be));
    if (!be) {
        snprintf(err, errlen, "out of memory");
        return -XTQ_ENOMEM;
    }
    int rc = shim__mpi_comm_open(attr, &be->comm, &be->base, err, errlen);
    if (rc) {
        free(be);
        return rc;
    }
    be->base.ops = &shim__nccl_ops;
    be->base.caps = SHIM_CAP_DEVICE_MEM;
    *out = &be->base;
    return 0;
}

/* NCCL's communicator on the current GPU, at the first device collective
 * (every worker issues collectives in the same order: all are here). */
static int nccl_connect(struct nccl_backend *be)
{
    /* Every rank learns whether rank 0 got an id, so none waits in
     * ncclCommInitRank for a rank that gave up. */
    nccl_unique_id id;
    memset(&id, 0, sizeof(id));
    int ok = be->base.rank != 0 || nccl.get_unique_id(&id) == 0;
    if (MPI_Bcast(&ok, 1, MPI_INT, 0, be->comm) != MPI_SUCCESS || !ok ||
        MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, be->comm) != MPI_SUCCESS) {
        fprintf(stderr, "xtq_shim: ncclGetUniqueId on rank 0, or its broadcast, failed\n");
        return -XTQ_EIO;
    }
    cudaError_t ce = cudaStreamCreate(&be->stream);
    if (ce != cudaSuccess) {
        fprintf(stderr, "xtq_shim: cudaStreamCreate: %s\n", cudaGetErrorString(ce));
        be->stream = NULL;
        return -XTQ_EIO;
    }
    int nrc = nccl.comm_init_rank(&be->nc, (int)be->base.size, id, (int)be->base.rank);
    if (nrc != 0) {
        fprintf(stderr, "xtq_shim: ncclCommInitRank: %s (one GPU per rank: make the rank's GPU "
                        "current before its first aggregate)\n",
                nccl_strerror(nrc));
        be->nc = NULL;
        return -XTQ_EIO;
    }
    return 0;
}

static int nccl_supported(struct shim_backend *be, enum xtq_datatype type, enum xtq_op op)
{
    (void)be;
    return nccl_type(type) >= 0 && nccl_op(op) >= 0;
}

static int nccl_iallreduce(struct shim_backend *base, const void *send, void *recv, size_t count,
                           enum xtq_datatype type, enum xtq_op op, enum xtq_shim_mem mem,
                           shim_breq_t *req)
{
    struct nccl_backend *be = container_of(base, struct nccl_backend, base);
    cudaEvent_t ev = NULL;
    memset(req, 0, sizeof(*req)); /* no event: done */
    if (mem != XTQ_SHIM_MEM_CUDA)
        return shim__mpi_allreduce(be->comm, send, recv, count, type, op);
    if (!be->nc) {
        int rc = nccl_connect(be);
        if (rc)
            return rc;
    }
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
        return -XTQ_EIO;
    int nrc = nccl.all_reduce(send, recv, count, nccl_type(type), nccl_op(op), be->nc, be->stream);
    if (nrc != 0 || cudaEventRecord(ev, be->stream) != cudaSuccess) {
        if (nrc != 0)
            fprintf(stderr, "xtq_shim: ncclAllReduce: %s\n", nccl_strerror(nrc));
        cudaEventDestroy(ev);
        return -XTQ_EIO;
    }
    memcpy(req->bytes, &ev, sizeof(ev));
    return 0;
}

static cudaEvent_t req_event(const shim_breq_t *r)
{
    cudaEvent_t ev;
    memcpy(&ev, r->bytes, sizeof(ev));
    return ev;
}

static int nccl_testall(struct shim_backend *be, shim_breq_t *reqs, size_t n, int *done)
{
    (void)be;
    *done = 0;
    for (size_t i = 0; i < n; i++) {
        cudaError_t e = req_event(&reqs[i]) ? cudaEventQuery(req_event(&reqs[i])) : cudaSuccess;
        if (e == cudaErrorNotReady)
            return 0;
        if (e != cudaSuccess)
            return -XTQ_EIO;
    }
    for (size_t i = 0; i < n; i++)
        if (req_event(&reqs[i]))
            cudaEventDestroy(req_event(&reqs[i]));
    *done = 1;
    return 0;
}

static int nccl_waitall(struct shim_backend *be, shim_breq_t *reqs, size_t n)
{
    (void)be;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        cudaEvent_t ev = req_event(&reqs[i]);
        if (!ev)
            continue;
        if (cudaEventSynchronize(ev) != cudaSuccess)
            rc = -XTQ_EIO;
        cudaEventDestroy(ev);
    }
    return rc;
}

static int nccl_barrier(struct shim_backend *base)
{
    struct nccl_backend *be = container_of(base, struct nccl_backend, base);
    if (be->stream && cudaStreamSynchronize(be->stream) != cudaSuccess)
        return -XTQ_EIO;
    return MPI_Barrier(be->comm) == MPI_SUCCESS ? 0 : -XTQ_EIO;
}

const struct shim_backend_ops shim__nccl_ops = {
    .name = "nccl",
    .available = nccl_available,
    .open = nccl_open,
    .close = nccl_close,
    .supported = nccl_supported,
    .iallreduce = nccl_iallreduce,
    .testall = nccl_testall,
    .waitall = nccl_waitall,
    .barrier = nccl_barrier,
};
