/*
 * Context: one per process. xtq_init() bootstraps through the caller's
 * out-of-band collectives when given (xtq_oob_coll_t: any MPI, any
 * launcher), else through PMIx when the process was started by mpirun or
 * srun --mpi=pmix (a process started without a launcher is rank 0 of 1),
 * opens the libfabric endpoint, starts the agents and the target engine.
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

/**
 * Out-of-band collectives given by the caller, so that xtq_init() can
 * bootstrap over the caller's own runtime (an MPI communicator, say)
 * instead of PMIx, under any launcher (UCC's ucc_oob_coll pattern).
 *
 * Only an allgather is needed; libxtq builds its barrier from it. The
 * allgather is nonblocking so that a manual-progress engine keeps turning
 * while it completes: `allgather` starts it and returns a request in
 * `*req`, `req_test` polls it, `req_free` releases it. One allgather is in
 * flight at a time. xtq_init() copies this struct; the callbacks and
 * `coll_info` are used until xtq_finalize() returns (its barriers), so an
 * MPI communicator given here must outlive the context.
 */
typedef struct xtq_oob_coll {
    /**
     * Start an allgather of `len` bytes from every rank: rank r's `sbuf`
     * lands at `rbuf + r * len` on every rank (`rbuf` holds size * len).
     * @return 0, or a negative XTQ_E* code (the bootstrap fails).
     */
    int (*allgather)(const void *sbuf, void *rbuf, size_t len, void *coll_info, void **req);
    /** 0 when complete, -XTQ_EAGAIN while in progress, else an error. */
    int (*req_test)(void *req);
    /** Release a request (after it completed or failed). */
    int (*req_free)(void *req);
    void *coll_info; /**< passed to allgather untouched (an MPI_Comm, say) */
    int rank;        /**< this process's rank, 0 <= rank < size */
    int size;        /**< number of processes */
} xtq_oob_coll_t;

/** Bits of xtq_init_attr_t.field_mask: which fields the caller set. */
enum xtq_init_attr_field {
    XTQ_INIT_ATTR_FIELD_PROGRESS = 1u << 0, /**< progress */
    XTQ_INIT_ATTR_FIELD_PROVIDER = 1u << 1, /**< provider */
    XTQ_INIT_ATTR_FIELD_OOB = 1u << 2,      /**< oob */
    XTQ_INIT_ATTR_FIELD_JOB_KEY = 1u << 3,  /**< job_key */
};

/**
 * Optional settings. Only the fields named in `field_mask` are read, so
 * the struct can grow without breaking programs built against an older
 * header (UCX's field_mask pattern). NULL, or a zero mask, takes the XTQ_*
 * parameters and bootstraps through PMIx.
 */
typedef struct xtq_init_attr {
    uint64_t field_mask;             /**< XTQ_INIT_ATTR_FIELD_* bits */
    enum xtq_progress_mode progress; /**< overrides XTQ_PROGRESS */
    const char *provider;            /**< overrides XTQ_PROVIDER ("shm", "tcp", ...) */
    xtq_oob_coll_t oob;              /**< bootstrap through these instead of PMIx */
    /**
     * Overrides XTQ_JOB_KEY. Under an OOB bootstrap the default key is
     * agreed through the allgather (rank 0's random value), so that two
     * jobs started by the same launcher never accept each other's messages.
     * The key guards against cross-talk between jobs; it is not an
     * authentication secret. Every rank must be given the same key, or
     * none: xtq_init() fails with -XTQ_EINVAL on every rank otherwise.
     */
    uint64_t job_key;
} xtq_init_attr_t;

/**
 * Create the process's context. Collective over all ranks.
 * @return 0, -XTQ_EINVAL (unknown field_mask bits, a bad value, an OOB
 *         description with a missing callback or a rank outside 0..size-1,
 *         ranks given different job keys), -XTQ_EBOOTSTRAP (PMIx or an OOB
 *         collective failed), -XTQ_ENOMEM, or a transport or agent error.
 */
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
 * progress mode. With a progress thread it is a turn taken beside it: the
 * thread then keeps off the endpoint for XTQ_PROGRESS_BACKOFF_US (auto: 10
 * us where each rank has 3 cores, else 0), so a thread that calls this
 * often does the engine's work itself, and what arrives between its calls
 * waits at most that long.
 * @return the number of events handled (>= 0) or a negative error.
 */
XTQ_API int xtq_progress(xtq_ctx_t *ctx);

/** The libfabric provider in use ("shm", "tcp", ...). */
XTQ_API const char *xtq_provider_name(const xtq_ctx_t *ctx);

/**
 * Slots of xtq_stats_t.rejected_by_reason: every code a target rejects a
 * command with has one. Runtime codes keep slot (code - XTQ_ENOKERNEL),
 * 0..15 (XTQ_ENOKERNEL is slot 0, XTQ_EJOBKEY slot 5, ...); errno-valued
 * codes have the named slots from 16; a code not listed counts in OTHER.
 * xtq_stats_reject_slot() maps a code to its slot.
 */
