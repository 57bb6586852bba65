/*
 * The target-side engine (paper Fig. 4, steps 3-7) and the initiator's put
 * path, over one libfabric RDM endpoint. A context has one engine per
 * plane (XTQ_PROGRESS_THREADS, default 1; xtq/context.c): each plane is a
 * whole engine with its own endpoint and progress thread, and rank i's
 * puts, with their acks, travel on plane i % nplanes at both ends. This is
 * what the rest of libxtq calls; the engine's own files share
 * nic-emul/engine_int.h.
 */
#ifndef XTQ_ENGINE_H
#define XTQ_ENGINE_H

#include "internal.h"

#include <sys/uio.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

/* ---- ofi.c: the libfabric endpoint --------------------------------------
 * Every call serialises on `lock`: the domain is opened FI_THREAD_DOMAIN. */
#define XTQ__OFI_ADDR_MAX 248

struct xtq__ofi {
    pthread_mutex_t lock;
    _Atomic uint32_t senders; /* threads waiting to send: a polite poll defers */
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    fi_addr_t *addrs; /* by rank */
    int nranks;
    int wait_fd; /* the CQ's wait fd, or -1 */
    size_t iov_limit;
    size_t inject_size;
    size_t rx_size; /* receive entries: posted receives and unexpected messages */
    char prov_name[64];
    bool source; /* FI_SOURCE: arrivals name their source endpoint */
};

/* Open fabric, domain, endpoint, CQ and AV for provider `prov` (NULL:
 * first usable). `min_multi_recv` is the largest message. */
int xtq__ofi_open(struct xtq__ofi *o, const char *prov, size_t min_multi_recv);
void xtq__ofi_close(struct xtq__ofi *o);
int xtq__ofi_getname(struct xtq__ofi *o, void *addr, size_t *len);
/* addrs: n blobs of `stride` bytes, each [uint32 len][name]. */
int xtq__ofi_insert(struct xtq__ofi *o, const void *addrs, size_t stride, int n);
/* Point `rank` at another endpoint name (tests: a foreign job's process). */
int xtq__ofi_retarget(struct xtq__ofi *o, int rank, const void *name);
int xtq__ofi_post_multi_recv(struct xtq__ofi *o, void *buf, size_t len, void *context);
/* 0, -FI_EAGAIN, or another negative fabric error. */
ssize_t xtq__ofi_sendv(struct xtq__ofi *o, const struct iovec *iov, size_t count, int dest,
                       void *context);
ssize_t xtq__ofi_inject(struct xtq__ofi *o, const void *buf, size_t len, int dest);
/* Tagged: the control channel's sends and its posted receives. */
ssize_t xtq__ofi_tinject(struct xtq__ofi *o, const void *buf, size_t len, int dest, uint64_t tag);
int xtq__ofi_post_trecv(struct xtq__ofi *o, void *buf, size_t len, uint64_t tag, void *context);
/* Reads up to n entries, and where the endpoint has FI_SOURCE each one's
 * source address into src[] (FI_ADDR_NOTAVAIL: not in the AV); an error
 * entry is returned in *err (ret -FI_EAVAIL).
 * `polite`: return -FI_EBUSY at once when a sender is waiting for the
 * endpoint or holds it (a polling thread must not stand in its way). */
ssize_t xtq__ofi_cq_read(struct xtq__ofi *o, struct fi_cq_data_entry *entries, fi_addr_t *src,
                         size_t n, struct fi_cq_err_entry *err, bool polite);
/* Whether an arrival from `src` may claim to come from `rank`: the AV's
 * address of that rank (always true without FI_SOURCE). */
bool xtq__ofi_source_is(const struct xtq__ofi *o, int rank, fi_addr_t src);
/* 0 when the caller may block on wait_fd, else -FI_EAGAIN. */
int xtq__ofi_trywait(struct xtq__ofi *o);
/* Names of the RDM providers with FI_MSG | FI_MULTI_RECV usable here. */
int xtq__ofi_list_providers(char names[][64], int max);

/* ---- the engine (its files: see nic-emul/engine_int.h) ------------------ */
struct xtq__engine;

/* lifecycle.c */
/* Plane `plane` of the context's engine (ctx->planes): its own endpoint,
 * address exchange, doorbells and progress thread. */
int xtq__engine_create(xtq_ctx_t *ctx, const char *provider, enum xtq_progress_mode mode,
                       unsigned plane, struct xtq__engine **engine);
/* Wait until tasks enqueued here have retired, up to deadline. */
int xtq__engine_drain_tasks(struct xtq__engine *e, uint64_t deadline);
/* xtq_completion_test/_state of a put that may finish through the
 * target's completion word (XTQ__COMPLETION_NOTIFY set, not DONE): read
 * the word, and complete the put when it names it (notify.c). */
bool xtq__engine_notify_poll(xtq_completion_t *comp);
/* Tasks enqueued on any plane of `ctx` and not yet retired. */
uint64_t xtq__ctx_tasks_inflight(xtq_ctx_t *ctx);
/* Stop the thread, fail puts still pending with -XTQ_EFINALIZED, drop the
 * backlog; agents may still retire tasks (no acks are sent any more).
 * Then close the agents, then destroy (which stops first if needed). */
void xtq__engine_stop(struct xtq__engine *e);
void xtq__engine_destroy(struct xtq__engine *e);
const char *xtq__engine_provider(const struct xtq__engine *e);
size_t xtq__engine_max_put(const struct xtq__engine *e);
bool xtq__engine_manual(const struct xtq__engine *e);
/* White-box hooks for the isolation test: this endpoint's name, and aiming
 * rank `rank` at a foreign endpoint (another job's process). */
