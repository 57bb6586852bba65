/*
 * What the MPI layer's commands carry, and the target-side CPU task.
 *
 * Every command is one kernel dispatch of the window's kernel (one
 * registration per window, bounded by the window's size) with the
 * arguments below. Plain C: the CUDA tasks (task_cuda.cu) include it.
 *
 * Payload layout: [nblocks target blocks][operand elements][CAS compare]
 *  - target blocks (struct xtq__mpi_block): where the elements go,
 *    relative to the target pointer; none (nblocks 0) means contiguous.
 *    They travel in the payload because kernel arguments are bounded.
 *  - operand: `count` elements, packed, of the one basic type `dtype`.
 * Fetching kinds return the target's previous contents, packed in block
 * order, through the put's result buffer.
 */
#ifndef XTQ_MPI_TASK_H
#define XTQ_MPI_TASK_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Wire version of the arguments: a peer built from other sources is
 * refused (-XTQ_EVERSION) instead of misread. */
#define XTQ__MPI_MAGIC 0x324d5158u /* "XQM2": flags and a one-byte kind */

enum xtq__mpi_kind {
    XTQ__MPI_ACC = 1,     /* target = target op operand (atomic per element) */
    XTQ__MPI_GET_ACC = 2, /* result = target; target = target op operand */
    XTQ__MPI_CAS = 3,     /* result = target; if target == compare: target = operand */
    XTQ__MPI_PUT = 4,     /* target = operand (MPI_Put: no atomicity) */
    XTQ__MPI_GET = 5,     /* result = target (MPI_Get) */
    XTQ__MPI_LOCK = 6,    /* try to take the window lock (`op`: a lock type); result: 1 taken */
    XTQ__MPI_UNLOCK = 7,  /* release it (`op`: the lock type held) */
    XTQ__MPI_KIND_END
};

/* `op` of LOCK / UNLOCK. */
enum { XTQ__MPI_LOCK_SHARED = 1, XTQ__MPI_LOCK_EXCLUSIVE = 2 };

/* `flags` of a data command on a CPU window: the passive-target lock rides
 * with the epoch's first and last operations (docs/mpi.md, "Passive
 * target"). ACQUIRE: take the origin's lock of this type before applying;
 * when it cannot be had the command is refused (-XTQ_EBUSY), nothing is
 * applied and no lock state changes. RELEASE: give the lock back after
 * applying. A command that fails for any reason changes no lock state. */
#define XTQ__MPI_F_ACQUIRE(type)   ((uint8_t)(type))
#define XTQ__MPI_F_RELEASE(type)   ((uint8_t)((type) << 2))
#define XTQ__MPI_F_ACQUIRE_TYPE(f) ((f)&3u)
#define XTQ__MPI_F_RELEASE_TYPE(f) (((f) >> 2) & 3u)

/* Kernel arguments; the engine rewrites the first two (registry.h,
 * XTQ_REGISTER_BOUNDED): target from a byte offset into the window to a
 * pointer, after checking offset + extent <= window size; payload to
 * where the payload landed. */
struct xtq__mpi_args {
    uint64_t target;  /* argument 0 */
    uint64_t payload; /* argument 1 */
    uint64_t extent;  /* argument 2: bytes from target the task may touch */
    uint64_t count;   /* elements */
    uint32_t nblocks; /* target blocks at the start of the payload (0: contiguous) */
    uint8_t kind;     /* enum xtq__mpi_kind */
    uint8_t flags;    /* XTQ__MPI_F_*: lock taken / given back with a data command */
    uint8_t op;       /* enum xtq_op (or the lock type) */
    uint8_t dtype;    /* enum xtq_datatype */
    uint32_t origin;  /* the origin's rank in the window (locks) */
    uint32_t magic;   /* XTQ__MPI_MAGIC */
};

/* One target block: `count` elements at byte `offset` from the target. */
struct xtq__mpi_block {
    uint64_t offset;
    uint64_t count;
};

#define XTQ__MPI_KERNARG_SIZE ((uint32_t)sizeof(struct xtq__mpi_args))

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include <pthread.h>
#include <stdbool.h>

/* Stripes of the target-side lock that makes accumulates atomic per
 * element: tasks from several origins run at once on the CPU agent's
 * workers; each takes the stripes its bytes fall in, in increasing order. */
#define XTQ__MPI_STRIPES      64
#define XTQ__MPI_STRIPE_SHIFT 12 /* 4 KiB of window per stripe */

/* What a window's tasks see on the target (the kernel's user_data). */
struct xtq__mpi_target {
    uint8_t *base; /* window memory (host) */
    uint64_t size; /* bytes */
    pthread_mutex_t stripe[XTQ__MPI_STRIPES];
    pthread_mutex_t sync; /* the passive-target lock's state */
    int64_t exclusive;    /* origin holding the exclusive lock, or -1 */
    uint64_t shared;      /* shared holders */
    uint64_t refused;     /* data commands whose ACQUIRE was refused (under `sync`) */
};

void xtq__mpi_target_init(struct xtq__mpi_target *t, void *base, uint64_t size);
void xtq__mpi_target_fini(struct xtq__mpi_target *t);

/* The lock of this process's own window, taken (whether it was had now)
 * or given back here rather than by a command to the sync task: what
 * MPI_Win_lock_all does for its own window, sending nothing. */
bool xtq__mpi_lock_local_try(struct xtq__mpi_target *t, unsigned type, uint32_t origin);
int xtq__mpi_lock_local_drop(struct xtq__mpi_target *t, unsigned type, uint32_t origin);

/*
 * Run one command against a window, on the calling thread: what the CPU
 * task does, without the agent (unit tests call it directly).
 * `payload_len` is what the payload holds when the caller knows it
 * (SIZE_MAX: unknown, trust the arguments' own consistency).
 * @return 0 or a negative XTQ_E* code (nothing is written then, except
 *         for a lock command's refusal, which is a result of 0, not an
 *         error); -XTQ_EBUSY: a data command's ACQUIRE was refused.
 */
int xtq__mpi_task_run(struct xtq__mpi_target *t, const struct xtq__mpi_args *a, size_t payload_len,
                      void *result, size_t result_len);
#endif

#endif /* XTQ_MPI_TASK_H */
