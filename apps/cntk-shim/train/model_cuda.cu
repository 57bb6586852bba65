/*
 * The MLP on an NVIDIA GPU: cuBLAS for the matrix products, small kernels
 * for bias, ReLU, softmax cross-entropy and the SGD update. Parameters,
 * activations and gradients stay in device memory; the shim receives the
 * gradient tensors as device buffers (the mpi back-end stages them through
 * pinned host memory, the xtq back-end reduces them on the GPU). Each
 * step's input slice is copied in; only per-sample losses come back.
 *
 * Everything runs on the legacy default stream, which also orders the
 * shim's copies after the backward pass. Row-major matrices are
 * column-major transposes for cuBLAS: C = A B is computed as C^T = B^T A^T.
 */
extern "C" {
#include "train.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cuda_model {
    mlp_shape_t s;
    size_t max_batch, width;
    cublasHandle_t blas;
    float *params, *grads, *mom;     /* device, nparams each */
    float *act[MLP_MAX_LAYERS + 1];  /* device, max_batch x size[l] */
    float *delta[2];                 /* device, max_batch x width */
    uint8_t *x, *y;                  /* device input slice */
    float *loss;                     /* device: per-sample loss, then right flag */
    float *host_loss;                /* pinned copy of loss */
};

#define CK(call, what)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "xtq_train(cuda): %s: %s\n", what, cudaGetErrorString(e_));       \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)
#define CKB(call, what)                                                                        \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "xtq_train(cuda): %s: cuBLAS status %d\n", what, (int)s_);         \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

/* ---- kernels ------------------------------------------------------------------ */

__global__ void to_float(const uint8_t *x, float *out, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = (float)x[i] * (1.0f / 255.0f);
}

__global__ void bias_act(float *out, const float *b, size_t rows, size_t cols, int relu)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = out[i] + b[i % cols];
        out[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* One thread per sample: loss, right flag, and (delta != NULL) the
 * gradient of the scaled loss with respect to the logits. */
__global__ void softmax_xent(const float *z, const uint8_t *y, size_t n, size_t k, float scale,
                             float *delta, float *loss, float *right)
{
    size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (r >= n)
        return;
    const float *zr = z + r * k;
    float zmax = zr[0];
    size_t arg = 0;
    for (size_t j = 1; j < k; j++)
        if (zr[j] > zmax) {
            zmax = zr[j];
            arg = j;
        }
    float sum = 0.0f;
    for (size_t j = 0; j < k; j++)
        sum += expf(zr[j] - zmax);
    loss[r] = logf(sum) + zmax - zr[y[r]];
    right[r] = arg == y[r] ? 1.0f : 0.0f;
    if (delta)
        for (size_t j = 0; j < k; j++)
            delta[r * k + j] = (expf(zr[j] - zmax) / sum - (j == y[r] ? 1.0f : 0.0f)) * scale;
}

__global__ void col_sum(const float *d, size_t rows, size_t cols, float *out)
{
    size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float s = 0.0f;
    for (size_t r = 0; r < rows; r++)
        s += d[r * cols + j];
    out[j] = s;
}

__global__ void relu_mask(float *d, const float *a, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n && a[i] <= 0.0f)
        d[i] = 0.0f;
}

__global__ void sgd(float *w, float *v, const float *g, size_t n, float lr, float momentum)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        v[i] = momentum * v[i] + g[i];
        w[i] -= lr * v[i];
    }
}

static unsigned blocks(size_t n)
{
    return (unsigned)((n + 255) / 256);
}

/* ---- device ops --------------------------------------------------------------- */

static int cuda_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none present");
        return 0;
    }
    return 1;
}

static void cuda_destroy(void *state)
{
    struct cuda_model *m = (struct cuda_model *)state;
    if (!m)
        return;
    if (m->blas)
        cublasDestroy(m->blas);
    cudaFree(m->params);
    cudaFree(m->grads);
    cudaFree(m->mom);
    for (size_t l = 0; l <= MLP_MAX_LAYERS; l++)
        cudaFree(m->act[l]);
    cudaFree(m->delta[0]);
    cudaFree(m->delta[1]);
    cudaFree(m->x);
    cudaFree(m->y);
    cudaFree(m->loss);
    cudaFreeHost(m->host_loss);
    free(m);
}

