/*
 * xtq_allreduce's GPU side (ar_gpu.h) with the CUDA runtime: the
 * reduction kernel of the HSA-mode path (the reductions of
 * <xtq/coll_cuda.cuh>, as libxtq_coll's GPU tasks run them), copies, and
 * NCCL loaded with dlopen. NCCL's few types and calls are declared here
 * (NCCL 2.x ABI: ncclUniqueId is 128 bytes; the enums below are nccl.h's
 * values), so no NCCL header is needed to build.
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

/* ---- NCCL through dlopen ------------------------------------------------------ */

typedef struct {
    char internal[128];
} nccl_unique_id;
typedef struct nccl_comm *nccl_comm_t;
enum { NCCL_SUCCESS = 0 };
/* ncclDataType_t and ncclRedOp_t values (nccl.h, 2.x). */
enum {
    NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_UINT32 = 3, NCCL_INT64 = 4,
    NCCL_UINT64 = 5, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9,
};
enum { NCCL_SUM = 0, NCCL_PROD = 1, NCCL_MAX = 2, NCCL_MIN = 3 };

static struct {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*comm_destroy)(nccl_comm_t);
    const char *(*error_string)(int);
    nccl_comm_t comm;
} nccl;

extern "C" int ar_nccl_open(char *why, size_t len)
{
    nccl.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib) {
        snprintf(why, len, "libnccl.so.2 not found (%s)", dlerror());
        return -1;
    }
    nccl.get_unique_id = (int (*)(nccl_unique_id *))dlsym(nccl.lib, "ncclGetUniqueId");
    nccl.comm_init_rank =
        (int (*)(nccl_comm_t *, int, nccl_unique_id, int))dlsym(nccl.lib, "ncclCommInitRank");
    nccl.all_reduce = (int (*)(const void *, void *, size_t, int, int, nccl_comm_t,
                               cudaStream_t))dlsym(nccl.lib, "ncclAllReduce");
    nccl.comm_destroy = (int (*)(nccl_comm_t))dlsym(nccl.lib, "ncclCommDestroy");
    nccl.error_string = (const char *(*)(int))dlsym(nccl.lib, "ncclGetErrorString");
    if (!nccl.get_unique_id || !nccl.comm_init_rank || !nccl.all_reduce || !nccl.comm_destroy) {
        snprintf(why, len, "libnccl.so.2 lacks the calls used (ncclAllReduce, ...)");
        dlclose(nccl.lib);
        nccl.lib = NULL;
        return -1;
    }
    return 0;
}

extern "C" int ar_nccl_unique_id_size(void)
{
    return (int)sizeof(nccl_unique_id);
}

static int nccl_fail(const char *what, int rc)
{
    snprintf(err, sizeof(err), "%s: %s", what,
             nccl.error_string ? nccl.error_string(rc) : "NCCL error");
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
    int rc = nccl.comm_init_rank(&nccl.comm, nranks, u, rank);
    return rc == NCCL_SUCCESS ? 0 : nccl_fail("ncclCommInitRank", rc);
}

extern "C" int ar_nccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, int type, int op)
{
    int t, o;
    switch (type) {
    case XTQ_DT_INT8: t = NCCL_INT8; break;
    case XTQ_DT_UINT8: t = NCCL_UINT8; break;
    case XTQ_DT_INT32: t = NCCL_INT32; break;
    case XTQ_DT_UINT32: t = NCCL_UINT32; break;
    case XTQ_DT_INT64: t = NCCL_INT64; break;
    case XTQ_DT_UINT64: t = NCCL_UINT64; break;
    case XTQ_DT_FLOAT16: t = NCCL_FLOAT16; break;
    case XTQ_DT_BFLOAT16: t = NCCL_BFLOAT16; break;
    case XTQ_DT_FLOAT: t = NCCL_FLOAT32; break;
    case XTQ_DT_DOUBLE: t = NCCL_FLOAT64; break;
    default: return -1;
    }
    switch (op) {
    case XTQ_OP_SUM: o = NCCL_SUM; break;
    case XTQ_OP_PROD: o = NCCL_PROD; break;
    case XTQ_OP_MAX: o = NCCL_MAX; break;
    case XTQ_OP_MIN: o = NCCL_MIN; break;
    default: return -1;
    }
    int rc = nccl.all_reduce(sendbuf, recvbuf, count, t, o, nccl.comm, stream);
    if (rc != NCCL_SUCCESS)
        return nccl_fail("ncclAllReduce", rc);
    /* A blocking call, as MPI_Allreduce is: the time includes the wait. */
    cudaError_t e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

extern "C" void ar_nccl_close(void)
{
    if (nccl.comm)
        nccl.comm_destroy(nccl.comm);
    if (nccl.lib)
        dlclose(nccl.lib);
    memset(&nccl, 0, sizeof(nccl));
}
