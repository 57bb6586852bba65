/*
 * Device memory for the shim: pinned staging buffers and copies on the
 * legacy default stream (which orders them after work the caller queued
 * on blocking streams, such as PyTorch's default stream). Without the
 * CUDA toolkit every call reports -XTQ_ENOSYS and device buffers are
 * refused with the reason.
 */
#include "shim_internal.h"

#ifdef XTQ_SHIM_HAVE_CUDA
#include <cuda_runtime_api.h>

static __thread cudaError_t last_err = cudaSuccess;

static int cuda_rc(cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    last_err = e;
    return e == cudaErrorMemoryAllocation ? -XTQ_ENOMEM : -XTQ_EIO;
}

/* Asked once per process: the answer does not change while it runs. */
int shim__cuda_available(const char **why)
{
    static int avail = -1;
    static const char *reason = "";
    if (avail < 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        avail = e == cudaSuccess && n > 0;
        if (!avail)
            reason = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device is present";
    }
    *why = reason;
    return avail;
}

int shim__cuda_host_alloc(void **p, size_t bytes)
{
    return cuda_rc(cudaMallocHost(p, bytes));
}

void shim__cuda_host_free(void *p)
{
    cudaFreeHost(p);
}

int shim__cuda_alloc(void **p, size_t bytes)
{
    return cuda_rc(cudaMalloc(p, bytes));
}

void shim__cuda_free(void *p)
{
    cudaFree(p);
}

int shim__cuda_copy_d2h(void *dst, const void *src, size_t bytes)
{
    return cuda_rc(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, 0));
}

int shim__cuda_copy_h2d(void *dst, const void *src, size_t bytes)
{
    return cuda_rc(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, 0));
}

int shim__cuda_copy_d2d(void *dst, const void *src, size_t bytes)
{
    return cuda_rc(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}

int shim__cuda_sync(void)
{
    return cuda_rc(cudaStreamSynchronize(0));
}

const char *shim__cuda_last_error(void)
{
    return cudaGetErrorString(last_err);
}


int shim__cuda_device(void)
{
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess ? dev : 0;
}
#else /* !XTQ_SHIM_HAVE_CUDA */

int shim__cuda_available(const char **why)
{
    *why = "this build has no CUDA support (XTQ_ENABLE_CUDA=OFF, or no nvcc at configure time)";
    return 0;
}

int shim__cuda_host_alloc(void **p, size_t bytes)
{
    return -XTQ_ENOSYS;
}

void shim__cuda_host_free(void *p) {}

int shim__cuda_alloc(void **p, size_t bytes)
{
    return -XTQ_ENOSYS;
}

void shim__cuda_free(void *p) {}

int shim__cuda_copy_d2h(void *dst, const void *src, size_t bytes)
{
    return -XTQ_ENOSYS;
}

int shim__cuda_copy_h2d(void *dst, const void *src, size_t bytes)
{
    return -XTQ_ENOSYS;
}

int shim__cuda_copy_d2d(void *dst, const void *src, size_t bytes)
{
    return -XTQ_ENOSYS;
}

int shim__cuda_sync(void)
{
    return -XTQ_ENOSYS;
}

int shim__cuda_device(void)
{
    return 0;
}

const char *shim__cuda_last_error(void)
{
    return "no CUDA support in this build";
}

#endif