static int cuda_create(const mlp_shape_t *s, const float *params, size_t max_batch, void **state,
                       char *err, size_t errlen)
{
    struct cuda_model *m = (struct cuda_model *)calloc(1, sizeof(*m));
    int ndev = 0;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!m)
        goto fail;
    m->s = *s;
    m->max_batch = max_batch;
    for (size_t l = 0; l <= s->nlayers; l++)
        m->width = s->size[l] > m->width ? s->size[l] : m->width;
    /* One GPU per rank on a host: the local rank picks it. */
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 ||
        cudaSetDevice(lr ? atoi(lr) % ndev : 0) != cudaSuccess)
        goto fail;
    if (cudaMalloc(&m->params, s->nparams * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&m->grads, s->nparams * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&m->mom, s->nparams * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&m->delta[0], max_batch * m->width * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&m->delta[1], max_batch * m->width * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&m->x, max_batch * s->size[0]) != cudaSuccess ||
        cudaMalloc(&m->y, max_batch) != cudaSuccess ||
        cudaMalloc(&m->loss, 2 * max_batch * sizeof(float)) != cudaSuccess ||
        cudaMallocHost(&m->host_loss, 2 * max_batch * sizeof(float)) != cudaSuccess)
        goto fail;
    for (size_t l = 0; l <= s->nlayers; l++)
        if (cudaMalloc(&m->act[l], max_batch * s->size[l] * sizeof(float)) != cudaSuccess)
            goto fail;
    if (cudaMemcpy(m->params, params, s->nparams * sizeof(float), cudaMemcpyHostToDevice) !=
            cudaSuccess ||
        cudaMemset(m->mom, 0, s->nparams * sizeof(float)) != cudaSuccess ||
        cudaMemset(m->grads, 0, s->nparams * sizeof(float)) != cudaSuccess)
        goto fail;
    if (cublasCreate(&m->blas) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    *state = m;
    return 0;
fail:
    snprintf(err, errlen, "cannot set up the model on the GPU: %s",
             cudaGetErrorString(cudaGetLastError()));
    cuda_destroy(m);
    return -1;
}

/* Forward pass over n samples already in m->x; logits in act[nlayers]. */
static int forward(struct cuda_model *m, size_t n)
{
    const mlp_shape_t *s = &m->s;
    const float one = 1.0f, zero = 0.0f;
    if (n == 0)
        return 0;
    to_float<<<blocks(n * s->size[0]), 256>>>(m->x, m->act[0], n * s->size[0]);
    for (size_t l = 0; l < s->nlayers; l++) {
        int fi = (int)s->size[l], fo = (int)s->size[l + 1];
        CKB(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, fo, (int)n, fi, &one,
                        m->params + s->w_off[l], fo, m->act[l], fi, &zero, m->act[l + 1], fo),
            "forward GEMM");
        bias_act<<<blocks(n * (size_t)fo), 256>>>(m->act[l + 1], m->params + s->b_off[l], n,
                                                  (size_t)fo, l + 1 < s->nlayers);
    }
    CK(cudaGetLastError(), "forward kernels");
    return 0;
}

static int cuda_grad(void *state, const uint8_t *x, const uint8_t *y, size_t n, float scale,
                     double *loss, size_t *correct, train_ready_fn ready, void *arg)
{
    struct cuda_model *m = (struct cuda_model *)state;
    const mlp_shape_t *s = &m->s;
    const float one = 1.0f, zero = 0.0f;
    size_t L = s->nlayers, k = s->size[L];
    if (n > m->max_batch)
        return -1;
    if (n == 0) {
        /* No samples here this step: zero gradients still take part. */
        CK(cudaMemset(m->grads, 0, s->nparams * sizeof(float)), "zero gradients");
        CK(cudaStreamSynchronize(0), "synchronise");
        for (size_t l = L; ready && l-- > 0;)
            ready(arg, l);
        return 0;
    }
    CK(cudaMemcpyAsync(m->x, x, n * s->size[0], cudaMemcpyHostToDevice, 0), "copy images");
    CK(cudaMemcpyAsync(m->y, y, n, cudaMemcpyHostToDevice, 0), "copy labels");
    if (forward(m, n) != 0)
        return -1;
    float *d = m->delta[0];
    softmax_xent<<<blocks(n), 256>>>(m->act[L], m->y, n, k, scale, d, m->loss,
                                     m->loss + m->max_batch);
    for (size_t l = L; l-- > 0;) {
        int fi = (int)s->size[l], fo = (int)s->size[l + 1];
        /* dW[fi x fo] = act^T d */
        CKB(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, fo, fi, (int)n, &one, d, fo,
                        m->act[l], fi, &zero, m->grads + s->w_off[l], fo),
            "weight-gradient GEMM");
        col_sum<<<blocks((size_t)fo), 256>>>(d, n, (size_t)fo, m->grads + s->b_off[l]);
        if (ready && l > 0) {
            /* ready() starts the layer's aggregation, which may read the
             * tensors at once: they must be complete. */
            CK(cudaStreamSynchronize(0), "synchronise");
            ready(arg, l);
        }
        if (l == 0)
            break;
        float *dp = m->delta[(L - l) & 1];
        /* dprev[n x fi] = d W^T */
        CKB(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, fi, (int)n, fo, &one,
                        m->params + s->w_off[l], fo, d, fo, &zero, dp, fi),
            "input-gradient GEMM");
        relu_mask<<<blocks(n * (size_t)fi), 256>>>(dp, m->act[l], n * (size_t)fi);
        d = dp;
    }
    CK(cudaGetLastError(), "backward kernels");
    CK(cudaMemcpyAsync(m->host_loss, m->loss, n * sizeof(float), cudaMemcpyDeviceToHost, 0),
       "copy losses");
    CK(cudaMemcpyAsync(m->host_loss + m->max_batch, m->loss + m->max_batch, n * sizeof(float),
                       cudaMemcpyDeviceToHost, 0),
       "copy flags");
    /* The gradients are ready for the shim when this returns. */
    CK(cudaStreamSynchronize(0), "synchronise");
    if (ready)
        ready(arg, 0);
    for (size_t r = 0; r < n; r++) {
        *loss += m->host_loss[r];
        *correct += m->host_loss[m->max_batch + r] > 0.5f;
    }
    return 0;
}

