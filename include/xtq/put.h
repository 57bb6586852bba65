/*
 * XtqPut: a one-sided put that carries an AQL command (packet + kernel
 * arguments) and a payload to a target rank, where the engine rewrites and
 * enqueues it with no target application thread involved.
 *
 * Threading (the level is always "multiple", like MPI_THREAD_MULTIPLE):
 * xtq_put, xtq_completion_test/wait and xtq_progress may be called from
 * any number of application threads at once, on one context, to the same
 * or different targets. Sequence numbers are assigned per target in the
 * order threads enter the window; puts from different threads are not
 * ordered with respect to each other. A completion object belongs to one
 * put at a time and must not be reused until DONE; several threads may
 * wait on the same completion. Backpressure applies per target and is
 * shared by all threads (a full window blocks, or returns -XTQ_EAGAIN with
 * XTQ_PUT_NONBLOCKING). Registration calls may run concurrently with puts
 * and with the engine. xtq_init and xtq_finalize must not race with any
 * other call on the same context. A task should not block in xtq_put
 * (use XTQ_PUT_NONBLOCKING from tasks; docs/flow-control.md).
 * Peer failure: puts to a peer silent for XTQ_PEER_TIMEOUT_MS complete
 * with -XTQ_EHOSTDOWN, and later puts to it return -XTQ_EHOSTDOWN.
 */
#ifndef XTQ_PUT_H
#define XTQ_PUT_H

#include <sys/uio.h>

#include <xtq/common.h>
#include <xtq/aql.h>
#include <xtq/signal.h>
#include <xtq/counter.h>

XTQ_EXTERN_C_BEGIN

/** xtq_put flags. */
enum xtq_put_flags {
    /** Also report when the task has finished on the target. */
    XTQ_PUT_REMOTE_COMPLETION = 1u << 0,
    /** Return -XTQ_EAGAIN instead of waiting when resources are exhausted. */
    XTQ_PUT_NONBLOCKING = 1u << 1,
    /**
     * This task will run long: the target queues it for its agent's
     * workers even where its kernel or function is registered
     * XTQ_REGISTER_SHORT (which lets a short task run in the thread that
     * received it, blocking that thread's other work meanwhile). For
     * tasks whose cost depends on the put, e.g. a reduction of a large
     * piece (libxtq_coll sets it above XTQ_COLL_INLINE_MAX bytes).
     */
    XTQ_PUT_LONG_TASK = 1u << 2,
};

/** Completion state bits. */
enum xtq_completion_state {
    XTQ_COMPLETION_LOCAL = 1u << 0,  /**< buffers may be reused */
    XTQ_COMPLETION_REMOTE = 1u << 1, /**< task finished on the target */
    XTQ_COMPLETION_DONE = 1u << 2,   /**< everything requested is known; status final */
    /* Higher bits are the library's: test the bits above with a mask. */
};

/**
 * Completion object, owned by the caller, valid until DONE and LOCAL. The
 * library fills it; read it with xtq_completion_test() / xtq_completion_wait().
 * DONE normally comes with or after LOCAL; a put failed with -XTQ_EHOSTDOWN
 * while the transport still held its message is DONE first (within the
 * peer timeout) and LOCAL once the transport lets go of its buffers (the
 * link came back and the message left, or xtq_finalize()).
 * Errors travel with the completion: `status` names the first error
 * (e.g. -XTQ_ENOKERNEL reported by the target), `prov_errno` the
 * transport's own code when the error came from libfabric.
 */
typedef struct xtq_completion {
    uint32_t state;     /**< XTQ_COMPLETION_* bits (atomic) */
    int32_t status;     /**< 0 or -XTQ_E*; final once DONE is set */
    int32_t prov_errno; /**< libfabric's code, or 0 */
    int32_t target;     /**< target rank */
    uint64_t seq;       /**< per-target sequence number of the put */
    void *context;      /**< for the caller; untouched by the library */
    uint64_t internal_[4];
} xtq_completion_t;

/**
 * The completion's XTQ_COMPLETION_* bits (LOCAL, REMOTE, DONE), read with
 * acquire order; the library's own bits are masked off. Never blocks.
 * On one host (XTQ_DIRECT_COMPLETION) a remote-completion put not yet DONE
 * is looked up in its target's completion word first, and completed from
 * it when the word has it (taking the window's lock for that moment).
 */
XTQ_API uint32_t xtq_completion_state(const xtq_completion_t *comp);

