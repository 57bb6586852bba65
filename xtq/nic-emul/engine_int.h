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
#include "registry/registry.h"

/* First word of every libfabric operation context, so a CQ entry says
 * what it completes. */
enum ctx_kind {
    CTX_REGION = 0x52454731u,
    CTX_PUT = 0x50555431u,
    CTX_ACK = 0x41434b31u,
    CTX_CTRL = 0x4354524cu,
};

/* The control channel (acks.c): acks without a result, liveness probes
 * and re-asks travel tagged, into receives of their own, so that puts
 * that fill the multi-receive regions cannot hold them up. */
#define XTQ__CTRL_TAG 0x5854510000000001ull
struct ctrl_rx {
    uint32_t kind; /* CTX_CTRL */
    _Atomic uint32_t needs_post;
    _Alignas(64) uint8_t buf[64]; /* one wire header */
};

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
    /* Since it was posted (progress turn): bytes of messages that landed,
     * the furthest end, and a release the provider reported too early. */
    size_t landed, landed_end;
    bool release_pending;
    uint64_t pending_since; /* when the release came early (ns) */
    bool out; /* released by the provider, not posted again yet */
    /* inbox.c: a mirror slot of peer `inbox_src`'s ring, not a posted
     * region; free again (its ring slot too) when refs drop to 0. */
    bool inbox;
    bool inbox_done; /* under inbox_lock */
    uint32_t inbox_src;
};

/*
 * The target's record of one put from a peer, from its arrival until its
 * ack is on the wire (acks.c): entry seq % window of that peer's ring,
 * allocated with the ring at the peer's first put, so that acknowledging
 * never allocates. The entry is free again the moment its ack is handed
 * to the transport (the initiator may reuse the window slot as soon as it
 * has the ack); it keeps the seq and status for a re-ask. A fetching
 * put's result lives in `block` until then, and from then on belongs to
 * its send (struct ack_send at the block's start).
 */
enum ack_state {
    ACK_FREE = 0, /* never used, or its ack left (sent) */
    ACK_HELD,     /* the put arrived; its ack is not known yet */
    ACK_QUEUED,   /* known, waiting in the send queue or for a retry */
};

/* Times an initiator sends a put again after MISSING answers; at the
 * next MISSING it fails the put with -XTQ_EIO (initiator.c). The target
 * counts its MISSING answers to know when that happened (acks.c). */
#define XTQ__RESEND_MAX 8

struct ack_entry {
    uint8_t state;        /* ACK_*, under ack_lock (so are the fields below) */
    bool sent;            /* its ack left: seq and status are the last put's */
    bool result_inflight; /* its result's send has not completed yet */
    bool pooled;          /* block from the result pool */
    bool used;            /* seq names a put that arrived, or a tombstone */
    bool missing;         /* tombstone: asked for, never arrived (MISSING) */
    uint8_t missing_sent; /* MISSING answers for this tombstone; past
                           * XTQ__RESEND_MAX the initiator has given up and
                           * no resend revives it */
    int32_t status;
    int32_t dest;
    uint32_t result_len; /* the put's result bytes */
    uint32_t tries;      /* sends that failed */
    uint64_t seq;
    uint64_t since;      /* queued at (ns), or when a retry is due */
    uint64_t refused_at; /* first send the transport refused (ns), 0: none
                          * yet; refused for a whole peer timeout: the
                          * destination is gone */
    struct ack_entry *next;
    uint8_t *block; /* [struct ack_send][ack header][result], or NULL */
};

/* The first bytes of a result block: the context of its send, on the
 * engine's list of sends in flight until it completes. */
struct ack_send {
    uint32_t kind; /* CTX_ACK */
    bool pooled;
    uint32_t result_len;
    struct ack_entry *entry; /* the entry it was sent for, if still that seq */
    uint64_t seq;
    struct ack_send *prev, *next;
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
    struct ack_entry *ack;             /* its ack and result (acks.c) */
    struct xtq__task_refs refs;        /* from enqueue to retire (registry.h) */
    _Alignas(16) uint8_t scratch[256]; /* kernel arguments that landed misaligned */
};

