/*
 * The MLP on the CPU: forward and backward with gemm.c, one thread per
 * rank. Parameters, gradients and momentum are each one flat array; the
 * shim sees each layer's weight and bias gradients as separate tensors.
 */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_model {
    mlp_shape_t s;
    size_t max_batch, width; /* widest layer */
    float *params, *grads, *mom;
    float *act[MLP_MAX_LAYERS + 1]; /* act[0]: input; act[l + 1]: layer l's output */
    float *delta[2];                /* backward ping-pong, max_batch x width */
    float *scratch;                 /* transpose of a weight matrix */
};

static void *xalloc(size_t floats)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (floats ? floats : 1) * sizeof(float)) != 0)
        return NULL;
    memset(p, 0, (floats ? floats : 1) * sizeof(float));
    return p;
}

static int cpu_available(char *why, size_t len)
{
    return 1;
}

static void cpu_destroy(void *state)
{
    struct cpu_model *m = state;
    if (!m)
        return;
    free(m->params);
    free(m->grads);
    free(m->mom);
    for (size_t l = 0; l <= MLP_MAX_LAYERS; l++)
        free(m->act[l]);
    free(m->delta[0]);
    free(m->delta[1]);
    free(m->scratch);
    free(m);
}

static int cpu_create(const mlp_shape_t *s, const float *params, size_t max_batch, void **state,
                      char *err, size_t errlen)
{
    struct cpu_model *m = calloc(1, sizeof(*m));
    if (!m)
        goto oom;
    m->s = *s;
    m->max_batch = max_batch;
    size_t wmax = 0;
    for (size_t l = 0; l <= s->nlayers; l++)
        m->width = s->size[l] > m->width ? s->size[l] : m->width;
    for (size_t l = 0; l < s->nlayers; l++)
        wmax = s->size[l] * s->size[l + 1] > wmax ? s->size[l] * s->size[l + 1] : wmax;
    m->params = xalloc(s->nparams);
    m->grads = xalloc(s->nparams);
    m->mom = xalloc(s->nparams);
    m->delta[0] = xalloc(max_batch * m->width);
    m->delta[1] = xalloc(max_batch * m->width);
    m->scratch = xalloc(wmax);
    if (!m->params || !m->grads || !m->mom || !m->delta[0] || !m->delta[1] || !m->scratch)
        goto oom;
    for (size_t l = 0; l <= s->nlayers; l++)
        if (!(m->act[l] = xalloc(max_batch * s->size[l])))
            goto oom;
    memcpy(m->params, params, s->nparams * sizeof(float));
    *state = m;
    return 0;
oom:
    cpu_destroy(m);
    snprintf(err, errlen, "out of memory for the model");
    return -1;
}

