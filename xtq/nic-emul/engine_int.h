/*
 * The engine's shared structures, for the files of xtq/nic-emul/ only.
 *
 * The engine is split by concern so that a reader can follow the paper's
 * Fig. 4 from the initiator to the agent:
 *
 *   initiator.c  the put window: slots, completion words, xtq__engine_put/wait
 *   progress.c   one turn of the emulated NIC (read the CQ, dispatch), the
 *                progress thread and its placement
 *   target.c     receive regions, validate, rewrite + enqueue, backlog, retire
 *   acks.c       acknowledgements back to the initiator
 *   liveness.c   peers heard from, pings and pongs, peers declared down
 *   wakeup.c     how sleeping progress threads are woken (doorbells, eventfd)
 *   lifecycle.c  create, start, stop, destroy; draining what runs here
 *   ofi.c        the libfabric endpoint under all of it
 *
 * Cross-file functions carry the xtq__ prefix and are declared here, each
 * under the file that defines it; everything else is static to its file.
 */
#ifndef XTQ_ENGINE_INT_H
#define XTQ_ENGINE_INT_H

#include "internal.h"
#include "nic-emul/engine.h"
#include "wire.h"

/* First word of every libfabric operation context, so a CQ entry says
 * what it completes. */
enum ctx_kind { CTX_REGION = 0x52454731u, CTX_PUT = 0x50555431u };

/* A posted multi-receive region. refs: 1 while the provider holds it, plus
 * one per task (or backlogged message) that points into it. */
struct rx_region {
    uint32_t kind;
    struct xtq__engine *e;
    void *buf;
    size_t len;
    _Atomic int64_t refs;
    _Atomic uint32_t needs_post;
    bool registered; /* with the context's agents */
};

/* A received PUT on its way to an agent. */
struct rx_task {
    struct xtq__engine *e;
    struct rx_region *region;
    struct rx_task *next;          /* backlog link */
    struct rx_task *lprev, *lnext; /* live list: enqueued, not yet retired */
    uint32_t src;
    uint32_t wire_flags;
    uint64_t seq;
    xtq_aql_packet_t packet; /* as arrived, before the rewrite */
    void *kernarg;
    uint32_t kernarg_len;
    void *payload;
    uint64_t payload_len;
    bool counted_full;
    _Alignas(16) uint8_t scratch[256]; /* kernel arguments that landed misaligned */
};

/* SLOT_TXQ: in the send queue (XTQ_ENDPOINT_OWNER=progress): not reused
 * until the progress thread has taken it out, even if it completed. */
enum slot_state {
    SLOT_BUSY = 1u << 0,
    SLOT_LOCAL = 1u << 1,
    SLOT_ACKED = 1u << 2,
    SLOT_TXQ = 1u << 3,
};

/* A multi-producer, single-consumer queue (D. Vyukov's intrusive one):
 * any thread pushes without a lock; whoever holds the progress turn pops. */
struct mpsc_node {
    _Atomic(struct mpsc_node *) next;
};
struct mpsc {
    _Atomic(struct mpsc_node *) head; /* producers */
    struct mpsc_node *tail;           /* consumer */
    struct mpsc_node stub;
};

/* One put in flight: the initiator's window holds XTQ_PUT_WINDOW per target. */
struct put_slot {
    uint32_t kind;
    uint32_t state; /* SLOT_*, under put_lock */
    int target;
    uint32_t flags;
    uint64_t seq;
    int32_t status;
    int32_t prov_errno;
    xtq_completion_t *comp; /* NULL once detached (caller passed no completion) */
    bool detach_at_local;
    uint8_t *stage; /* wire header (+ command when gathered here) */
    size_t stage_cap;
    /* The send, as xtq__slot_send() makes it: kept in the slot so that the
     * progress thread can make it for the caller (XTQ_ENDPOINT_OWNER). */
    struct iovec iov[5];
    uint8_t niov;
    bool eager; /* injected: stage holds the whole message */
    size_t total;
    struct mpsc_node txq;
};

/* Liveness probes are ACK headers with these reserved sequence numbers
 * (liveness.c). */
#define PING_SEQ UINT64_MAX
#define PONG_SEQ (UINT64_MAX - 1)