/* SLOT_BUSY from issue to DONE; SLOT_ARMED while a trigger holds it back;
 * SLOT_SENDING while a thread is handing it to the transport, or while it
 * waits in the send queue (XTQ_ENDPOINT_OWNER=progress) for the progress
 * turn that does (the slot, its stage and trigger stay until it is let
 * go, even if the put completes meanwhile: a peer declared down).
 * SLOT_HELD: failed (peer down) while the transport still held its message:
 * DONE, not yet LOCAL (the caller's buffers may still be sent once the link
 * returns), and not reused until the transport lets go, so that a late
 * completion cannot be taken for a new put's (liveness.c). */
enum slot_state {
    SLOT_BUSY = 1u << 0,
    SLOT_LOCAL = 1u << 1,
    SLOT_ACKED = 1u << 2,
    SLOT_ARMED = 1u << 3,
    SLOT_SENDING = 1u << 4,
    SLOT_HELD = 1u << 5,
    /* DONE already for its caller: the waiter read the target's completion
     * word (notify.c); the ack still frees the slot. */
    SLOT_DIRECT = 1u << 6,
};

/* How a put leaves: gathered from the caller's buffers (all of them, or
 * all but the command, which joins the header in the stage), or copied
 * whole into the stage (injected when small, else sent from there). */
enum put_send { SEND_GATHER, SEND_GATHER_CMD, SEND_COPY, SEND_INJECT };

/* Most pieces one send gathers, whatever the provider's iov_limit. */
#define WIRE_IOV_MAX 8

struct put_layout {
    size_t cmd_len;
    size_t payload_len; /* bytes of all pieces */
    size_t pieces;      /* pieces of nonzero length */
    size_t pad1, pad2, total;
    enum put_send how;
};

/* A triggered put (initiator.c): armed with its slot, its command in the
 * stage, the caller's pieces read when it fires. */
struct put_trigger {
    struct put_trigger *prev, *next; /* armed or ready list, under put_lock */
    uint8_t list;                    /* TRIG_NONE, TRIG_ARMED, TRIG_READY */
    struct put_slot *slot;
    struct xtq_signal *sig;
    enum xtq_signal_condition cond;
    int64_t value;
    struct put_layout l;
    size_t piovcnt;
    struct iovec piov[]; /* the caller's pieces */
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
    xtq_counter_t *counter; /* counted when DONE, or NULL */
    void *result;           /* a fetching put's buffer, or NULL */
    size_t result_len;
    struct put_trigger *trig; /* a triggered put, until the slot is free */
    uint64_t local_at;        /* ns: when it left (LOCAL), for re-asks */
    uint8_t asks;             /* ASKs since it (last) left */
    uint8_t resends;          /* times sent again after a MISSING answer */
    bool detach_at_local;
    bool notify; /* asked for the target's completion word (wire flag NOTIFY) */
    /* inbox.c: its message goes into the target's inbox, ring index
     * inbox_idx (reserved under put_lock); or it went through the
     * transport (fi_counted: counted in its peer's fi_unacked). */
    bool inbox;
    bool inbox_sent;   /* it did: LOCAL at once, as injected */
    bool inbox_filled; /* its slot holds the message already: publish only */
    bool fi_counted;
    uint64_t inbox_idx;
    /* Wire header, plus the command where it is gathered here, plus the
     * payload where it is copied (eager, or more pieces than the provider
     * gathers); kept for the slot's next put unless large. */
    uint8_t *stage;
    size_t stage_cap;
    /* The send as the caller made it, for the progress turn that makes it
     * (XTQ_ENDPOINT_OWNER=progress): layout, pieces, and the queue link.
     * The layout is kept for every put: one staged whole may be resent. */
    struct put_layout txl;
    struct iovec txiov[WIRE_IOV_MAX];
    uint8_t txniov;
    struct mpsc_node txq;
};

/* Liveness probes are ACK headers with these reserved sequence numbers
 * (liveness.c); so is FIN, a degraded finalize's "I am closing". */