/**
 * 1 when the completion is DONE, else 0. Never blocks, never progresses
 * the engine; reads the target's completion word as xtq_completion_state()
 * does.
 */
XTQ_API int xtq_completion_test(const xtq_completion_t *comp);

/**
 * Wait until DONE. With a progress thread it first polls for
 * XTQ_WAIT_SPIN_US (auto: 50 us where each rank has 3 cores, else 0),
 * taking the engine's turns itself while the thread backs off
 * (XTQ_PROGRESS_BACKOFF_US), then sleeps (XTQ_LONE_WAITER); in manual mode
 * it progresses the engine until DONE.
 * @return the completion's status, or -XTQ_ETIMEDOUT.
 */
XTQ_API int xtq_completion_wait(xtq_ctx_t *ctx, xtq_completion_t *comp, int64_t timeout_ns);

/**
 * Wait until the completion has one of the state bits `bits` (any of
 * XTQ_COMPLETION_LOCAL, _REMOTE, _DONE), or is DONE (a put that fails may
 * be DONE before it is LOCAL), progressing the engine in manual mode.
 * A caller that only needs its buffers back waits for LOCAL and reaps
 * DONE later (the completion object must stay valid until then).
 * @return 0 when a bit of `bits` is set and the put has not failed; the
 *         completion's status once it is DONE; -XTQ_ETIMEDOUT;
 *         -XTQ_EINVAL (no bit of the three in `bits`, or a bit beyond them).
 */
XTQ_API int xtq_completion_wait_state(xtq_ctx_t *ctx, xtq_completion_t *comp, uint32_t bits,
                                      int64_t timeout_ns);

/**
 * Send a command and a payload to `target`. The command is copied at the
 * call (its buffer may be reused when xtq_put() returns); the payload is
 * gathered by the transport into the same message without a copy, except
 * for small puts (see xtq_putv()).
 *
 * @param cmd         AQL packet followed by the kernel arguments (built with
 *                    xtq_cmd_kernel() / xtq_cmd_function()).
 * @param payload     may be NULL when payload_len is 0.
 * @param flags       XTQ_PUT_* flags.
 * @param comp        completion to fill; the payload must stay untouched
 *                    until it reports LOCAL. NULL makes xtq_put() wait for
 *                    local completion itself (remote completion then cannot
 *                    be requested).
 * @return 0 when the put was issued (its outcome arrives in `comp`),
 *         -XTQ_EAGAIN (XTQ_PUT_NONBLOCKING and no resources),
 *         -XTQ_EINVAL, -XTQ_EMSGSIZE, -XTQ_ESRCRANK (bad target), -XTQ_EHOSTDOWN.
 */
XTQ_API int xtq_put(xtq_ctx_t *ctx, int target, const void *cmd, size_t cmd_len,
                    const void *payload, size_t payload_len, uint32_t flags,
                    xtq_completion_t *comp);

/** Bits of xtq_put_param_t.field_mask: which fields the caller set. */
enum xtq_put_param_field {
    XTQ_PUT_PARAM_FIELD_FLAGS = 1u << 0,      /**< flags */
    XTQ_PUT_PARAM_FIELD_COMPLETION = 1u << 1, /**< comp */
    XTQ_PUT_PARAM_FIELD_COUNTER = 1u << 2,    /**< counter */
    XTQ_PUT_PARAM_FIELD_RESULT = 1u << 3,     /**< result, result_len */
    XTQ_PUT_PARAM_FIELD_TRIGGER = 1u << 4,    /**< trigger, trigger_cond, trigger_value */
};

/**
 * What an extended put asks for (UCX's ucp_request_param_t pattern: only
 * the fields named in `field_mask` are read, so the struct can grow).
 */