/* What this rank knows of another: its window (initiator.c) and when it
 * was last heard from (liveness.c). */
struct peer {
    struct put_slot *slots;
    uint64_t next_seq;
    uint32_t busy;               /* busy slots, under put_lock */
    _Atomic uint64_t last_heard; /* ns; reset when the first put goes out */
    uint64_t ping_sent;          /* ns, progress thread only */
    _Atomic bool down;
};

struct ack_msg {
    struct ack_msg *next;
    uint64_t since; /* first failed send (ns), 0 before: an ack the
                     * transport refuses for a whole peer timeout means its
                     * destination is gone */
    int dest;
    struct xtq__wire_hdr hdr;
};

/* A rank's doorbell in POSIX shared memory (wakeup.c); its name travels
 * in the address exchange. */
#define XTQ__BELL_NAME_MAX 64
/* A rank's doorbell in POSIX shared memory (wakeup.c). */
struct doorbell {
    _Atomic uint32_t seq;
    _Atomic uint32_t sleeping;
    uint8_t pad_[XTQ_CACHELINE - 8];
};

struct xtq__engine {
    xtq_ctx_t *ctx;
    struct xtq__ofi ofi;
    bool manual;
    uint32_t window;
    size_t max_msg;  /* cmd_len + payload_len */
    size_t max_wire; /* largest PUT on the wire */

    /* target.c */
    struct rx_region *regions;
    unsigned nregions;

    /* XTQ_ENDPOINT_OWNER=progress: only the progress thread (or, in manual
     * mode, whoever progresses) uses the endpoint; puts wait in txq, acks
     * in the ack queue, reposts as needs_post. */
    bool owner_only;
    struct mpsc txq;
    struct put_slot *tx_retry; /* popped, refused with -FI_EAGAIN: first next time */

    /* initiator.c */
    pthread_mutex_t put_lock;
    struct peer *peers;
    _Atomic uint32_t slot_freed;      /* futex: bumped when a slot frees */
    _Atomic uint32_t window_sleepers; /* threads asleep on slot_freed */
    _Atomic uint64_t puts_outstanding;

    /* progress.c, target.c */
    pthread_mutex_t progress_lock; /* one progressing thread at a time */
    struct rx_task *backlog_head, *backlog_tail;
    _Atomic uint32_t backlog_len;
    _Atomic uint64_t tasks_inflight;
    /* Tasks in agent queues, so that finalize frees those no agent will
     * ever retire (the agent closed with them still queued). */
    pthread_mutex_t live_lock;
    struct rx_task *live;
    bool stopped;

    /* acks.c */
    pthread_mutex_t ack_lock;
    struct ack_msg *acks_head, *acks_tail;
    bool acks_closed; /* after stop: acks are dropped, not queued */
    _Atomic uint32_t acks_pending;

    /* progress.c, wakeup.c */
    pthread_t thread;
    bool thread_started;
    bool ofi_open;
    _Atomic bool stop;
    _Atomic uint32_t sleeping; /* threads in xtq__progress_block */
    _Atomic uint32_t kick; /* a turn is wanted before the thread sleeps */
    int wake_fd;
    int progress_cpu;
    struct doorbell **bells; /* by rank; NULL unless doorbells are in use */
    bool bell_fence;         /* doorbells wanted: every rank takes the fence */
    char bell_name[XTQ__BELL_NAME_MAX]; /* until every peer mapped it */

    /* initiator.c, progress.c (XTQ_LONE_WAITER): a thread alone in
     * xtq_completion_wait takes the progress turns and sleeps on the
     * transport; the progress thread parks until it leaves. lone_waiter
     * is 1 while one does (a futex word), parked counts the parked. */
    bool lone_waiter_on;
    _Atomic uint32_t lone_waiter;
    _Atomic uint32_t parked;

    uint64_t wait_spin_ns;     /* XTQ_WAIT_SPIN_US, resolved */
    uint64_t progress_spin_ns; /* XTQ_PROGRESS_SPIN_US, resolved */

    /* liveness.c */
    uint64_t peer_timeout_ns; /* 0: never declare a peer down */
    uint64_t next_peer_check;
    _Atomic uint32_t peers_down;
};