#define PING_SEQ UINT64_MAX
#define PONG_SEQ (UINT64_MAX - 1)
#define FIN_SEQ (UINT64_MAX - 2)

/* What this rank knows of another: its window (initiator.c) and when it
 * was last heard from (liveness.c). */
struct peer {
    struct put_slot *slots;
    uint64_t next_seq;
    uint64_t done_below;         /* every put of a lower seq is DONE (flush), under put_lock */
    uint32_t busy;               /* busy slots, under put_lock */
    struct ack_entry *acks;      /* target side: window entries, or NULL (acks.c) */
    _Atomic uint64_t last_heard; /* ns of its last answer; reset when the first put goes out */
    _Atomic uint64_t last_msg;   /* ns of any valid message from it (initiator.c's flow control) */
    uint64_t ping_sent;          /* ns, progress thread only */
    uint64_t first_ping;         /* ns: the oldest ping not answered, progress thread only */
    uint32_t pings;              /* sent since last heard, progress thread only */
    uint32_t pings_failed;       /* of those, refused by the transport */
    _Atomic bool down;
    _Atomic bool fin; /* it sent FIN: it is finalizing, every put of its done */
    /* inbox.c: puts to it that went through the transport and whose slot
     * is not free yet (the target may not have handled them: no inbox
     * put may overtake them); the next inbox ring index to reserve. */
    _Atomic uint32_t fi_unacked;
    uint64_t inbox_next;       /* under the engine's inbox_tx_lock */
    uint64_t inbox_freed_seen; /* its ring's `freed` when last read, same lock */
};

/* A rank's doorbell in POSIX shared memory (wakeup.c); its name travels
 * in the address exchange. */
#define XTQ__BELL_NAME_MAX 64

/*
 * Completion words on one host (notify.c, docs/design.md "Completion
 * words on one host"): each engine's own segment in POSIX shared memory,
 * which its retire writes and the other ranks of the host map read-only.
 * Rank r's put `seq` (wire flag NOTIFY) finishes in
 * words[r * words_per_peer + seq % words_per_peer], set to
 * XTQ__NOTIFY_WORD(seq, status) with release order before its ack leaves.
 */
#define XTQ__NOTIFY_MAGIC 0x584e5731u /* "XNW1" */
struct xtq__notify_seg {
    uint32_t magic;
    uint32_t words_per_peer; /* the owner's put window: a power of two or not */
    uint32_t nranks;
    uint32_t pad_[13];
    _Atomic uint64_t words[];
};
/*
 * Inboxes on one host (inbox.c, docs/design.md "Inboxes on one host"):
 * each engine's segment holds one ring per initiator rank, which that
 * rank writes and this engine reads in its progress turn, in place of
 * the transport for puts of up to slot_bytes. Slot i of rank r's ring is
 * current when its flag is i + 1 (stored last, release); the engine
 * copies the message out and stores `freed` once its task has let go of
 * the copy, so the initiator may write index freed + nslots - 1 at most.
 */
#define XTQ__INBOX_MAGIC 0x58494231u /* "XIB1" */
struct xtq__inbox_slot {
    _Atomic uint64_t flag; /* index + 1: the message below is whole */
    uint32_t len;          /* bytes of it (0: a reserved index left unused) */
    uint8_t pad_[XTQ_CACHELINE - 12];
    uint8_t data[]; /* slot_bytes */
};
struct xtq__inbox_ring {
    _Atomic uint64_t freed; /* the owner's: indices below it are free */
    uint8_t pad_[XTQ_CACHELINE - 8];
};
struct xtq__inbox_seg {
    uint32_t magic;
    uint32_t nranks;
    uint32_t nslots;     /* per ring */
    uint32_t slot_bytes; /* message bytes per slot, a multiple of 64 */
    /* 1: the owner scans every ring's next slot (few ranks), writers
     * leave `posted` alone; 0: writers bump it after their flag. */
    uint32_t scan;
    uint8_t pad0_[XTQ_CACHELINE - 20];
    _Atomic uint64_t posted;
    uint8_t pad1_[XTQ_CACHELINE - 8];
    struct xtq__inbox_ring rings[]; /* nranks, then the slots, ring by ring */
};