static size_t cuda_grad_bufs(void *state, xtq_shim_buf_t *bufs)
{
    struct cuda_model *m = (struct cuda_model *)state;
    const mlp_shape_t *s = &m->s;
    size_t nb = 0;
    for (size_t l = 0; l < s->nlayers; l++) {
        bufs[nb].data = m->grads + s->w_off[l];
        bufs[nb].count = s->size[l] * s->size[l + 1];
        bufs[nb].type = XTQ_DT_FLOAT;
        bufs[nb++].mem = XTQ_SHIM_MEM_CUDA;
        bufs[nb].data = m->grads + s->b_off[l];
        bufs[nb].count = s->size[l + 1];
        bufs[nb].type = XTQ_DT_FLOAT;
        bufs[nb++].mem = XTQ_SHIM_MEM_CUDA;
    }
    return nb;
}

static int cuda_update(void *state, float lr, float momentum)
{
    struct cuda_model *m = (struct cuda_model *)state;
    sgd<<<blocks(m->s.nparams), 256>>>(m->params, m->mom, m->grads, m->s.nparams, lr, momentum);
    CK(cudaGetLastError(), "update");
    CK(cudaStreamSynchronize(0), "synchronise");
    return 0;
}

static int cuda_evaluate(void *state, const uint8_t *x, const uint8_t *y, size_t n, double *loss,
                         size_t *correct)
{
    struct cuda_model *m = (struct cuda_model *)state;
    size_t L = m->s.nlayers, k = m->s.size[L], in = m->s.size[0];
    for (size_t i = 0; i < n; i += m->max_batch) {
        size_t b = n - i < m->max_batch ? n - i : m->max_batch;
        CK(cudaMemcpyAsync(m->x, x + i * in, b * in, cudaMemcpyHostToDevice, 0), "copy images");
        CK(cudaMemcpyAsync(m->y, y + i, b, cudaMemcpyHostToDevice, 0), "copy labels");
        if (forward(m, b) != 0)
            return -1;
        softmax_xent<<<blocks(b), 256>>>(m->act[L], m->y, b, k, 0.0f, NULL, m->loss,
                                         m->loss + m->max_batch);
        CK(cudaMemcpy(m->host_loss, m->loss, 2 * m->max_batch * sizeof(float),
                      cudaMemcpyDeviceToHost),
           "copy losses");
        for (size_t r = 0; r < b; r++) {
            *loss += m->host_loss[r];
            *correct += m->host_loss[m->max_batch + r] > 0.5f;
        }
    }
    return 0;
}

static int cuda_get_params(void *state, float *params)
{
    struct cuda_model *m = (struct cuda_model *)state;
    CK(cudaMemcpy(params, m->params, m->s.nparams * sizeof(float), cudaMemcpyDeviceToHost),
       "copy parameters");
    return 0;
}

extern "C" const struct device_ops train_cuda_ops = {
    "cuda",          cuda_available, cuda_create,   cuda_destroy,   cuda_grad,
    cuda_grad_bufs,  cuda_update,    cuda_evaluate, cuda_get_params,
};
