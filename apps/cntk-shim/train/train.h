/*
 * xtq_train: a data-parallel MLP on Fashion-MNIST whose gradients go
 * through the shim every step. Pieces: the IDX reader (idx.c), the matrix
 * products (gemm.c), and one model implementation per device behind
 * struct device_ops (model_cpu.c, model_cuda.cu).
 */
#ifndef XTQ_TRAIN_H
#define XTQ_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "xtq_shim.h"

/* ---- data ---------------------------------------------------------------- */

typedef struct dataset {
    uint8_t *images; /* n x pixels, row-major */
    uint8_t *labels; /* n */
    size_t n, rows, cols;
} dataset_t;

#define IDX_CLASSES 10
#define IDX_INSTALL_HINT                                                                           \
    "install the data set with 'apt-get install dataset-fashion-mnist' or point --data at a "      \
    "folder holding the four Fashion-MNIST gzip IDX files"

/*
 * Load `dir`/`prefix`-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz
 * (prefix "train" or "t10k"). On failure returns -1 with a message naming
 * the file and the fault in `err`; nothing is left allocated.
 */
int idx_load(const char *dir, const char *prefix, dataset_t *ds, char *err, size_t errlen);
void idx_free(dataset_t *ds);

/* Write a gzip IDX file (magic 0x801 labels: dims {n}; 0x803 images:
 * dims {n, rows, cols}). Used by the tests' data generator. */
int idx_write(const char *path, unsigned magic, const uint32_t *dims, unsigned ndims,
              const uint8_t *data, size_t bytes);

/* ---- model ----------------------------------------------------------------- */

#define MLP_MAX_LAYERS 6

/* Layer l maps size[l] inputs to size[l + 1] outputs: weights (size[l] x
 * size[l + 1], row-major) then biases, at w_off[l] and b_off[l] floats
 * into one flat parameter array. ReLU between layers, softmax at the end. */
typedef struct mlp_shape {
    size_t nlayers;
    size_t size[MLP_MAX_LAYERS + 1];
    size_t w_off[MLP_MAX_LAYERS], b_off[MLP_MAX_LAYERS];
    size_t nparams;
} mlp_shape_t;

int mlp_shape_init(mlp_shape_t *s, size_t inputs, const size_t *hidden, size_t nhidden,
                   size_t outputs);
/* He-uniform weights, zero biases, from `seed` (every rank the same). */
void mlp_init_params(const mlp_shape_t *s, uint64_t seed, float *params);

/* Called by a device when layer `layer`'s gradients are ready. */
typedef void (*train_ready_fn)(void *arg, size_t layer);

/* One model on one device. */
struct device_ops {
    const char *name;
    /* 1 when usable here, else 0 with the reason. */
    int (*available)(char *why, size_t len);
    int (*create)(const mlp_shape_t *s, const float *params, size_t max_batch, void **state,
                  char *err, size_t errlen);
    void (*destroy)(void *state);
    /*
     * Gradients of the loss summed over `n` samples, times `scale`
     * (1 / global batch), into the gradient buffers (overwritten). Adds the
     * samples' loss to *loss and their correct predictions to *correct.
     * Returns with the gradients ready for the shim. When `ready` is not
     * NULL it is called as soon as layer l's two tensors (grad_bufs entries
     * 2l and 2l + 1) are ready, last layer first, so their aggregation can
     * start while earlier layers are computed.
     */
    int (*grad)(void *state, const uint8_t *x, const uint8_t *y, size_t n, float scale,
                double *loss, size_t *correct, train_ready_fn ready, void *arg);
    /* The gradient tensors, one per weight and bias, as shim buffers. */
    size_t (*grad_bufs)(void *state, xtq_shim_buf_t *bufs);
    /* v = momentum * v + g; w -= lr * v. */
    int (*update)(void *state, float lr, float momentum);
    /* Loss sum and correct predictions over n samples. */
    int (*evaluate)(void *state, const uint8_t *x, const uint8_t *y, size_t n, double *loss,
                    size_t *correct);
    /* Copy the parameters to the host. */
    int (*get_params)(void *state, float *params);
};

extern const struct device_ops train_cpu_ops;
extern const struct device_ops train_cuda_ops;

/* ---- CPU kernels (gemm.c) ---------------------------------------------------- */

/* C[m x n] = A[m x k] B[k x n] (accumulate: C +=). */
void gemm_nn(size_t m, size_t n, size_t k, const float *a, const float *b, float *c,
             int accumulate);
/* C[m x n] = A^T B, A is k x m, B is k x n. */
void gemm_tn(size_t m, size_t n, size_t k, const float *a, const float *b, float *c,
             int accumulate);
/* C[m x n] = A B^T, A is m x k, B is n x k; scratch holds k * n floats. */
void gemm_nt(size_t m, size_t n, size_t k, const float *a, const float *b, float *c,
             float *scratch);

#endif /* XTQ_TRAIN_H */