typedef struct xtq_put_param {
    uint64_t field_mask;
    uint32_t flags;         /**< XTQ_PUT_* */
    xtq_completion_t *comp; /**< as xtq_put()'s `comp`; may be combined with a counter */
    /**
     * Counted when the put is DONE: xtq_counter_read() on success,
     * xtq_counter_read_err() on failure. Many puts share one counter, so a
     * schedule of thousands needs no completion object each (fi_cntr).
     */
    xtq_counter_t *counter;
    /**
     * A fetching put: the task on the target gets a zero-filled result
     * buffer of `result_len` bytes (xtq_task_result() on the CPU agent,
     * xtq_cuda_dispatch_t.result on the CUDA agent; every work-group of a
     * kernel shares it); whatever it holds when the task finishes travels
     * back with the remote completion and lands in `result` (all
     * result_len bytes) before the put is DONE. Only a task that
     * succeeded sends it: when the put fails (the task failed itself, the
     * target refused it, -XTQ_ENOMEM where the target had no room for the
     * buffer) `result` is left untouched. Nothing beyond result_len is
     * ever written. Implies remote completion, so the put needs a
     * completion or a counter; `result` must stay valid until DONE.
     * result_len is at most xtq_put_max_size() (-XTQ_EMSGSIZE); 0 makes
     * it a remote-completion put. Agents whose tasks cannot reach a
     * result buffer (ROCr) fail the put with -XTQ_ENOSYS.
     */
    void *result;
    size_t result_len;
    /**
     * A triggered put: the engine holds it and sends it when the local
     * signal `trigger` satisfies `trigger_cond` against `trigger_value`
     * (the HSA wait conditions), however the signal changes: a task that
     * completes, a host thread's xtq_signal_store/add/exchange/cas. No
     * application thread needs to be involved between the trigger and
     * the send (in XTQ_PROGRESS_MANUAL, the engine's turns are the
     * application's xtq_progress and waits).
     *
     * The put takes its window slot and sequence number, and the command
     * is copied, at the call; the payload pieces are read when it fires,
     * so they must stay untouched until the put reports LOCAL. A condition
     * that holds at the call fires at once. Host-side changes wake the
     * engine, which evaluates its armed puts; a signal a device changes
     * (CUDA agent signals) is polled, every 50 us while the engine polls
     * and at least every millisecond. The condition is evaluated on the
     * signal's current value (level-triggered): a value that meets it only
     * between two evaluations can be missed, so trigger on a monotonic
     * count (LT on a count-down, GTE on a count-up), not EQ on a value that
     * moves on. A triggered put needs a completion or a counter
     * (-XTQ_EINVAL); the signal cannot be destroyed while a put watches it
     * (-XTQ_EBUSY). A put that has not fired holds its slot: the window of
     * its target is sequential, so after XTQ_PUT_WINDOW - 1 further puts
     * to that target, puts wait (or return -XTQ_EAGAIN) until it fires; it
     * counts for xtq_flush(), which times out while it has not fired.
     * xtq_put_cancel() and xtq_put_cancel_trigger() withdraw puts that
     * have not fired; xtq_finalize() completes puts that never fired with
     * -XTQ_ECANCELED.
     */
    const xtq_signal_t *trigger;
    enum xtq_signal_condition trigger_cond;
    int64_t trigger_value;
} xtq_put_param_t;

/**
 * The extended put: a command plus a payload gathered from `iovcnt`
 * buffers, with the options of `param` (NULL: as xtq_put() with flags 0
 * and no completion). Same return codes and threading rules as xtq_put().
 *
 * The payload is sent from the caller's buffers without a copy as long as
 * the transport gathers that many pieces (the provider's iov_limit, which
 * is 4 for tcp and shm: the message header and command take one or two,
 * zero-length pieces take none). Beyond that the put does not fail: the
 * pieces are copied, in order, into the put's own staging buffer and sent
 * from there (the total is bounded by xtq_put_max_size() either way). Puts
 * of up to the provider's inject size are always copied (eager).
 * Lengths are summed without overflow: a total past xtq_put_max_size()
 * is -XTQ_EMSGSIZE, a piece with a length and a NULL base -XTQ_EINVAL.
 *
 * The command is copied at the call, whatever its size. Without a
 * completion (`comp`), a put with a counter returns at once and its
 * payload must stay untouched until the counter has counted it; a put
 * with neither waits for LOCAL itself, as xtq_put() with NULL does.
 * Remote completion needs a completion or a counter (-XTQ_EINVAL else).
 * Unknown field_mask bits are -XTQ_EINVAL.
 */
XTQ_API int xtq_putv(xtq_ctx_t *ctx, int target, const void *cmd, size_t cmd_len,
                     const struct iovec *payload_iov, size_t iovcnt, const xtq_put_param_t *param);

/** xtq_flush() `target` meaning every rank. */
#define XTQ_TARGET_ALL (-1)

