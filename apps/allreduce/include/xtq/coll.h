/*
 * libxtq_coll: reduce and allreduce as schedules of XtqPuts, without MPI.
 *
 * A team is a set of ranks of one libxtq context. Each step of a
 * collective is an XtqPut whose task reduces (or copies) the arriving
 * piece into the receiver's buffer on the receiver's agent (the CPU agent
 * for host memory, the CUDA agent for device memory); the next step's put
 * is triggered by a local signal that those tasks decrement, so steps
 * follow each other without the application thread. Algorithms are
 * chosen as MPICH chooses them (recursive doubling for small vectors,
 * Rabenseifner's reduce-scatter + allgather for medium ones, a pipelined
 * ring for large ones), for any number of ranks, every predefined
 * operation and type of <xtq/reduce.h>, in place or not. docs/allreduce.md
 * describes the algorithms, the receiver-readiness protocol and the
 * figures.
 *
 * Results are the same bits on every rank. Ranks that call one collective
 * with different counts, types, operations or roots all get -XTQ_EPROTO
 * (none hangs, no buffer is written out of bounds); the team is then
 * broken: later calls return the same error until it is destroyed.
 *
 * Threading: one thread at a time per team (as an MPI communicator); the
 * calls of different teams may run concurrently.
 */
#ifndef XTQ_COLL_H
#define XTQ_COLL_H

#include <xtq/xtq.h>

XTQ_EXTERN_C_BEGIN

#if defined(XTQ_COLL_BUILDING)
#define XTQ_COLL_API __attribute__((visibility("default")))
#else
#define XTQ_COLL_API
#endif

/** A team: ranks of a context that run collectives together. */
typedef struct xtq_coll_team xtq_coll_team_t;
/** A nonblocking collective in flight. */
typedef struct xtq_coll_req xtq_coll_req_t;

/** Pass as sendbuf for an in-place call (the input is in recvbuf). */
#define XTQ_COLL_IN_PLACE ((const void *)1)

enum xtq_coll_kind {
    XTQ_COLL_ALLREDUCE = 0,
    XTQ_COLL_REDUCE = 1,
};

/** Algorithms (XTQ_COLL_ALG forces one; AUTO chooses by size and ranks). */
enum xtq_coll_alg {
    XTQ_COLL_ALG_AUTO = 0,
    XTQ_COLL_ALG_RD = 1,           /**< recursive doubling */
    XTQ_COLL_ALG_RABENSEIFNER = 2, /**< reduce-scatter (halving) + allgather / gather */
    XTQ_COLL_ALG_RING = 3,         /**< pipelined ring reduce-scatter + allgather / gather */
    XTQ_COLL_ALG_COUNT
};

/** Where a team's buffers live, and so which agent reduces into them. */
enum xtq_coll_mem {
    XTQ_COLL_MEM_HOST = 0, /**< host memory: the CPU agent */
    XTQ_COLL_MEM_CUDA = 1, /**< CUDA device memory: the CUDA agent */
};

/** Bits of xtq_coll_team_attr_t.field_mask. */
enum xtq_coll_team_attr_field {
    XTQ_COLL_TEAM_ATTR_FIELD_RANKS = 1u << 0,     /**< ranks, nranks */
    XTQ_COLL_TEAM_ATTR_FIELD_MEM = 1u << 1,       /**< mem */
    XTQ_COLL_TEAM_ATTR_FIELD_INDEX = 1u << 2,     /**< index */
    XTQ_COLL_TEAM_ATTR_FIELD_INFLIGHT = 1u << 3,  /**< max_inflight */
    XTQ_COLL_TEAM_ATTR_FIELD_ALG = 1u << 4,       /**< alg */
    XTQ_COLL_TEAM_ATTR_FIELD_CUDA_TASK = 1u << 5, /**< cuda_task */
    XTQ_COLL_TEAM_ATTR_FIELD_CUDA_DEVICE = 1u << 6, /**< cuda_device */
};

/**
 * How a team is made (only the fields named in field_mask are read).
 * Defaults: every rank of the context in rank order, host memory, the
 * table index below, XTQ_COLL_INFLIGHT, algorithms from XTQ_COLL_ALG.
 */
typedef struct xtq_coll_team_attr {
    uint64_t field_mask;
    /** Context ranks of the team in team-rank order (copied); the caller
     *  must be one of them. Every member passes the same list. */
    const int *ranks;
    int nranks;
    enum xtq_coll_mem mem;
    /**
     * The coordinated index the team registers its task at in the
     * function (host) or kernel (CUDA) table and its queue at in the queue
     * table; the same on every member. Default: xtq_table_size() - 1 - k
     * for the k-th team this process created, so members must create their
     * teams in the same order (as MPI_Comm_dup) unless they set it.
     */
    uint32_t index;
    /** Nonblocking collectives a rank may have posted and not completed;
     *  more wait (queued in order) until earlier ones complete. */
    uint32_t max_inflight;
    /** Force an algorithm on every call (AUTO: choose). Same on every member. */
    enum xtq_coll_alg alg;
    /**
     * CUDA teams: the device address (xtq_cuda_task_address) of
     * xtq_coll_cuda_task (<xtq/coll_cuda.cuh>) in the task module the
     * caller has attached to the CUDA agent. One module is attached per
     * agent, so a program (or library, e.g. mpi-ext) with its own module
     * compiles the task into it and passes its address here; 0 or unset:
     * the team attaches libxtq_coll's own module (-XTQ_EBUSY if another
     * is attached).
     */
    uint64_t cuda_task;
    /**
     * CUDA teams: the device (CUDA ordinal) whose memory the team's
     * buffers are in; its agent runs the reductions. Unset: the calling
     * thread's current device (cudaGetDevice) at creation.
     */
    int32_t cuda_device;
} xtq_coll_team_attr_t;

