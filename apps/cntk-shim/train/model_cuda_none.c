/* Without the CUDA toolkit: the cuda device exists and says why it cannot run. */
#include "train.h"

#include <stdio.h>

static int none_available(char *why, size_t len)
{
    snprintf(
        why, len,
        "xtq_train was built without CUDA (XTQ_ENABLE_CUDA=OFF, or no nvcc at configure time)");
    return 0;
}

const struct device_ops train_cuda_ops = {
    .name = "cuda",
    .available = none_available,
};