/* (status << 32) | low 32 bits of seq + 1: never 0 for the fresh word
 * (a put whose seq + 1 wraps to 0 is not sent with NOTIFY). */
#define XTQ__NOTIFY_WORD(seq, status)                                                              \
    (((uint64_t)(uint32_t)(int32_t)(status) << 32) | (uint32_t)((seq) + 1))
/* Peers' segments of one kind (notify.c, inbox.c), mapped after the
 * address exchange (wakeup.c): seg[r] is rank r's (NULL where it has none
 * or it failed its checks), ours at our own rank; len[r] its mapped
 * length. seg NULL: none wanted, or no memory for the table. */
struct shm_peers {
    void **seg;
    size_t *len;
};

struct doorbell {
    _Atomic uint32_t seq;
    _Atomic uint32_t sleeping;
    uint8_t pad_[XTQ_CACHELINE - 8];
};

struct xtq__engine {
    xtq_ctx_t *ctx;
    unsigned plane; /* index in ctx->planes: rank i's puts travel on plane i % nplanes */
    struct xtq__ofi ofi;
    bool manual;
    uint32_t window;
    size_t max_msg;  /* cmd_len + payload_len */
    size_t max_wire; /* largest PUT on the wire */

    /* target.c */
    struct rx_region *regions;
    unsigned nregions;
    /* Regions the provider does not hold (tasks still point into them,
     * or spares): while all are out, messages wait unmatched. */
    _Atomic uint32_t regions_out;
    /* Only rx_posted_min regions are kept posted; the others wait on the
     * spare stack, the most recently used on top, until the posted ones
     * are held by tasks. A message lands where the previous ones did, in
     * memory the cache still holds (issue 11). Under rx_lock. */
    pthread_mutex_t rx_lock;
    unsigned rx_posted_min;
    unsigned rx_posted; /* posted, or about to be (needs_post) */
    unsigned rx_nspare;
    struct rx_region **rx_spare;

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
    /* Triggered puts: armed (evaluated), and fired but not yet taken by
     * the transport; both under put_lock. */
    struct put_trigger *trig_armed, *trig_armed_tail, *trig_ready, *trig_ready_tail;
    uint32_t trig_device;          /* armed on signals a device changes */
    _Atomic uint32_t trig_count;   /* armed + ready */
    _Atomic uint32_t trig_kick;    /* a signal an armed put watches changed */
    uint64_t trig_next_poll;       /* progress turn only */
    bool trig_listed;              /* on the list of engines signals kick */
    struct xtq__engine *trig_link; /* that list */

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
    struct ack_entry *acks_head, *acks_tail;
    struct ack_entry *acks_retry; /* sends that failed, due at `since` */
    uint64_t acks_retry_due;      /* the earliest of them */
    _Atomic uint32_t acks_retrying;
    struct ack_send *acks_inflight; /* results being sent */
    bool acks_closed;               /* after stop: acks are dropped, not queued */
    struct ctrl_rx *ctrl;           /* the control channel's receives */
    unsigned nctrl;
    uint64_t next_reask;           /* initiator.c, progress turn only */
    _Atomic uint32_t acks_pending; /* in the send queue */
    uint8_t *res_pool;             /* result blocks of RESULT_BLOCK bytes, agent-reachable */
    uint32_t *res_free;            /* free block indices, under ack_lock */
    uint32_t res_nfree;
    bool res_registered;

    /* progress.c, wakeup.c */
    pthread_t thread;
    bool thread_started;
    bool ofi_open;
    _Atomic bool stop;
    _Atomic uint32_t sleeping; /* threads in xtq__progress_block */
    _Atomic uint32_t kick; /* a turn is wanted before the thread sleeps */
    int wake_fd;
    int progress_cpu;
    struct doorbell **bells;            /* by rank; NULL unless doorbells are in use */
    bool bell_fence;                    /* doorbells wanted: every rank takes the fence */
    char bell_name[XTQ__BELL_NAME_MAX]; /* until every peer mapped it */
    bool same_host;                     /* every rank on this host (the bootstrap's word) */