/**
 * Create a team. Collective over its members (not over the context):
 * returns once every member has registered, so no put of the team can
 * reach a member that is not ready.
 * @return 0, -XTQ_EINVAL, -XTQ_ENOMEM, -XTQ_ENOAGENT (no agent for `mem`),
 *         -XTQ_EEXIST (the index is taken), -XTQ_ETIMEDOUT (a member never
 *         came: XTQ_COLL_TIMEOUT_MS).
 */
XTQ_COLL_API int xtq_coll_team_create(xtq_ctx_t *ctx, const xtq_coll_team_attr_t *attr,
                                      xtq_coll_team_t **team);

/**
 * Destroy a team. Collective over its members; no request may be in
 * flight. @return 0, -XTQ_EBUSY (requests in flight), or the first error
 * of the final barrier (the team is freed all the same).
 */
XTQ_COLL_API int xtq_coll_team_destroy(xtq_coll_team_t *team);

/** This process's rank in the team. */
XTQ_COLL_API int xtq_coll_team_rank(const xtq_coll_team_t *team);
/** Number of ranks in the team. */
XTQ_COLL_API int xtq_coll_team_size(const xtq_coll_team_t *team);

/**
 * Allreduce: on return, recvbuf on every rank holds op applied over every
 * rank's `count` elements of sendbuf (or of recvbuf with XTQ_COLL_IN_PLACE).
 * Buffers are in the team's memory (host or CUDA device memory).
 * @return 0; -XTQ_EINVAL (bad arguments; an operation MPI does not allow
 *         in reductions: REPLACE, NO_OP; a pair xtq_reduce_supported()
 *         refuses); -XTQ_EPROTO (ranks disagreed on count, type, op or
 *         root); a put's error (-XTQ_EHOSTDOWN ...).
 */
XTQ_COLL_API int xtq_coll_allreduce(xtq_coll_team_t *team, const void *sendbuf, void *recvbuf,
                                    size_t count, enum xtq_datatype type, enum xtq_op op);

/**
 * Reduce to `root` (a team rank). recvbuf matters only at the root (may be
 * NULL elsewhere); XTQ_COLL_IN_PLACE only at the root. Errors as allreduce.
 */
XTQ_COLL_API int xtq_coll_reduce(xtq_coll_team_t *team, const void *sendbuf, void *recvbuf,
                                 size_t count, enum xtq_datatype type, enum xtq_op op, int root);

/** Nonblocking allreduce: the buffers belong to the library until the
 *  request completes (xtq_coll_test / xtq_coll_wait). */
XTQ_COLL_API int xtq_coll_iallreduce(xtq_coll_team_t *team, const void *sendbuf, void *recvbuf,
                                     size_t count, enum xtq_datatype type, enum xtq_op op,
                                     xtq_coll_req_t **req);

/** Nonblocking reduce. */
XTQ_COLL_API int xtq_coll_ireduce(xtq_coll_team_t *team, const void *sendbuf, void *recvbuf,
                                  size_t count, enum xtq_datatype type, enum xtq_op op, int root,
                                  xtq_coll_req_t **req);

/**
 * Poll a request (and move the team's queued requests along). When it has
 * completed, `*done` is 1, the request is freed and its status returned;
 * else `*done` is 0 and 0 is returned.
 */
XTQ_COLL_API int xtq_coll_test(xtq_coll_req_t *req, int *done);

/**
 * Wait for a request, then free it.
 * @return its status, or -XTQ_ETIMEDOUT (the request is kept: wait again).
 */
XTQ_COLL_API int xtq_coll_wait(xtq_coll_req_t *req, int64_t timeout_ns);

/** The algorithm a call with these arguments would use on this team. */
XTQ_COLL_API enum xtq_coll_alg xtq_coll_algorithm(const xtq_coll_team_t *team,
                                                  enum xtq_coll_kind kind, size_t count,
                                                  enum xtq_datatype type);

/** "rd", "rabenseifner", "ring" or "auto". */
XTQ_COLL_API const char *xtq_coll_alg_name(enum xtq_coll_alg alg);

/** How steps are chained on this team. */
enum xtq_coll_triggers {
    XTQ_COLL_TRIGGERS_ENGINE = 0, /**< triggered XtqPuts: the engine sends */
    XTQ_COLL_TRIGGERS_TASK = 1,   /**< the receive task sends the next step itself */
};
/** The trigger mechanism in use (see XTQ_COLL_TRIGGERS). */
XTQ_COLL_API enum xtq_coll_triggers xtq_coll_team_triggers(const xtq_coll_team_t *team);

/**
 * How many peers read this rank's large pieces straight from its memory
 * (same-host single copy, XTQ_COLL_CMA): 0 when every piece travels in
 * its put (another provider than shm, CMA refused, device memory, or
 * XTQ_COLL_CMA=off); -1 for a NULL team.
 */
XTQ_COLL_API int xtq_coll_team_cma_peers(const xtq_coll_team_t *team);

/**
 * Whether a CUDA team's pieces stay in this rank's GPU for its peers' GPUs
 * to read (peer reads over NVLink or PCIe, CUDA IPC; XTQ_COLL_GPU_PEER):
 * 1, or 0 when its sends leave from pinned host memory (a host team,
 * another provider than shm, a peer that could not map this rank's
 * memory, or XTQ_COLL_GPU_PEER=off); -1 for a NULL team.
 */
XTQ_COLL_API int xtq_coll_team_gpu_peer(const xtq_coll_team_t *team);

XTQ_EXTERN_C_END

#endif /* XTQ_COLL_H */
