/* The MLP's layout and its initial parameters, shared by every device. */
#include "train.h"

#include <math.h>
#include <string.h>

int mlp_shape_init(mlp_shape_t *s, size_t inputs, const size_t *hidden, size_t nhidden,
                   size_t outputs)
{
    memset(s, 0, sizeof(*s));
    if (nhidden + 1 > MLP_MAX_LAYERS || inputs == 0 || outputs == 0)
        return -1;
    s->nlayers = nhidden + 1;
    s->size[0] = inputs;
    for (size_t l = 0; l < nhidden; l++) {
        if (hidden[l] == 0)
            return -1;
        s->size[l + 1] = hidden[l];
    }
    s->size[s->nlayers] = outputs;
    size_t off = 0;
    for (size_t l = 0; l < s->nlayers; l++) {
        s->w_off[l] = off;
        off += s->size[l] * s->size[l + 1];
        s->b_off[l] = off;
        off += s->size[l + 1];
        /* 64-byte aligned tensors: 16 floats. */
        off = (off + 15) & ~(size_t)15;
    }
    s->nparams = off;
    return 0;
}

/* splitmix64: the same stream on every rank and every device. */
static uint64_t next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mlp_init_params(const mlp_shape_t *s, uint64_t seed, float *params)
{
    uint64_t st = seed;
    memset(params, 0, s->nparams * sizeof(float));
    for (size_t l = 0; l < s->nlayers; l++) {
        size_t fi = s->size[l], fo = s->size[l + 1];
        float bound = sqrtf(6.0f / (float)fi); /* He uniform, for ReLU */
        float *w = params + s->w_off[l];
        for (size_t i = 0; i < fi * fo; i++) {
            double u = (double)(next(&st) >> 11) * (1.0 / 9007199254740992.0);
            w[i] = (float)((2.0 * u - 1.0) * bound);
        }
    }
}