    /* notify.c: completion words on one host (XTQ_DIRECT_COMPLETION) */
    struct xtq__notify_seg *notify_own;        /* ours (our retire writes it), or NULL */
    bool notify_agents;                        /* ours is mapped for every agent's device */
    size_t notify_len;                         /* bytes of every segment of this engine */
    char notify_name[XTQ__BELL_NAME_MAX];      /* until every peer mapped it */
    struct shm_peers notify_peers;             /* read-only maps; seg NULL: ack only */

    /* inbox.c: small puts on one host (XTQ_SHM_INBOX) */
    struct xtq__inbox_seg *inbox_own;     /* ours: peers write their rings in it */
    size_t inbox_len;                     /* bytes of every inbox segment of this engine */
    char inbox_name[XTQ__BELL_NAME_MAX];  /* until every peer mapped it */
    struct shm_peers inbox_peers;         /* read-write maps; seg NULL: transport only */
    uint8_t *inbox_mirror;                /* private copies, nranks x nslots x slot_bytes */
    size_t inbox_mirror_len;
    bool inbox_mirror_agents;             /* mapped for every agent's device */
    struct rx_region *inbox_regions;      /* one per mirror slot */
    /* by source rank: next index to take (written in the turn only; read
     * by the progress thread's watch between turns) */
    _Atomic uint64_t *inbox_cons;
    _Atomic uint64_t *inbox_freed;        /* by source rank: stored under inbox_lock */
    _Atomic uint64_t inbox_posted_seen;   /* the segment's `posted` at the last full look */
    uint64_t inbox_poll_ns;               /* XTQ_SHM_INBOX_POLL_NS */
    pthread_mutex_t inbox_lock;
    bool inbox_lock_init;
    /* Reservations in the peers' rings (struct peer.inbox_next): puts
     * under put_lock, control messages and acks from any thread; taken
     * last, nothing taken under it. */
    pthread_mutex_t inbox_tx_lock;
    bool inbox_tx_lock_init;

    /* initiator.c, progress.c (XTQ_LONE_WAITER): a thread alone in
     * xtq_completion_wait takes the progress turns and sleeps on the
     * transport; the progress thread parks until it leaves. lone_waiter
     * is 1 while one does (a futex word), parked counts the parked. */
    bool lone_waiter_on;
    _Atomic uint32_t lone_waiter;
    _Atomic uint32_t parked;

    uint64_t wait_spin_ns;     /* XTQ_WAIT_SPIN_US, resolved */
    uint64_t wait_spin_max_ns; /* XTQ_WAIT_SPIN_MAX_US, resolved (0: no adapting) */
    /* Running average of how long completion waits took (initiator.c,
     * xtq__wait_est_update); read and written relaxed: a lost update only
     * delays the average a little. */
    _Atomic uint64_t wait_est_ns;
    uint64_t progress_spin_ns; /* XTQ_PROGRESS_SPIN_US, resolved */

    /* initiator.c: acks dropped, for puts answered already (a resend's or
     * a re-ask's second answer, a put failed meanwhile: expected after a
     * fault) and for puts never sent (the peer's error). */
    _Atomic uint64_t acks_late;
    _Atomic uint64_t acks_unknown;

    /* progress.c (XTQ_PROGRESS_BACKOFF_US): when a thread other than the
     * progress thread last took a turn (refreshed a few times per back-off,
     * not every turn); the progress thread takes none for backoff_ns after
     * it. A line of its own (padded, the engine being calloc'ed): the
     * progress thread reads it while it waits. */
    uint64_t backoff_ns;
    uint8_t app_turn_pad0[64];
    _Atomic uint64_t app_turn_ns;
    uint8_t app_turn_pad1[64];

    /* liveness.c */
    uint64_t peer_timeout_ns; /* 0: never declare a peer down */
    uint64_t next_peer_check;
    _Atomic uint32_t peers_down;
};