enum xtq_stats_reject_slot {
    XTQ_STATS_REJECT_RANGE = 16,   /**< -XTQ_ERANGE: grid or bounded offset + extent */
    XTQ_STATS_REJECT_BADMSG = 17,  /**< -XTQ_EBADMSG: malformed message */
    XTQ_STATS_REJECT_MSGSIZE = 18, /**< -XTQ_EMSGSIZE: larger than this target takes */
    XTQ_STATS_REJECT_NOMEM = 19,   /**< -XTQ_ENOMEM: no memory for the task */
    XTQ_STATS_REJECT_PROTO = 20,   /**< -XTQ_EPROTO: flags or reserved fields set */
    XTQ_STATS_REJECT_INVAL = 21,   /**< -XTQ_EINVAL */
    XTQ_STATS_REJECT_OTHER = 31,   /**< any code without a slot of its own */
    XTQ_STATS_REJECT_SLOTS = 32,   /**< entries of rejected_by_reason */
};

/** The rejected_by_reason slot that counts error code `err` (either sign). */
XTQ_API unsigned xtq_stats_reject_slot(int err);

/**
 * Bytes of the first version of xtq_stats_t: the fields up to and including
 * rejected_by_reason. What the xtq_get_stats symbol fills for programs
 * built against the first header, and the least size xtq_query_stats()
 * accepts. Fixed forever.
 */
#define XTQ_STATS_SIZE_V1 328

/**
 * Counters of the target engine and initiator side, since xtq_init().
 *
 * Fields are only ever appended, never reordered, resized or removed, so
 * a program keeps reading the fields its header knows from any later
 * library: xtq_get_stats() fills every field of the header the program
 * was compiled with (those a library older than the header does not know
 * read 0), and xtq_query_stats() says how many bytes the library filled.
 */
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
    /** Rejections per reason, at xtq_stats_reject_slot(code). */
    uint64_t rejected_by_reason[XTQ_STATS_REJECT_SLOTS];
    /* ---- end of the first version (XTQ_STATS_SIZE_V1) ---- */
    /**
     * Payload bytes of the puts counted in puts_issued: the payload length
     * (all pieces of an xtq_putv) of every put this process accepted, to
     * any target, itself included. Counted once, when the put is accepted:
     * a resend adds nothing, and a put that fails or is cancelled later
     * (a triggered put, say) stays counted. Read with xtq_query_stats().
     */
    uint64_t payload_bytes_sent;
    /**
     * Payload bytes of the commands counted in tasks_enqueued: those that
     * arrived at this target, passed validation and went to an agent's
     * queue. Counted there rather than with msgs_received, which also
     * counts rejected commands and the duplicate copy of a resent put; a
     * command that waited for queue space counts once. Read with
     * xtq_query_stats().
     */
    uint64_t payload_bytes_received;
    /**
     * Puts counted in puts_completed whose waiter learned of their remote
     * completion from the target's completion word in shared memory
     * (XTQ_DIRECT_COMPLETION, one host), before their ack arrived. Counted
     * on the initiator, in the call that returned. Read with
     * xtq_query_stats().
     */
    uint64_t puts_completed_direct;
    /**
     * Puts written into their target's inbox in shared memory instead of
     * going through the transport (XTQ_SHM_INBOX, every rank on one host;
     * docs/design.md "Inboxes on one host"). Appended after
     * puts_completed_direct.
     */
    uint64_t puts_via_inbox;
} xtq_stats_t;

/* The exported xtq_get_stats: the first version's XTQ_STATS_SIZE_V1 bytes,
 * which is all that programs built against the first header have room
 * for. Code compiled with this header reaches the macro below instead. */
XTQ_API int xtq_get_stats(xtq_ctx_t *ctx, xtq_stats_t *stats);

/**
 * Snapshot the counters into the caller's xtq_stats_t of `size` bytes:
 * pass sizeof(xtq_stats_t) as the caller's header declares it
 * (xtq_query_stats(ctx, &s, sizeof s)). The library fills the first
 * min(size, its own sizeof(xtq_stats_t)) bytes and zeroes the rest, the
 * fields of a header newer than itself. Each counter is read atomically on
 * its own; the snapshot is not one instant across counters.
 * @return the number of bytes filled with counters (>= XTQ_STATS_SIZE_V1):
 *         a field holds a counter when its offsetof() + sizeof() is at
 *         most this, else it reads 0; or -XTQ_EINVAL (NULL ctx or stats, a
 *         size less than XTQ_STATS_SIZE_V1).
 */
XTQ_API int xtq_query_stats(xtq_ctx_t *ctx, xtq_stats_t *stats, size_t size);

/* Behind xtq_get_stats(): the sized query, 0 on success. */
static inline int xtq__get_stats_sized(xtq_ctx_t *ctx, xtq_stats_t *stats, size_t size)
{
    int rc = xtq_query_stats(ctx, stats, size);
    return rc < 0 ? rc : 0;
}

/**
 * Snapshot the counters: every field of xtq_stats_t as this header declares
 * it (those a library older than the header does not know read 0; in the
 * style of UCX's ucp_init, the header passes its own size, so a program
 * built against it never reads a field the call left unwritten).
 * @return 0, or -XTQ_EINVAL (NULL ctx or stats).
 */
#define xtq_get_stats(ctx, stats) xtq__get_stats_sized((ctx), (stats), sizeof(xtq_stats_t))

XTQ_EXTERN_C_END

#endif /* XTQ_CONTEXT_H */
