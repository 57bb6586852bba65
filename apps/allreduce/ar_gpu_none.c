/* xtq_allreduce built without CUDA: every GPU path says why it skips. */
#include <stdio.h>

#include "ar_gpu.h"

static const char why_none[] = "built without CUDA (configure with nvcc installed and "
                               "-DXTQ_ENABLE_CUDA=ON)";

int ar_gpu_open(int local_rank, char *why, size_t len)
{
    (void)local_rank;
    snprintf(why, len, "%s", why_none);
    return -1;
}
int ar_gpu_count(void)
{
    return 0;
}
const char *ar_gpu_name(void)
{
    return "none";
}
const char *ar_gpu_error(void)
{
    return why_none;
}
void *ar_gpu_malloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}
void ar_gpu_free(void *p)
{
    (void)p;
}
void *ar_gpu_host_alloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}
void ar_gpu_host_free(void *p)
{
    (void)p;
}
int ar_gpu_h2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return -1;
}
int ar_gpu_d2h(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return -1;
}
int ar_gpu_d2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return -1;
}
int ar_gpu_reduce(void *dst, const void *src, uint64_t count, int type, int op, int wait)
{
    (void)dst, (void)src, (void)count, (void)type, (void)op, (void)wait;
    return -1;
}
int ar_gpu_sync(void)
{
    return -1;
}
int ar_nccl_open(char *why, size_t len)
{
    snprintf(why, len, "%s", why_none);
    return -1;
}
int ar_nccl_unique_id_size(void)
{
    return 0;
}
int ar_nccl_get_unique_id(void *id)
{
    (void)id;
    return -1;
}
int ar_nccl_init(int nranks, const void *id, int rank)
{
    (void)nranks, (void)id, (void)rank;
    return -1;
}
int ar_nccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, int type, int op)
{
    (void)sendbuf, (void)recvbuf, (void)count, (void)type, (void)op;
    return -1;
}
void ar_nccl_close(void) {}
