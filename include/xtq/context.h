/*
 * Context: one per process. xtq_init() bootstraps through PMIx when the
 * process was started by mpirun or srun --mpi=pmix (a process started
 * without a launcher is rank 0 of 1), opens the libfabric endpoint, starts
 * the agents and the target engine.
 */
#ifndef XTQ_CONTEXT_H
#define XTQ_CONTEXT_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/** How the target engine makes progress. */
enum xtq_progress_mode {
    XTQ_PROGRESS_DEFAULT = 0, /**< from XTQ_PROGRESS (default: thread) */
    XTQ_PROGRESS_THREAD = 1,  /**< a progress thread, placed with hwloc */
    XTQ_PROGRESS_MANUAL = 2,  /**< only inside xtq_progress() and waits */
};

/** Optional settings; a zeroed struct (or NULL) takes the XTQ_* parameters. */
typedef struct xtq_init_attr {
    enum xtq_progress_mode progress; /**< overrides XTQ_PROGRESS */
    const char *provider;            /**< overrides XTQ_PROVIDER ("shm", "tcp", ...) */
} xtq_init_attr_t;

/** Create the process's context. Collective over all ranks. */
XTQ_API int xtq_init(const xtq_init_attr_t *attr, xtq_ctx_t **ctx);

/**
 * Tear down. Collective. Tasks still in flight to or from this process are
 * drained (bounded by XTQ_FINALIZE_TIMEOUT_MS) or failed with -XTQ_EFINALIZED.
 * With a peer declared down (XTQ_PEER_TIMEOUT_MS) it is local only (no
 * fence with the dead rank) and returns -XTQ_EHOSTDOWN after tearing down.
 * Not to be called while other threads still use the context.
 */
XTQ_API int xtq_finalize(xtq_ctx_t *ctx);

/** This process's rank. */
XTQ_API int xtq_rank(const xtq_ctx_t *ctx);

/** Number of ranks. */
XTQ_API int xtq_size(const xtq_ctx_t *ctx);

/** Execution barrier across all ranks. */
XTQ_API int xtq_barrier(xtq_ctx_t *ctx);

/**
 * Drive the engine once: read transport completions, validate, rewrite and
 * enqueue arrived commands, send acknowledgements. Needed only in manual
 * progress mode (harmless otherwise).
 * @return the number of events handled (>= 0) or a negative error.
 */
XTQ_API int xtq_progress(xtq_ctx_t *ctx);

/** The libfabric provider in use ("shm", "tcp", ...). */
XTQ_API const char *xtq_provider_name(const xtq_ctx_t *ctx);

/** Counters of the target engine and initiator side. */
typedef struct xtq_stats {
    uint64_t puts_issued;       /**< xtq_put calls that were accepted */
    uint64_t puts_completed;    /**< puts whose completion was reported */
    uint64_t puts_failed;       /**< ... with an error status */
    uint64_t msgs_received;     /**< commands that arrived at this target */
    uint64_t tasks_enqueued;    /**< commands that passed validation */
    uint64_t tasks_completed;   /**< tasks that finished on an agent */
    uint64_t msgs_rejected;     /**< commands dropped by validation (all reasons) */
    uint64_t acks_sent;         /**< acknowledgements (success or error) sent */
    uint64_t queue_full_events; /**< times an enqueue found its queue full */
    /** Rejections per reason, indexed by (error code - XTQ_ENOKERNEL). */
    uint64_t rejected_by_reason[16];
} xtq_stats_t;

/** Snapshot the counters. */
XTQ_API int xtq_get_stats(xtq_ctx_t *ctx, xtq_stats_t *stats);

XTQ_EXTERN_C_END

#endif /* XTQ_CONTEXT_H */