/* Forward pass over n samples; logits land in act[nlayers]. */
static void forward(struct cpu_model *m, const uint8_t *x, size_t n)
{
    const mlp_shape_t *s = &m->s;
    float *in = m->act[0];
    for (size_t i = 0; i < n * s->size[0]; i++)
        in[i] = (float)x[i] * (1.0f / 255.0f);
    for (size_t l = 0; l < s->nlayers; l++) {
        size_t fi = s->size[l], fo = s->size[l + 1];
        const float *w = m->params + s->w_off[l], *b = m->params + s->b_off[l];
        float *out = m->act[l + 1];
        gemm_nn(n, fo, fi, m->act[l], w, out, 0);
        int relu = l + 1 < s->nlayers;
        for (size_t r = 0; r < n; r++) {
            float *o = out + r * fo;
            for (size_t j = 0; j < fo; j++) {
                float v = o[j] + b[j];
                o[j] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
}

/* Softmax cross-entropy of row `z` (k classes) against label y: returns
 * the loss; `p` receives the probabilities when not NULL. */
static double softmax_xent(const float *z, size_t k, unsigned y, float *p, int *right)
{
    float zmax = z[0];
    size_t arg = 0;
    for (size_t j = 1; j < k; j++)
        if (z[j] > zmax) {
            zmax = z[j];
            arg = j;
        }
    double sum = 0;
    for (size_t j = 0; j < k; j++)
        sum += exp((double)(z[j] - zmax));
    if (p)
        for (size_t j = 0; j < k; j++)
            p[j] = (float)(exp((double)(z[j] - zmax)) / sum);
    *right = arg == y;
    return log(sum) + (double)zmax - (double)z[y];
}

static int cpu_grad(void *state, const uint8_t *x, const uint8_t *y, size_t n, float scale,
                    double *loss, size_t *correct, train_ready_fn ready, void *arg)
{
    struct cpu_model *m = state;
    const mlp_shape_t *s = &m->s;
    size_t L = s->nlayers, k = s->size[L];
    if (n > m->max_batch)
        return -1;
    forward(m, x, n);
    /* delta = (softmax - onehot) * scale */
    float *d = m->delta[0];
    for (size_t r = 0; r < n; r++) {
        int right;
        *loss += softmax_xent(m->act[L] + r * k, k, y[r], d + r * k, &right);
        *correct += (size_t)right;
        d[r * k + y[r]] -= 1.0f;
        for (size_t j = 0; j < k; j++)
            d[r * k + j] *= scale;
    }
    for (size_t l = L; l-- > 0;) {
        size_t fi = s->size[l], fo = s->size[l + 1];
        float *gw = m->grads + s->w_off[l], *gb = m->grads + s->b_off[l];
        const float *w = m->params + s->w_off[l];
        gemm_tn(fi, fo, n, m->act[l], d, gw, 0);
        for (size_t j = 0; j < fo; j++)
            gb[j] = 0.0f;
        for (size_t r = 0; r < n; r++)
            for (size_t j = 0; j < fo; j++)
                gb[j] += d[r * fo + j];
        if (ready)
            ready(arg, l);
        if (l == 0)
            break;
        float *dp = m->delta[(L - l) & 1];
        gemm_nt(n, fi, fo, d, w, dp, m->scratch);
        const float *a = m->act[l];
        for (size_t i = 0; i < n * fi; i++)
            if (a[i] <= 0.0f)
                dp[i] = 0.0f;
        d = dp;
    }
    return 0;
}

static size_t cpu_grad_bufs(void *state, xtq_shim_buf_t *bufs)
{
    struct cpu_model *m = state;
    const mlp_shape_t *s = &m->s;
    size_t nb = 0;
    for (size_t l = 0; l < s->nlayers; l++) {
        bufs[nb++] = (xtq_shim_buf_t){m->grads + s->w_off[l], s->size[l] * s->size[l + 1],
                                      XTQ_DT_FLOAT, XTQ_SHIM_MEM_HOST};
        bufs[nb++] = (xtq_shim_buf_t){m->grads + s->b_off[l], s->size[l + 1], XTQ_DT_FLOAT,
                                      XTQ_SHIM_MEM_HOST};
    }
    return nb;
}

static int cpu_update(void *state, float lr, float momentum)
{
    struct cpu_model *m = state;
    float *restrict w = m->params, *restrict v = m->mom;
    const float *restrict g = m->grads;
    for (size_t i = 0; i < m->s.nparams; i++) {
        v[i] = momentum * v[i] + g[i];
        w[i] -= lr * v[i];
    }
    return 0;
}

static int cpu_evaluate(void *state, const uint8_t *x, const uint8_t *y, size_t n, double *loss,
                        size_t *correct)
{
    struct cpu_model *m = state;
    size_t L = m->s.nlayers, k = m->s.size[L], in = m->s.size[0];
    for (size_t i = 0; i < n; i += m->max_batch) {
        size_t b = n - i < m->max_batch ? n - i : m->max_batch;
        forward(m, x + i * in, b);
        for (size_t r = 0; r < b; r++) {
            int right;
            *loss += softmax_xent(m->act[L] + r * k, k, y[i + r], NULL, &right);
            *correct += (size_t)right;
        }
    }
    return 0;
}

static int cpu_get_params(void *state, float *params)
{
    struct cpu_model *m = state;
    memcpy(params, m->params, m->s.nparams * sizeof(float));
    return 0;
}

const struct device_ops train_cpu_ops = {
    .name = "cpu",
    .available = cpu_available,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .grad = cpu_grad,
    .grad_bufs = cpu_grad_bufs,
    .update = cpu_update,
    .evaluate = cpu_evaluate,
    .get_params = cpu_get_params,
};