/* ---- initiator.c -------------------------------------------------------- */
/* The send of slot `s` completed (status 0) or failed in the transport. */
void xtq__slot_local(struct xtq__engine *e, struct put_slot *s, int status, int prov_errno);
/* An ACK for one of our puts arrived (validated header). */
void xtq__initiator_ack(struct xtq__engine *e, const struct xtq__wire_hdr *hdr);
/* Complete every put pending to rank `r` with `status` (peer down). */
void xtq__puts_fail_peer(struct xtq__engine *e, int r, int status);
/* Complete every put still pending, keeping an earlier error (stop). */
void xtq__puts_fail_all(struct xtq__engine *e, int status);
/* XTQ_ENDPOINT_OWNER=progress, in a progress turn: send the queued puts;
 * returns how many left the queue. Stop: forget them (already failed). */
int xtq__txq_flush(struct xtq__engine *e);
void xtq__txq_drop(struct xtq__engine *e);

/* ---- target.c ----------------------------------------------------------- */
/* Allocate, register with the agents and post the receive regions. */
int xtq__regions_open(struct xtq__engine *e);
void xtq__regions_close(struct xtq__engine *e);
/* Repost the regions that the provider could not take earlier. */
void xtq__regions_repost(struct xtq__engine *e);
/* Drop one reference; the last one reposts the region. */
void xtq__region_put(struct rx_region *r);
/* A message landed in region `r` from endpoint `src` (FI_SOURCE):
 * validate and dispatch it. */
void xtq__target_recv(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                      fi_addr_t src);
/* Retry backlogged tasks; returns how many left the backlog. */
int xtq__backlog_drain(struct xtq__engine *e);
/* Stop: drop the backlog (those commands never ran). */
void xtq__backlog_drop(struct xtq__engine *e);
/* Destroy: free tasks no agent will retire any more. */
void xtq__live_free(struct xtq__engine *e);

/* ---- acks.c ------------------------------------------------------------- */
/* Acknowledge put `seq` of rank `dest`; from any thread. */
void xtq__ack_send(struct xtq__engine *e, int dest, uint64_t seq, int status);
/* Send queued acks (progress thread); returns how many left the queue. */
int xtq__acks_flush(struct xtq__engine *e);
/* Stop: free acks never sent; later ones are dropped (any thread). */
void xtq__acks_drop(struct xtq__engine *e);

/* ---- liveness.c --------------------------------------------------------- */
/* A valid message from `src` arrived. */
void xtq__peer_heard(struct xtq__engine *e, uint32_t src);
/* A ping (answered here) or a pong: true, nothing else to do with it. */
bool xtq__probe_recv(struct xtq__engine *e, const struct xtq__wire_hdr *hdr);
/* Declare rank `r` down: its puts fail with -XTQ_EHOSTDOWN. */
void xtq__peer_down(struct xtq__engine *e, int r, const char *why);
/* Progress thread: ping quiet peers, declare silent ones down. */
void xtq__peers_check(struct xtq__engine *e);

/* ---- wakeup.c ----------------------------------------------------------- */
/* Doorbells (same host, CQ without a wait fd) and the eventfd. */
int xtq__wakeup_open(struct xtq__engine *e, bool same_host);
/* Our doorbell's name for the address exchange ("" when none). */
void xtq__wakeup_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX]);
/* After the address exchange (`names`: every rank's, `stride` apart): map
 * the peers' doorbells; then a fence, after which our name is unlinked. */
int xtq__wakeup_connect(struct xtq__engine *e, const char *names, size_t stride);
void xtq__wakeup_close(struct xtq__engine *e);
/* A message went to `dest`: wake its progress thread if it sleeps. */
void xtq__bell_ring(struct xtq__engine *e, int dest);
/* Ask our progress thread for a turn. */
void xtq__engine_wake(struct xtq__engine *e);
/* Wake the progress thread for good (stop is set). */
void xtq__wakeup_interrupt(struct xtq__engine *e);
/* Progress thread: sleep until the CQ has something, a wake-up, or a nap. */
void xtq__progress_block(struct xtq__engine *e);

#endif /* XTQ_ENGINE_INT_H */
