/*
 * Inside the shim: the back-end interface, the CUDA staging helpers and
 * the communicator. Every back-end is a const operations table; the core
 * (shim.c) packs, stages and orders, a back-end only reduces one
 * contiguous buffer at a time.
 */
#ifndef XTQ_SHIM_INTERNAL_H
#define XTQ_SHIM_INTERNAL_H

#include "xtq_shim.h"

#include <stdbool.h>

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#endif
#define SHIM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- back-end interface ---------------------------------------------- */

/* The back-end reduces device buffers itself (no staging by the core);
 * set by open() in shim_backend.caps, as it depends on the agents found. */
#define SHIM_CAP_DEVICE_MEM (1u << 0)

/* A back-end's request, stored by the core: room for an MPI_Request, a
 * pointer to a libxtq_coll request, or an index. */
typedef union shim_breq {
    void *ptr;
    uint64_t u64;
    unsigned char bytes[32];
} shim_breq_t;

struct shim_backend;

struct shim_backend_ops {
    const char *name;
    /* 1 when the back-end can run here; else 0 and *why says why. */
    int (*available)(const char **why);
    /* Create the back-end (collective); fills rank and size. */
    int (*open)(const xtq_shim_attr_t *attr, struct shim_backend **out, char *err, size_t errlen);
    int (*close)(struct shim_backend *be);
    /* 1 when the back-end reduces `type` with `op` (the core already
     * checked xtq_reduce_supported). */
    int (*supported)(struct shim_backend *be, enum xtq_datatype type, enum xtq_op op);
    /* Start recv = op(send) over workers; send == recv: in place. `mem` is
     * HOST unless caps has SHIM_CAP_DEVICE_MEM. Requests complete in issue
     * order or not; every worker issues them in the same order. */
    int (*iallreduce)(struct shim_backend *be, const void *send, void *recv, size_t count,
                      enum xtq_datatype type, enum xtq_op op, enum xtq_shim_mem mem,
                      shim_breq_t *req);
    /* *done = 1 when all n requests completed (they are then released). */
    int (*testall)(struct shim_backend *be, shim_breq_t *reqs, size_t n, int *done);
    /* Block until all n requests completed and release them. */
    int (*waitall)(struct shim_backend *be, shim_breq_t *reqs, size_t n);
    int (*barrier)(struct shim_backend *be);
    /* Run fn(arg) where the device may idle: CUDA frees wait for an idle
     * device, which a running CUDA processor never lets it be
     * (xtq_cuda_quiesce). Returns fn's outcome: 0 when it ran, else an
     * error and fn did not run (the caller leaks rather than hangs).
     * NULL: fn runs directly. */
    int (*device_idle)(struct shim_backend *be, void (*fn)(void *arg), void *arg);
};

/* Embedded first in each back-end's own struct (container_of). */
struct shim_backend {
    const struct shim_backend_ops *ops;
    size_t rank, size;
    unsigned caps; /* SHIM_CAP_* */
};

extern const struct shim_backend_ops shim__mpi_ops;
extern const struct shim_backend_ops shim__xtq_ops;
extern const struct shim_backend_ops shim__nccl_ops;

#if defined(MPI_VERSION) /* included after <mpi.h> */
/* The communicator of an MPI-bootstrapped back-end (backend_mpi.c): MPI
 * initialized if the caller has not, and a duplicate of attr->mpi_comm
 * (MPI_COMM_WORLD by default) with errors returned; base's rank and size
 * are its. */
int shim__mpi_comm_open(const xtq_shim_attr_t *attr, MPI_Comm *comm, struct shim_backend *base,
                        char *err, size_t errlen);
void shim__mpi_comm_close(MPI_Comm *comm);
/* A blocking MPI_Allreduce of host memory in libxtq's types (-XTQ_ENOSYS
 * for a type or operation MPI lacks here). */
int shim__mpi_allreduce(MPI_Comm comm, const void *send, void *recv, size_t count,
                        enum xtq_datatype type, enum xtq_op op);
#endif

/* ---- CUDA helpers (shim_cuda.c; stubs return -XTQ_ENOSYS without CUDA) - */

int shim__cuda_available(const char **why);
int shim__cuda_host_alloc(void **p, size_t bytes); /* pinned */
void shim__cuda_host_free(void *p);
int shim__cuda_alloc(void **p, size_t bytes);
void shim__cuda_free(void *p);
/* Copies on the legacy default stream; shim__cuda_sync waits for them. */
int shim__cuda_copy_d2h(void *dst, const void *src, size_t bytes);
int shim__cuda_copy_h2d(void *dst, const void *src, size_t bytes);
int shim__cuda_copy_d2d(void *dst, const void *src, size_t bytes);
int shim__cuda_sync(void);
/* The CUDA device this thread uses (cudaGetDevice); 0 without CUDA. */
int shim__cuda_device(void);
const char *shim__cuda_last_error(void);

#endif /* XTQ_SHIM_INTERNAL_H */
