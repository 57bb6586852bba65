/*
 * NCCL through dlopen("libnccl.so.2"), for the apps that compare with it
 * (xtq_allreduce's nccl mode, the training shim's nccl back-end): the few
 * types and calls they use are declared here (NCCL 2.x ABI: ncclUniqueId
 * is 128 bytes; the enums are nccl.h's values), so no NCCL header is
 * needed to build and a machine without NCCL says why. Header only, for C
 * and CUDA C++; the includer has the CUDA runtime's headers.
 */
#ifndef XTQ_APPS_NCCL_DL_H
#define XTQ_APPS_NCCL_DL_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include <xtq/reduce.h>

typedef struct {
    char internal[128];
} nccl_unique_id;
typedef struct nccl_comm *nccl_comm_t;

enum { NCCL_SUCCESS = 0 };
/* ncclDataType_t and ncclRedOp_t (nccl.h, 2.x). */
enum {
    NCCL_INT8 = 0,
    NCCL_UINT8 = 1,
    NCCL_INT32 = 2,
    NCCL_UINT32 = 3,
    NCCL_INT64 = 4,
    NCCL_UINT64 = 5,
    NCCL_FLOAT16 = 6,
    NCCL_FLOAT32 = 7,
    NCCL_FLOAT64 = 8,
    NCCL_BFLOAT16 = 9,
};
enum { NCCL_SUM = 0, NCCL_PROD = 1, NCCL_MAX = 2, NCCL_MIN = 3 };

/* The library and the calls used. */
struct nccl_dl {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*comm_destroy)(nccl_comm_t);
    const char *(*error_string)(int); /* may be NULL */
};

/* Load libnccl.so.2 into *n: 0, or -1 with why (the library's absence,
 * with dlerror's words, or the call it lacks) in why[len]. */
static inline int nccl_dl_open(struct nccl_dl *n, char *why, size_t len)
{
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(why, len, "libnccl.so.2 was not found (install NCCL 2.x): %s", dlerror());
        return -1;
    }
    n->get_unique_id = (int (*)(nccl_unique_id *))dlsym(n->lib, "ncclGetUniqueId");
    n->comm_init_rank =
        (int (*)(nccl_comm_t *, int, nccl_unique_id, int))dlsym(n->lib, "ncclCommInitRank");
    n->all_reduce = (int (*)(const void *, void *, size_t, int, int, nccl_comm_t,
                             cudaStream_t))dlsym(n->lib, "ncclAllReduce");
    n->comm_destroy = (int (*)(nccl_comm_t))dlsym(n->lib, "ncclCommDestroy");
    n->error_string = (const char *(*)(int))dlsym(n->lib, "ncclGetErrorString");
    if (!n->get_unique_id || !n->comm_init_rank || !n->all_reduce || !n->comm_destroy) {
        snprintf(why, len,
                 "libnccl.so.2 lacks ncclGetUniqueId, ncclCommInitRank, ncclAllReduce or "
                 "ncclCommDestroy");
        dlclose(n->lib);
        n->lib = NULL;
        return -1;
    }
    return 0;
}

/* NCCL's words for an error code. */
static inline const char *nccl_dl_strerror(const struct nccl_dl *n, int rc)
{
    return n->error_string ? n->error_string(rc) : "NCCL error";
}

/* ncclDataType_t of a libxtq type, or -1 where NCCL has none. */
static inline int nccl_dl_type(int type)
{
    switch (type) {
    case XTQ_DT_INT8: return NCCL_INT8;
    case XTQ_DT_UINT8: return NCCL_UINT8;
    case XTQ_DT_INT32: return NCCL_INT32;
    case XTQ_DT_UINT32: return NCCL_UINT32;
    case XTQ_DT_INT64: return NCCL_INT64;
    case XTQ_DT_UINT64: return NCCL_UINT64;
    case XTQ_DT_FLOAT16: return NCCL_FLOAT16;
    case XTQ_DT_BFLOAT16: return NCCL_BFLOAT16;
    case XTQ_DT_FLOAT: return NCCL_FLOAT32;
    case XTQ_DT_DOUBLE: return NCCL_FLOAT64;
    default: return -1;
    }
}

/* ncclRedOp_t of a libxtq operation, or -1 where NCCL has none. */
static inline int nccl_dl_op(int op)
{
    switch (op) {
    case XTQ_OP_SUM: return NCCL_SUM;
    case XTQ_OP_PROD: return NCCL_PROD;
    case XTQ_OP_MAX: return NCCL_MAX;
    case XTQ_OP_MIN: return NCCL_MIN;
    default: return -1;
    }
}

#endif /* XTQ_APPS_NCCL_DL_H */
