/* The launcher of libxtq's own processor (cuda_builtin.cu). */
#ifndef XTQ_CUDA_BUILTIN_H
#define XTQ_CUDA_BUILTIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
int xtq__builtin_xtq_launch(void *state, uint32_t tag, unsigned blocks, void *stream);
#ifdef __cplusplus
}
#endif
#endif
