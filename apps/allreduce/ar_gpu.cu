/*
 * xtq_allreduce's GPU side (ar_gpu.h) with the CUDA runtime: the
 * reduction kernel of the HSA-mode path (the reductions of
 * <xtq/coll_cuda.cuh>, as libxtq_coll's GPU tasks run them), copies, and
 * NCCL loaded with dlopen (apps/nccl_dl.h: no NCCL header is needed to
 * build).
 *
 * Everything runs on one non-blocking stream of the path: the legacy
 * default stream would wait for the CUDA agent's persistent processor.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include <xtq/coll_cuda.cuh>

#include "ar_gpu.h"
#include "../nccl_dl.h" /* shared by the apps */

static cudaStream_t stream;
static char err[256];
static char name[320];

static int fail(const char *what, cudaError_t e)
{
    snprintf(err, sizeof(err), "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

extern "C" const char *ar_gpu_error(void)
{
    return err;
}

extern "C" const char *ar_gpu_name(void)
{
    return name;
}

extern "C" int ar_gpu_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" int ar_gpu_open(int local_rank, char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return -1;
    }
    int dev = local_rank % n;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(why, len, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        return -1;
    }
    snprintf(name, sizeof(name), "%s (device %d of %d)", prop.name, dev, n);
    return 0;
}

extern "C" void *ar_gpu_malloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fail("cudaMalloc", e);
        return NULL;
    }
    return p;
}

extern "C" void ar_gpu_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" void *ar_gpu_host_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped);
    if (e != cudaSuccess) {
        fail("cudaHostAlloc", e);
        return NULL;
    }
    return p;
}

extern "C" void ar_gpu_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

static int copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? 0 : fail("cudaMemcpyAsync", e);
}

extern "C" int ar_gpu_h2d(void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int ar_gpu_d2h(void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int ar_gpu_d2d(void *dst, const void *src, size_t bytes)
{
    return copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
}

__global__ void ar_reduce_kernel(void *dst, const void *src, uint64_t count, int type, int op)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (uint64_t)gridDim.x * blockDim.x)
        xtq_cuda_reduce_elem(op, type, dst, src, i);
}

extern "C" int ar_gpu_reduce(void *dst, const void *src, uint64_t count, int type, int op,
                             int wait)
{
    if (!xtq_cuda_reduce_supported(op, type)) {
        snprintf(err, sizeof(err), "the GPU has no %s on %s", xtq_op_name((enum xtq_op)op),
                 xtq_datatype_name((enum xtq_datatype)type));
        return -1;
    }
    if (count == 0)
        return 0;
    uint64_t blocks = (count + 255) / 256;
    ar_reduce_kernel<<<(unsigned)(blocks > 65535 ? 65535 : blocks), 256, 0, stream>>>(
        dst, src, count, type, op);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && wait)
        e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? 0 : fail("reduction kernel", e);
}

extern "C" int ar_gpu_sync(void)
{
    cudaError_t e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

/* ---- NCCL through dlopen (apps/nccl_dl.h) --------------------------------------- */

static struct nccl_dl nccl;
static nccl_comm_t nccl_comm;

extern "C" int ar_nccl_open(char *why, size_t len)
{
    return nccl_dl_open(&nccl, why, len);
}

extern "C" int ar_nccl_unique_id_size(void)
{
    return (int)sizeof(nccl_unique_id);
}

static int nccl_fail(const char *what, int rc)
{
    snprintf(err, sizeof(err), "%s: %s", what, nccl_dl_strerror(&nccl, rc));
    return -1;
}

extern "C" int ar_nccl_get_unique_id(void *id)
{
    int rc = nccl.get_unique_id((nccl_unique_id *)id);
    return rc == NCCL_SUCCESS ? 0 : nccl_fail("ncclGetUniqueId", rc);
}

extern "C" int ar_nccl_init(int nranks, const void *id, int rank)
{
    nccl_unique_id u;
    memcpy(&u, id, sizeof(u));
    int rc = nccl.comm_init_rank(&nccl_comm, nranks, u, rank);
    return rc == NCCL_SUCCESS ? 0 : nccl_fail("ncclCommInitRank", rc);
}

extern "C" int ar_nccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, int type, int op)
{
    int t = nccl_dl_type(type), o = nccl_dl_op(op);
    if (t < 0 || o < 0)
        return -1;
    int rc = nccl.all_reduce(sendbuf, recvbuf, count, t, o, nccl_comm, stream);
    if (rc != NCCL_SUCCESS)
        return nccl_fail("ncclAllReduce", rc);
    /* A blocking call, as MPI_Allreduce is: the time includes the wait. */
    cudaError_t e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

extern "C" void ar_nccl_close(void)
{
    if (nccl_comm)
        nccl.comm_destroy(nccl_comm);
    if (nccl.lib)
        dlclose(nccl.lib);
    memset(&nccl, 0, sizeof(nccl));
    nccl_comm = NULL;
}