/**
 * Wait until every put this process issued to `target` (or to every rank:
 * XTQ_TARGET_ALL) before the call is DONE: acknowledged, and finished on
 * the target where remote completion was asked for; triggered puts
 * included (they must fire). Puts that other threads issue during the
 * flush may or may not be included. Progresses the engine in manual mode.
 * When it returns 0, the completions and counters of those puts are final
 * (a counter has counted every one of them). The outcome of each put
 * still travels with its completion or counter: flush says nothing about
 * a put that failed, except that the target is down.
 * A timeout of 0 only checks. Waits as xtq_completion_wait() does: a
 * spin (XTQ_WAIT_SPIN_US), then, alone, the progress turns and a sleep on
 * the transport (XTQ_LONE_WAITER), else a sleep until a put is DONE.
 * (ucp_worker_flush / ucp_ep_flush.)
 * @return 0, -XTQ_ETIMEDOUT, -XTQ_EHOSTDOWN (the target, or with
 *         XTQ_TARGET_ALL a rank this process ever put to, is declared
 *         down: its puts failed), -XTQ_ESRCRANK, -XTQ_EINVAL (negative
 *         timeout), -XTQ_ENOMEM.
 */
XTQ_API int xtq_flush(xtq_ctx_t *ctx, int target, int64_t timeout_ns);

/**
 * Withdraw a triggered put that has not fired (the put whose completion
 * is `comp`): it completes at once as DONE with -XTQ_ECANCELED (its
 * counter counts an error), frees its window slot and stops watching its
 * signal; nothing was sent, the target never hears of it. A put whose
 * condition was met fires from the engine's next turn: until it is handed
 * to the transport it can still be cancelled, after that it runs its
 * course. Safe against the engine firing it concurrently: exactly one of
 * the two wins. A put reported to a counter only has no handle here: use
 * xtq_put_cancel_trigger().
 * @param comp  the completion given to the xtq_putv() of this context
 *              that armed the put.
 * @return 0 (cancelled), -XTQ_EALREADY (it fired already, it is DONE,
 *         or it is not a triggered put: nothing changes), -XTQ_EINVAL.
 */
XTQ_API int xtq_put_cancel(xtq_ctx_t *ctx, xtq_completion_t *comp);

/**
 * Withdraw every triggered put of this context that watches `trigger` and
 * has not fired, as xtq_put_cancel() does for one: how a layer that owns
 * the signal (a collective team) tears down its schedule before it
 * destroys the signal (refused with -XTQ_EBUSY while a put watches it).
 * Puts that fired are not touched: flush them. `*count` (may be NULL):
 * how many were cancelled.
 * @return 0, -XTQ_EINVAL.
 */
XTQ_API int xtq_put_cancel_trigger(xtq_ctx_t *ctx, const xtq_signal_t *trigger, size_t *count);

/** Largest cmd_len + payload_len accepted by xtq_put() in this context. */
XTQ_API size_t xtq_put_max_size(const xtq_ctx_t *ctx);

/** Bytes a kernel command needs: one packet plus the kernel arguments. */
static inline size_t xtq_cmd_kernel_size(size_t kernarg_size)
{
    return XTQ_AQL_PACKET_SIZE + kernarg_size;
}

/**
 * Geometry of a kernel dispatch. Zero sizes are read as 1; sizes of the
 * dimensions beyond `dimensions` are written as 1 (HSA). The target
 * refuses (-XTQ_ERANGE) a work-group larger than its grid and a grid of
 * more work-items than the registration's max_work_items.
 */
typedef struct xtq_dispatch_geometry {
    uint32_t dimensions; /**< 1..3 (0 is read as 1) */
    uint32_t grid[3];
    uint16_t workgroup[3];
} xtq_dispatch_geometry_t;

/**
 * Build a kernel-dispatch command for the kernel and queue registered at
 * `kernel_index` / `queue_index` on the target: a packet whose header is
 * valid, followed by `kernarg_size` bytes copied from `kernarg` (arguments 0
 * and 1 are overwritten by the target; NULL kernarg means zeros).
 * @param cmd_len receives the command length.
 * @return 0, -XTQ_EINVAL, -XTQ_ENOSPC (cmd_cap too small).
 */
XTQ_API int xtq_cmd_kernel(void *cmd, size_t cmd_cap, uint32_t kernel_index,
                           uint32_t queue_index, const xtq_dispatch_geometry_t *geometry,
                           const void *kernarg, size_t kernarg_size, size_t *cmd_len);

/**
 * Build an agent-dispatch (function) command: one packet carrying the
 * function index, the queue index and arguments 2 and 3 (0 and 1 are the
 * target buffer and payload, written by the target).
 */
XTQ_API int xtq_cmd_function(void *cmd, size_t cmd_cap, uint32_t function_index,
                             uint32_t queue_index, uint64_t arg2, uint64_t arg3, size_t *cmd_len);

XTQ_EXTERN_C_END

#endif /* XTQ_PUT_H */
