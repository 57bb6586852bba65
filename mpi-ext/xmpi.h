/*
 * libxtq_mpi internals: the one header every file of the layer includes
 * first. The layer sits between an MPI program and its MPI library
 * (PMPI): it uses libxtq's public API only, and the PMPI_ calls.
 */
#ifndef XTQ_MPI_XMPI_H
#define XTQ_MPI_XMPI_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <mpi.h>

#include <xtq/xtq.h>
#include <xtq/mpi.h>

#include "task.h"

/* Every MPI_ and MPIX_ function the layer defines (the library is built
 * with hidden visibility). */
#define XMPI_EXPORT __attribute__((visibility("default")))

#define XMPI_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Waitall / Testall without statuses. GCC 12 reads MPI_STATUSES_IGNORE,
 * a null pointer, as a zero-sized array the call writes into. */
#if defined(__GNUC__) && !defined(__clang__)
#define XMPI_NO_STRINGOP_BEGIN                                                                     \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wstringop-overflow\"")
#define XMPI_NO_STRINGOP_END _Pragma("GCC diagnostic pop")
#else
#define XMPI_NO_STRINGOP_BEGIN
#define XMPI_NO_STRINGOP_END
#endif

static inline int xtq__mpi_waitall(int n, MPI_Request *req)
{
    XMPI_NO_STRINGOP_BEGIN
    return PMPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    XMPI_NO_STRINGOP_END
}

static inline int xtq__mpi_testall(int n, MPI_Request *req, int *flag)
{
    XMPI_NO_STRINGOP_BEGIN
    return PMPI_Testall(n, req, flag, MPI_STATUSES_IGNORE);
    XMPI_NO_STRINGOP_END
}

/* ---- logging (XTQ_LOG_LEVEL, XTQ_LOG_SUBSYS containing "mpi") ---------- */

