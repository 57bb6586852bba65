/* libxtq_coll built without nvcc: CUDA teams are refused with the reason. */
#include <stdio.h>

#include "coll_cuda.h"

int coll_gpu_open(xtq_ctx_t *ctx, uint64_t task, int dev, const struct coll_gpu_opts *o,
                  struct coll_gpu **g, char *why, size_t len)
{
    (void)ctx, (void)task, (void)dev, (void)o, (void)g;
    snprintf(why, len, "libxtq_coll was built without CUDA (configure with nvcc installed)");
    return -XTQ_ENOAGENT;
}
void coll_gpu_close(struct coll_gpu *g)
{
    (void)g;
}
int coll_gpu_supported(int op, int type)
{
    (void)op, (void)type;
    return 0;
}
void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes)
{
    (void)g, (void)bytes;
    return NULL;
}
void coll_gpu_free(struct coll_gpu *g, void *p)
{
    (void)g, (void)p;
}
void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes)
{
    (void)g, (void)bytes;
    return NULL;
}
void coll_gpu_host_free(struct coll_gpu *g, void *p)
{
    (void)g, (void)p;
}
int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes)
{
    (void)g, (void)p, (void)bytes;
    return -XTQ_ENOAGENT;
}
void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes)
{
    (void)g, (void)p, (void)bytes;
}
int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes, int wait)
{
    (void)g, (void)dst, (void)src, (void)bytes, (void)wait;
    return -XTQ_ENOAGENT;
}
size_t coll_gpu_copy_max(const struct coll_gpu *g)
{
    (void)g;
    return 0;
}
int coll_gpu_start(struct coll_gpu *g, const struct xtq_coll_cuda_args *a, uint64_t payload,
                   int64_t timeout_ns)
{
    (void)g, (void)a, (void)payload, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}
void coll_gpu_cancel_waits(struct coll_gpu *g)
{
    (void)g;
}
int coll_gpu_finish(struct coll_gpu *g, int ticket, int64_t timeout_ns)
{
    (void)g, (void)ticket, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}
int coll_gpu_apply(struct coll_gpu *g, const struct xtq_coll_cuda_args *a, uint64_t payload,
                   int64_t timeout_ns)
{
    (void)g, (void)a, (void)payload, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}

int coll_gpu_wait_ready(struct coll_gpu *g, const void *word, uint64_t val, int64_t wait_ns,
                        int64_t timeout_ns)
{
    (void)g, (void)word, (void)val, (void)wait_ns, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}

int coll_gpu_can_chain(const struct coll_gpu *g)
{
    (void)g;
    return 0;
}

int coll_gpu_start_signal(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                          struct xtq_coll_cuda_args *args, xtq_signal_t *sig, int64_t timeout_ns)
{
    (void)g, (void)a, (void)args, (void)sig, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}

int coll_gpu_fence(struct coll_gpu *g, int64_t timeout_ns)
{
    (void)g, (void)timeout_ns;
    return -XTQ_ENOAGENT;
}

int coll_gpu_ipc_alloc(struct coll_gpu *g, size_t bytes, void **ptr, void *handle)
{
    (void)g, (void)bytes, (void)ptr, (void)handle;
    return -XTQ_ENOSYS;
}

void coll_gpu_ipc_free(struct coll_gpu *g, void *ptr)
{
    (void)g, (void)ptr;
}

int coll_gpu_ipc_open(struct coll_gpu *g, const void *handle, uint64_t bytes, void **ptr,
                      uint64_t *mapped)
{
    (void)g, (void)handle, (void)bytes, (void)ptr, (void)mapped;
    return -XTQ_ENOSYS;
}

void coll_gpu_ipc_close(struct coll_gpu *g, void *ptr)
{
    (void)g, (void)ptr;
}