int xtq__engine_getname(struct xtq__engine *e, void *addr, size_t *len);
int xtq__engine_retarget(struct xtq__engine *e, int rank, const void *addr);

/* progress.c */
/* Start the progress thread (thread mode). */
int xtq__engine_start(struct xtq__engine *e);
/* One turn of progress; returns events handled or a negative error. */
int xtq__engine_progress(struct xtq__engine *e);
/* Progress for a barrier wait (manual mode) */
void xtq__engine_poll_cb(void *engine);

/* initiator.c */
/* What a put asks for besides its command and payload (xtq_put_param_t,
 * checked by put.c); zero-initialise, then fill. */
struct xtq__put_req {
    uint32_t flags; /* XTQ_PUT_* */
    xtq_completion_t *comp;
    xtq_counter_t *counter;
    void *result; /* a fetching put: the task's result lands here */
    size_t result_len;
    struct xtq_signal *trigger; /* a triggered put: fires when it meets the condition */
    enum xtq_signal_condition trigger_cond;
    int64_t trigger_value;
};
int xtq__engine_put(struct xtq__engine *e, int target, const void *cmd, size_t cmd_len,
                    const void *payload, size_t payload_len, uint32_t flags,
                    xtq_completion_t *comp);
/* The put of xtq_putv(): the payload gathered from `iovcnt` buffers. */
int xtq__engine_putv(struct xtq__engine *e, int target, const void *cmd, size_t cmd_len,
                     const struct iovec *iov, size_t iovcnt, const struct xtq__put_req *req);
/* Finalize: puts whose trigger has not fired complete with
 * -XTQ_ECANCELED; returns how many. */
int xtq__engine_triggers_cancel(struct xtq__engine *e);
/* xtq_put_cancel(): 0 (it had not fired: DONE with -XTQ_ECANCELED),
 * -XTQ_EALREADY (fired, not a triggered put, or DONE), -XTQ_EINVAL. */
int xtq__engine_put_cancel(struct xtq__engine *e, xtq_completion_t *comp);
/* xtq_put_cancel_trigger(): how many puts watching `sig` were cancelled. */
size_t xtq__engine_put_cancel_trigger(struct xtq__engine *e, const struct xtq_signal *sig);
/* xtq_flush(): every put issued to `target` (or XTQ_TARGET_ALL) before
 * the call is DONE. 0, -XTQ_ETIMEDOUT, -XTQ_EHOSTDOWN, -XTQ_ESRCRANK. */
int xtq__engine_flush(struct xtq__engine *e, int target, int64_t timeout_ns);
int xtq__engine_wait(struct xtq__engine *e, xtq_completion_t *comp, uint32_t bits,
                     int64_t timeout_ns);
/* For white-box tests: whether XTQ_LONE_WAITER is on, and whether a
 * waiting thread holds the progress turns now (initiator.c). */
bool xtq__engine_lone_waiter_on(const struct xtq__engine *e);

/* How long a wait polls before it sleeps (initiator.c): `base`
 * (XTQ_WAIT_SPIN_US), or 1.5 x `est` (the running average of the
 * context's waits) when that is longer and at most `max`
 * (XTQ_WAIT_SPIN_MAX_US). */
uint64_t xtq__wait_spin_budget(uint64_t base, uint64_t max, uint64_t est);

/* The running average `est` after a wait that took `took` ns. */
uint64_t xtq__wait_est_update(uint64_t est, uint64_t took);
bool xtq__engine_lone_waiting(struct xtq__engine *e);
/* Wait until this rank's puts are all DONE, up to deadline (ns, monotonic). */
int xtq__engine_drain_puts(struct xtq__engine *e, uint64_t deadline);

/* Test hooks for white-box tests (initiator.c): each count makes that
 * many of the next operations of its kind fail as the transport would.
 * Zero outside tests; the data path pays one relaxed load. */
struct xtq__engine_faults {
    _Atomic uint32_t put_send;     /* a put's send returns -FI_EIO */
    _Atomic uint32_t result_alloc; /* a result buffer cannot be allocated */
    _Atomic uint32_t ack_send;     /* an ack's send returns -FI_EIO */
    _Atomic uint32_t ack_drop;     /* an ack is lost after it left */
    _Atomic uint32_t put_lost;     /* an arriving put is dropped unread (a reset) */
};
extern struct xtq__engine_faults xtq__faults;
/* Take one from a count: whether it was nonzero. */
bool xtq__fault_take(_Atomic uint32_t *n);

/* liveness.c */
/* Peers declared down (silent for XTQ_PEER_TIMEOUT_MS with puts pending). */
unsigned xtq__engine_peers_down(struct xtq__engine *e);
/* A finalize without barriers: FIN to every live peer, progress until each
 * live peer's FIN came or it is declared down; -XTQ_ETIMEDOUT at deadline. */
int xtq__engine_close_with_peers(struct xtq__engine *e, uint64_t deadline);

/* Fault injection for tests (tests/integration/test_reconnect.c): every
 * message arriving from a rank whose bit is set here is dropped unread, as
 * if the link to it were down. Process-wide; ranks 0-63. */
extern _Atomic uint64_t xtq__fault_drop_from;
bool xtq__fault_dropped(uint32_t src);

#endif /* XTQ_ENGINE_H */