enum { XMPI_LOG_ERROR, XMPI_LOG_WARN, XMPI_LOG_INFO, XMPI_LOG_DEBUG };
extern int xtq__mpi_log_level;
void xtq__mpi_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define xmpi_log(level, ...)                                                                       \
    do {                                                                                           \
        if (__builtin_expect(XMPI_LOG_##level <= xtq__mpi_log_level, 0))                           \
            xtq__mpi_log(XMPI_LOG_##level, __VA_ARGS__);                                           \
    } while (0)
#define xmpi_warn_once(...)                                                                        \
    do {                                                                                           \
        static atomic_int once_;                                                                   \
        if (XMPI_LOG_WARN <= xtq__mpi_log_level &&                                                 \
            atomic_exchange_explicit(&once_, 1, memory_order_relaxed) == 0)                        \
            xtq__mpi_log(XMPI_LOG_WARN, __VA_ARGS__);                                              \
    } while (0)

/* ---- why a window is or is not accelerated ------------------------------- */

/* X(id, text) */
#define XTQ__MPI_REASONS(X)                                                                        \
    X(ACCELERATED, "accelerated")                                                                  \
    X(OFF, "XTQ_MPI=off")                                                                          \
    X(INIT_FAILED, "libxtq failed to initialise")                                                  \
    X(INFO_OFF, "info xtq_accelerate=false")                                                       \
    X(DYNAMIC, "dynamic window")                                                                   \
    X(SHARED, "shared-memory window (MPI_Win_allocate_shared)")                                    \
    X(ALLOCATE_SHM, "MPI_Win_allocate on one host (the MPI's shared memory is faster)")            \
    X(GPU_NO_AGENT, "window in GPU memory and no CUDA agent")                                      \
    X(GPU_OTHER_DEVICE, "window on a GPU other than the layer's (XTQ_MPI_CUDA_DEVICE)")             \
    X(NO_INDEX, "no libxtq table index free on every rank")                                        \
    X(REGISTER, "registering the window with libxtq failed")                                       \
    X(MPI_WIN_FAILED, "the MPI could not create the window")                                       \
    X(PEER, "another rank of the window could not accelerate it")

#define XTQ__MPI_REASON_ENUM_(id, text) XTQ__MPI_R_##id,
enum xtq__mpi_reason { XTQ__MPI_REASONS(XTQ__MPI_REASON_ENUM_) XTQ__MPI_R_COUNT };
#undef XTQ__MPI_REASON_ENUM_

const char *xtq__mpi_reason_text(enum xtq__mpi_reason r);

/* ---- process-wide state (init.c) ------------------------------------------ */

#define XTQ__MPI_MAX_QUEUES 4

enum xtq__mpi_stat {
    XTQ__MPI_S_ACC,       /* accumulates run as tasks */
    XTQ__MPI_S_FETCH,     /* fetching accumulates run as tasks */
    XTQ__MPI_S_PUT_XTQ,   /* MPI_Put as tasks */
    XTQ__MPI_S_GET_XTQ,   /* MPI_Get as tasks */
    XTQ__MPI_S_RMA_MPI,   /* put/get on accelerated windows left to the MPI */
    XTQ__MPI_S_XTQ_PUTS,  /* XtqPuts issued (lock commands and resends included) */
    XTQ__MPI_S_LOCK_PUTS, /* ... of which lock / unlock commands on their own */
    XTQ__MPI_S_REFUSED,   /* first operations of an epoch refused (lock busy) */
    XTQ__MPI_S_BYTES,     /* operand bytes sent */
    XTQ__MPI_S_ERRORS,    /* failed XtqPuts */
    XTQ__MPI_S_WIN_SHELL, /* windows whose put/get went to XTQ because the MPI failed */
    XTQ__MPI_S_COUNT
};

struct xtq__mpi_global {
    bool on;                      /* the layer accelerates (libxtq up) */
    bool stats;                   /* XTQ_MPI_STATS */
    bool put_get_xtq;             /* XTQ_MPI_PUT_GET=xtq */
    bool shm_windows_xtq;         /* XTQ_MPI_SHM_WINDOWS=xtq */
    enum xtq__mpi_reason why_off; /* when !on */
    char why_detail[128];
    int thread_level; /* provided by the MPI */
    MPI_Comm world;   /* our dup of MPI_COMM_WORLD: bootstrap and finalize */
    MPI_Group world_group;
    int xrank, xsize; /* XTQ rank = rank in MPI_COMM_WORLD */
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu, *cuda;
    int cuda_device; /* the CUDA agent's device ordinal */
    size_t max_put; /* xtq_put_max_size */
    uint32_t table_size;
    /* Queues at indices [0, nq) on the CPU agent (origin r uses r % nq,
     * which keeps one origin's commands in one queue: the barrier bit then
     * orders them); index nq on the CUDA agent, where there is one. */
    xtq_queue_t *queue[XTQ__MPI_MAX_QUEUES];
    uint32_t nq;
    xtq_queue_t *cuda_queue;
    /* Kernel index 0: the sync task (window locks), on the CPU agent. */
    xtq_kernel_t *sync_kernel;
    /* Target state of each window by its kernel index (the sync task
     * finds its window there). */
    _Atomic(struct xtq__mpi_target *) *target_by_index;
    pthread_mutex_t index_lock; /* index allocation */
    uint8_t *index_used;        /* table_size entries */
    int win_keyval, type_keyval;
    _Atomic uint64_t stat[XTQ__MPI_S_COUNT];
    _Atomic uint64_t win_by_reason[XTQ__MPI_R_COUNT];
    _Atomic uint64_t calls_by_reason[XTQ__MPI_R_COUNT];
};

extern struct xtq__mpi_global xtq__mpi;

static inline void xtq__mpi_count(enum xtq__mpi_stat s, uint64_t n)
{
    atomic_fetch_add_explicit(&xtq__mpi.stat[s], n, memory_order_relaxed);
}

/* Read a parameter declared in xtq/params.def (value, else default). */
const char *xtq__mpi_param(const char *name);

/* ---- datatypes (datatype.c) ------------------------------------------------ */

/* Element type of a layout that is not one basic type (put/get only). */
#define XTQ__MPI_DT_MIXED (-1)

/* A datatype flattened into byte blocks of one instance, in type-map
 * order, adjacent blocks merged. Shared (refcounted) between the cache on
 * the datatype and operations still in flight. */
struct xtq__mpi_layout {
    _Atomic int refs;
    int dt;           /* enum xtq_datatype of every element, or XTQ__MPI_DT_MIXED */
    size_t elsize;    /* bytes per element (1 when mixed) */
    MPI_Aint extent;  /* stride between instances */
    MPI_Aint true_lb; /* first byte an instance touches */
    MPI_Aint true_ub; /* one past the last */
    uint64_t size;    /* data bytes per instance */
    bool contiguous;  /* one block of `size` bytes at 0, extent == size */
    size_t nblocks;
    struct xtq__mpi_span {
        int64_t off;  /* bytes from the instance's origin */
        uint64_t len; /* bytes */
        uint64_t pos; /* data bytes of the instance before this block */
    } blocks[];
};

/* MPI_Op -> xtq_op; -1 for a user-defined or unknown operation. */
int xtq__mpi_op(MPI_Op op);

/* Layout of a datatype (a reference the caller drops with _put), or NULL
 * with *err an MPI error class (MPI_ERR_TYPE: a combiner not handled). */
struct xtq__mpi_layout *xtq__mpi_layout_get(MPI_Datatype type, int *err);
void xtq__mpi_layout_put(struct xtq__mpi_layout *l);

/* Build (uncached) from a datatype: for tests. */
struct xtq__mpi_layout *xtq__mpi_layout_build(MPI_Datatype type, int *err);

/* Copy `n` data bytes starting at data byte `from` of `count` instances of
 * `l` at `buf` into `packed` (gather) or back (scatter). */
void xtq__mpi_gather(const void *buf, const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                     void *packed);
void xtq__mpi_scatter(void *buf, const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                      const void *packed);

/* The byte blocks of data bytes [from, from + n) of `count` instances,
 * relative to the buffer: calls fn(arg, off, len) for each, merged. */
void xtq__mpi_spans(const struct xtq__mpi_layout *l, uint64_t from, uint64_t n,
                    void (*fn)(void *arg, int64_t off, uint64_t len), void *arg);

/* Lowest and highest byte (exclusive) `count` instances touch. */
void xtq__mpi_layout_bounds(const struct xtq__mpi_layout *l, uint64_t count, int64_t *lo,
                            int64_t *hi);

int xtq__mpi_datatype_init(void);
void xtq__mpi_datatype_fini(void);

/* ---- windows (window.c) ------------------------------------------------------ */

/* An XtqPut built but not sent yet: a lock epoch keeps its latest command
 * back, so that the epoch's first carries the lock request and its last
 * the release (epoch.c). Its memory is a pending record of the window. */
struct xtq__mpi_held {
    struct xtq__mpi_args args;
    struct xtq__mpi_pending *pe; /* command space at pe->data */
    struct iovec iov[3];
    size_t niov;
    xtq_put_param_t param; /* counter (and result); no completion */
    bool barrier;          /* the command's own ordering (accumulates) */
    uint64_t bytes;        /* operand bytes (stats) */
};

struct xtq__mpi_peer {
    int xrank;      /* XTQ rank */
    uint32_t queue; /* queue index for this process's commands to it */
    uint32_t gpu;   /* its window memory is on a GPU (CUDA agent) */
    uint64_t size;  /* its window's bytes */
    int disp_unit;
    uint8_t lock;      /* lock type this process holds on it (0: none) */
    uint8_t nocheck;   /* ... taken with MPI_MODE_NOCHECK (nothing to release) */
    uint8_t mpi_dirty; /* MPI put/get to it since its last completion */
    uint8_t granted;   /* the lock is known to be held at the target */
    bool has_held;     /* `held` waits to be sent */
    struct xtq__mpi_held held;
};

struct xtq__mpi_win;

/* What must outlive a put until it is DONE, in one allocation: the command
 * (libxtq gathers it with the payload and does not copy it), the target
 * layout prefix, a packed operand, a bounce buffer for results that are
 * unpacked into a derived datatype then. */
struct xtq__mpi_pending {
    struct xtq__mpi_pending *next;
    int target;                 /* rank in the window */
    size_t len;                 /* bytes of data[] */
    struct xtq__mpi_layout *rl; /* unpack: result layout, or NULL */
    void *rbuf;                 /* ... into this buffer */
    uint64_t rfrom, rlen;       /* ... these data bytes, from data + roff */
    size_t roff;
    _Alignas(16) uint8_t data[];
};

/* A pending record with `len` bytes of data (zeroed header), or NULL. */
struct xtq__mpi_pending *xtq__mpi_pending_new(int target, size_t len);
/* Put it on the window's list (freed after the next completion). */
void xtq__mpi_pending_add(struct xtq__mpi_win *w, struct xtq__mpi_pending *p);

struct xtq__mpi_win {
    MPI_Win win; /* the program's handle */
    bool accelerated;
    enum xtq__mpi_reason reason;
    int flavor; /* MPI_WIN_FLAVOR_* */
    /* --- accelerated windows only --- */
    bool shell;       /* the MPI window holds no memory */
    bool put_get_xtq; /* put/get as tasks */
    bool ordered;     /* accumulate_ordering is not "none" */
    bool gpu;         /* this process's memory is on a GPU */
    MPI_Comm comm;    /* private dup of the window's communicator */
    int rank, size;
    void *base;
    MPI_Aint win_size;
    int disp_unit;
    void *own_mem;   /* memory the layer allocated (shell allocate) */
    uint32_t kindex; /* kernel index, the same on every rank */
    xtq_kernel_t *kernel;
    xtq_counter_t *counter;
    struct xtq__mpi_target tgt;
    struct xtq__mpi_peer *peer;
    pthread_mutex_t lock;      /* pending, epoch state */
    pthread_mutex_t hold_lock; /* peers' granted / held (taken before `lock`) */
    int local_err;             /* first -XTQ_E* of a put waited on alone, not yet raised */
    struct xtq__mpi_pending *pending;
    uint64_t pending_bytes;
    uint64_t err_seen;
    bool any_mpi_dirty;
    bool lock_all;
    /* PSCW */
    int *post_to, npost_to; /* ranks the exposure epoch was posted to */
    MPI_Request *post_req;
    MPI_Request *wait_req;    /* one per post_to, while a wait/test is pending */
    int *start_to, nstart_to; /* ranks of the access epoch */
    MPI_Request *complete_req;
    int ncomplete_req;
    /* counts */
    _Atomic uint64_t count[XTQ__MPI_S_COUNT];
    _Atomic uint64_t passthrough;
};

int xtq__mpi_window_init(void);

/* A table index free on every rank of `comm` (collective; windows: the
 * lowest, top: the highest above the layer's queues), and its release. */
int xtq__mpi_choose_index(MPI_Comm comm, bool top, uint32_t *index);
void xtq__mpi_release_index(uint32_t index);

/* ---- collectives routed to libxtq_coll (coll.c) ------------------------------- */

int xtq__mpi_coll_init(void);
/* Collective over MPI_COMM_WORLD, before libxtq goes down. */
void xtq__mpi_coll_fini(void);
/* XTQ_MPI_STATS lines (collective over MPI_COMM_WORLD). */
void xtq__mpi_coll_stats(void);

/* The layer's record of a window, or NULL (layer off, unknown handle). */
struct xtq__mpi_win *xtq__mpi_win_get(MPI_Win win);

/* Count a call on `w` (NULL or not accelerated: a pass-through). */
static inline bool xtq__mpi_accelerated(struct xtq__mpi_win *w)
{
    if (w && w->accelerated)
        return true;
    if (w) {
        atomic_fetch_add_explicit(&w->passthrough, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&xtq__mpi.calls_by_reason[w->reason], 1, memory_order_relaxed);
    }
    return false;
}

static inline void xtq__mpi_wcount(struct xtq__mpi_win *w, enum xtq__mpi_stat s, uint64_t n)
{
    atomic_fetch_add_explicit(&w->count[s], n, memory_order_relaxed);
    xtq__mpi_count(s, n);
}

/* Raise `code` on the window's error handler; returns it. */
int xtq__mpi_win_error(struct xtq__mpi_win *w, int code);

/* MPI error class for a libxtq error. */
int xtq__mpi_errclass(int xtq_err);

/* ---- operations (rma.c) and epochs (epoch.c) --------------------------------- */

/* Complete everything this process issued on `w` to `target` (a rank in
 * the window, or -1: every rank): the MPI's own operations, the XtqPuts,
 * then unpack results. Returns an MPI error code (raised already). */
int xtq__mpi_complete(struct xtq__mpi_win *w, int target);

/* Send a lock/unlock command to `target`; for a lock, *granted says
 * whether it was taken. `comp` NULL: counted on the window's counter. */
int xtq__mpi_sync_op(struct xtq__mpi_win *w, int target, int kind, int type, uint64_t *granted,
                     xtq_completion_t *comp);

/* Send a built command with `flags` (XTQ__MPI_F_*); `comp` non-NULL: its
 * outcome goes there (and not to the window's counter). 0 or -XTQ_E*. */
int xtq__mpi_fire(struct xtq__mpi_win *w, int target, struct xtq__mpi_held *h, uint8_t flags,
                  xtq_completion_t *comp);

/* A built command of an operation: sent, or kept back by a lock epoch
 * (`must_send`: its caller waits for it now). 0 or -XTQ_E*. */
int xtq__mpi_emit(struct xtq__mpi_win *w, int target, struct xtq__mpi_held *h, bool must_send);

/* The lock of a lock epoch to `target` held before the MPI's own put/get
 * goes there. 0 or -XTQ_E*. */
int xtq__mpi_epoch_need_lock(struct xtq__mpi_win *w, int target);

/* Wait for a completion (progressing): 0 or -XTQ_E*. */
int xtq__mpi_wait(xtq_completion_t *comp);

/* The CPU kernels the layer registers (task.c). */
void xtq__mpi_cpu_task(const xtq_dispatch_t *d, void *kernarg);
void xtq__mpi_sync_task(const xtq_dispatch_t *d, void *kernarg);

/* ---- CUDA (task_cuda.cu, or stubs without CUDA) ------------------------------ */

/* 1 when `ptr` is CUDA device memory (libcuda looked up at run time). */
int xtq__mpi_is_device_ptr(const void *ptr);
/* The device ordinal of CUDA device memory at `ptr`; -1 for host memory
 * or an ordinal CUDA would not tell. */
int xtq__mpi_device_of(const void *ptr);
/* Attach the layer's CUDA task module to `agent`; 0 or -XTQ_E*. */
int xtq__mpi_cuda_attach(xtq_agent_t *agent);
/* The device address of libxtq_coll's task in the layer's module. */
int xtq__mpi_cuda_coll_task(uint64_t *fn);
void xtq__mpi_cuda_detach(xtq_agent_t *agent);
/* The accumulate task's kernel object on the CUDA agent. */
int xtq__mpi_cuda_kernel(xtq_agent_t *agent, xtq_kernel_t **kernel);

#endif /* XTQ_MPI_XMPI_H */