/* ---- initiator.c -------------------------------------------------------- */
/* The send of slot `s` completed (status 0) or failed in the transport. */
void xtq__slot_local(struct xtq__engine *e, struct put_slot *s, int status, int prov_errno);
/* An ACK for one of our puts arrived (validated header; `result`: the
 * hdr->result_len bytes after it, or NULL). */
void xtq__initiator_ack(struct xtq__engine *e, const struct xtq__wire_hdr *hdr, const void *result);
/* Complete every put pending to rank `r` with `status` (peer down). */
void xtq__puts_fail_peer(struct xtq__engine *e, int r, int status);
/* Complete every put still pending, keeping an earlier error (stop). */
void xtq__puts_fail_all(struct xtq__engine *e, int status);
/* Progress turn: evaluate armed triggers where a signal changed (or the
 * polling interval passed) and send what fired; returns puts sent. */
int xtq__triggers_poll(struct xtq__engine *e);
/* Stop: signals no longer kick this engine. */
void xtq__triggers_stop(struct xtq__engine *e);
/* Progress turn: ask again for acks that are overdue (lost on the way). */
void xtq__puts_reask(struct xtq__engine *e);
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
/* A message of `len` bytes landed at `buf` in region `r` (progress turn). */
void xtq__region_landed(struct rx_region *r, const void *buf, size_t len);
/* Regions whose release has waited more than `after_ns` (at `now`) for a
 * message cut from them: counted, and reported once with a warning (a
 * sender stalled mid-message, or a provider that dropped one). */
unsigned xtq__regions_stuck(struct xtq__engine *e, uint64_t now, uint64_t after_ns);
/* The provider released region `r` (an FI_MULTI_RECV completion): it is
 * reposted once every message cut from it has landed, or at once when
 * `at_once` (the release came with an error, and what it held is lost). */
void xtq__region_released(struct rx_region *r, bool at_once);
/* A message landed in region `r` from endpoint `src` (FI_SOURCE):
 * validate and dispatch it. */
/* A message that came through rank `src`'s inbox ring (inbox.c): `buf`
 * holds its copy up to the payload; with `inplace` (the ring slot's
 * message), the payload is read there instead, at the same offset. */
void xtq__target_recv_inbox(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                            uint32_t src, const void *inplace);
void xtq__target_recv(struct xtq__engine *e, struct rx_region *r, const void *buf, size_t len,
                      fi_addr_t src);
/* Retry backlogged tasks; returns how many left the backlog. */
int xtq__backlog_drain(struct xtq__engine *e);
/* Stop: drop the backlog (those commands never ran). */
void xtq__backlog_drop(struct xtq__engine *e);
/* Destroy: free tasks no agent will retire any more. */
void xtq__live_free(struct xtq__engine *e);

/* ---- acks.c ------------------------------------------------------------- */
/* Create: the result pool (registered with the agents). */
int xtq__acks_open(struct xtq__engine *e);
/* Destroy (the endpoint is closed): rings, result blocks, the pool. */
void xtq__acks_close(struct xtq__engine *e);
/* A put (`seq` from `src`) arrived (progress turn): its entry, HELD, with
 * a zero-filled result buffer of result_len bytes where asked. NULL when
 * it cannot be recorded (*err: -XTQ_EALREADY for a duplicate, an older
 * put, or one refused as MISSING that is not its resend; -XTQ_EPROTO for
 * an entry another put holds, -XTQ_ENOMEM); an entry with *err set (its
 * result could not be allocated) must be acknowledged with *err. */
struct ack_entry *xtq__ack_hold(struct xtq__engine *e, uint32_t src, uint64_t seq,
                                uint32_t result_len, bool resend, int *err);
/* The task's result buffer of a held entry (NULL when none). */
void *xtq__ack_result(const struct ack_entry *a);
/* The put's outcome is known: send its ack (with the result when status
 * is 0), now or from the progress thread. From any thread; once. */
