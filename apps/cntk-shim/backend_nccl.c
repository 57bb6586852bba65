/*
 * The nccl back-end: ncclAllReduce on device buffers, the reference a
 * GPU user compares XTQ with (issue 14: "the ratio to NCCL"). NCCL is
 * loaded with dlopen("libnccl.so.2") at open, so the build needs no NCCL
 * headers and a machine without NCCL reports why (apps/nccl_dl.h declares
 * the few types and calls used). The unique id travels over MPI (a duplicate of
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../nccl_dl.h" /* shared by the apps */

/* The library, loaded once per process and kept (apps/nccl_dl.h). */
static struct nccl_dl nccl;
static char nccl_why[256];

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
    if (loaded < 0)
        loaded = nccl_dl_open(&nccl, nccl_why, sizeof(nccl_why)) == 0;
    return loaded;
}

static int nccl_available(const char **why)
{
    if (!shim__cuda_available(why))
        return 0;
    if (!nccl_load()) {
        *why = nccl_why;
        return 0;
    }
    return 1;
}

static const char *nccl_strerror(int rc)
{
    return nccl_dl_strerror(&nccl, rc);
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
    return nccl_dl_type(type) >= 0 && nccl_dl_op(op) >= 0;
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
    int nrc = nccl.all_reduce(send, recv, count, nccl_dl_type(type), nccl_dl_op(op), be->nc, be->stream);
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