void xtq__ack_done(struct xtq__engine *e, struct ack_entry *a, int status);
/* A put that cannot be recorded: best-effort ack, nothing kept. */
void xtq__ack_unrecorded(struct xtq__engine *e, int dest, uint64_t seq, int status);
/* A result's send (its block's struct ack_send) completed (status 0) or
 * failed (a fabric error code; progress turn). */
void xtq__ack_sent(struct xtq__engine *e, void *send, int status);
/* Send queued acks (progress thread); returns how many left the queue. */
int xtq__acks_flush(struct xtq__engine *e);
/* The initiator asks again for the ack of put `seq` (a control message):
 * sent again if it left already, else it is on its way; asked `again`
 * for a put that never arrived: refused for good and answered MISSING. */
void xtq__ack_reask(struct xtq__engine *e, uint32_t src, uint64_t seq, bool again);
/* The control channel: post its receives (create); send a header on it
 * (0, or the fabric's error; a progress turn where the progress thread
 * owns the endpoint); one arrived (progress turn: `len` bytes from
 * endpoint `src`, or an error when ok is false); repost what the provider
 * refused earlier. */
int xtq__ctrl_open(struct xtq__engine *e);
void xtq__ctrl_close(struct xtq__engine *e);
ssize_t xtq__ctrl_send(struct xtq__engine *e, int dest, const struct xtq__wire_hdr *hdr);
void xtq__ctrl_recv(struct xtq__engine *e, struct ctrl_rx *c, size_t len, fi_addr_t src, bool ok);
void xtq__ctrl_repost(struct xtq__engine *e);
/* Stop: acks never sent are dropped, and later ones too (any thread). */
void xtq__acks_drop(struct xtq__engine *e);

/* ---- liveness.c --------------------------------------------------------- */
/* A valid message from `src` arrived. */
void xtq__peer_msg(struct xtq__engine *e, const struct xtq__wire_hdr *hdr);
/* A ping (answered here) or a pong: true, nothing else to do with it. */
bool xtq__probe_recv(struct xtq__engine *e, const struct xtq__wire_hdr *hdr);
/* Declare rank `r` down: its puts fail with -XTQ_EHOSTDOWN. */
void xtq__peer_down(struct xtq__engine *e, int r, const char *why);
/* Progress thread: ping quiet peers, declare silent ones down. */
void xtq__peers_check(struct xtq__engine *e);
/* One step of a bounded wait at finalize (lifecycle.c): a progress turn
 * where no progress thread runs, else a 200 us nap. */
void xtq__engine_wait_step(struct xtq__engine *e);
/* The bootstrap key of this plane's exchange: `base` on plane 0, else
 * "base.PLANE" (lifecycle.c). */
#define XTQ__KEY_MAX 32
void xtq__engine_key(const struct xtq__engine *e, const char *base, char out[XTQ__KEY_MAX]);

/* ---- progress.c ----------------------------------------------------------- */
/* Whether this thread is taking a progress turn of `e` now: where the
 * progress thread owns the endpoint (XTQ_ENDPOINT_OWNER=progress), only
 * such a thread may use it. */
bool xtq__engine_in_turn(const struct xtq__engine *e);

/* ---- wakeup.c ----------------------------------------------------------- */
/* Doorbells (same host, CQ without a wait fd) and the eventfd. */
int xtq__wakeup_open(struct xtq__engine *e, bool same_host);

/* POSIX shared memory for the peers of this host (wakeup.c): a new
 * segment of `len` bytes, read-write, named in `name` (unique on the host:
 * job key, rank, process id, a count, `tag`), NULL with the name emptied
 * on failure (errno says why); and a peer's, mapped with `prot` (its whole
 * length in *len), NULL when absent or shorter than `min`. */
void *xtq__shm_create(const struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX], const char *tag,
                      size_t len);
void *xtq__shm_map(const char *name, int prot, size_t min, size_t *len);
/* Fill `t` from the names the exchange carried (`names`, `stride` apart):
 * ours is `own`, every other rank's is what `map` returns for its name.
 * Returns how many were mapped, -1 without memory (t->seg stays NULL). */
int xtq__shm_peers_map(struct xtq__engine *e, struct shm_peers *t, const char *names,
                       size_t stride, void *own,
                       void *(*map)(const char *name, int r, int nranks, size_t *len));
/* Unmap every peer's (not `own`) and free the table. */
void xtq__shm_peers_unmap(struct xtq__engine *e, struct shm_peers *t, const void *own);
/* Unmap our own segment `p` (NULL: nothing), deregistered from the agents
 * first where `agents` says it was registered with them. */
void xtq__shm_unmap(struct xtq__engine *e, void *p, size_t len, bool agents);

/* ---- notify.c: completion words on one host ----------------------------- */
/* Make this engine's segment where XTQ_DIRECT_COMPLETION allows (never
 * fails: without it puts are acked only). Before the address exchange. */
void xtq__notify_open(struct xtq__engine *e);
/* Our segment's name for the address exchange ("" when none). */
void xtq__notify_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX]);
/* Map the peers' segments (read-only); a peer without one is acked only. */
void xtq__notify_connect(struct xtq__engine *e, const char *names, size_t stride);
/* Every rank has mapped ours: its name leaves /dev/shm. */
void xtq__notify_unlink(struct xtq__engine *e);
void xtq__notify_close(struct xtq__engine *e);

/* ---- inbox.c: small puts on one host (XTQ_SHM_INBOX) -------------------- */
/* The same life as notify.c's segment: made before the exchange, named in
 * it, peers' mapped after it, unlinked at the fence. Never fails. */
void xtq__inbox_open(struct xtq__engine *e);
void xtq__inbox_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX]);
void xtq__inbox_connect(struct xtq__engine *e, const char *names, size_t stride);
void xtq__inbox_unlink(struct xtq__engine *e);
void xtq__inbox_close(struct xtq__engine *e);
/* Initiator, under put_lock: whether a message of `len` bytes to `target`
 * goes into its inbox, with the ring index it takes (*idx). */
bool xtq__inbox_reserve(struct xtq__engine *e, int target, size_t len, uint64_t *idx);
/* Any thread: a control message or an ack (header, and a result) to
 * `dest` through its inbox: 0 (written, as an inject would have sent it)
 * or -FI_EAGAIN (no inbox, too long, or the ring full: the transport). */
ssize_t xtq__inbox_send(struct xtq__engine *e, int dest, const void *msg, size_t len);
/* Initiator: copy the message `iov` gathers into the slot (fill), then
 * make it the target's (publish); write is both (niov 0: give the index
 * back unused). */
void xtq__inbox_fill(struct xtq__engine *e, int target, uint64_t idx, const struct iovec *iov,
                     size_t niov);
void xtq__inbox_publish(struct xtq__engine *e, int target, uint64_t idx);
void xtq__inbox_write(struct xtq__engine *e, int target, uint64_t idx, const struct iovec *iov,
                      size_t niov);
/* Target, in the turn: take what every ring holds; returns the messages. */
int xtq__inbox_poll(struct xtq__engine *e);
/* Target, any thread (no turn needed): whether a ring holds a message. */
bool xtq__inbox_pending(const struct xtq__engine *e);
/* Target, in the turn: take what rank `src`'s ring holds (before a message
 * of it that came through the transport, which must not overtake it). */
void xtq__inbox_take_from(struct xtq__engine *e, uint32_t src);
/* A mirror slot's last task let go of it (xtq__region_put). */
void xtq__inbox_release(struct rx_region *r);
/* Target side, in retire: put `seq` of rank `src` finished with `status`. */
void xtq__notify_post(struct xtq__engine *e, uint32_t src, uint64_t seq, int status);
/* Target side, at enqueue: that word, for an agent that stores it itself
 * (struct xtq__enqueue.notify), or NULL. */
_Atomic uint64_t *xtq__notify_own_word(struct xtq__engine *e, uint32_t src, uint64_t seq);
/* Initiator side: the word put `seq` to `target` finishes in, or NULL when
 * that put cannot be completed through one (no segment, window too big). */
const _Atomic uint64_t *xtq__notify_word(const struct xtq__engine *e, int target, uint64_t seq);
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
