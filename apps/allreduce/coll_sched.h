/*
 * Collective schedules, as pure code: for one rank of a team, the list of
 * steps of a reduce or allreduce ("send elements [a, b) of buffer X to
 * rank Y", "reduce what arrives from rank Y into elements [a, b) of X"),
 * with the dependencies between them derived from the data each step
 * reads and writes. No I/O, no libxtq state: unit-tested by running every
 * rank of a team in one process (tests/test_coll_sched.c) and executed by
 * the collective runtime (coll.c) as XtqPuts and receive tasks.
 *
 * Matching: the k-th send from rank p to rank q pairs with the k-th
 * receive at q from p (program order per direction, as MPI's message
 * ordering), so a rank computes its own schedule alone and a message
 * carries only its sender's sequence number.
 *
 * Buffers: WORK is where the result builds up (recvbuf; scratch for a
 * reduce's non-root ranks), SEND the caller's input (read only; when the
 * call is in place, WORK holds the input and SEND is never named),
 * SCRATCH per-instance memory of scratch_elems elements.
 */
#ifndef XTQ_COLL_SCHED_H
#define XTQ_COLL_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include <xtq/coll.h>

#ifdef __cplusplus
extern "C" {
#endif

enum coll_buf { COLL_BUF_WORK = 0, COLL_BUF_SEND = 1, COLL_BUF_SCRATCH = 2, COLL_BUF_COUNT };

enum coll_op_type {
    COLL_OP_SEND = 0,           /* buf[off, off+cnt) to peer */
    COLL_OP_SEND_CREDIT = 1,    /* zero bytes: "posted, you may send" to peer */
    COLL_OP_RECV_REDUCE = 2,    /* buf[off..] = buf[off..] op in */
    COLL_OP_RECV_REDUCE_TO = 3, /* buf[off..] = lower op higher of abuf[aoff..] and in */
    COLL_OP_RECV_COPY = 4,      /* buf[off..] = in */
    COLL_OP_RECV_CREDIT = 5,    /* zero bytes from peer: it has posted */
};

static inline int coll_op_is_recv(unsigned type)
{
    return type >= COLL_OP_RECV_REDUCE;
}

/* Dependencies are indices of this rank's receives ("recv index"). */
struct coll_op {
    uint8_t type;      /* enum coll_op_type */
    uint8_t buf;       /* enum coll_buf: source of a send, destination of a receive */
    uint8_t abuf;      /* RECV_REDUCE_TO: the local operand */
    uint8_t in_first;  /* RECV_REDUCE_TO: the incoming operand goes first (peer < rank) */
    uint16_t step;     /* algorithm step (for messages and traces) */
    uint8_t phase;     /* enum coll_phase */
    uint8_t after_all; /* a send that waits for every earlier receive */
    int32_t peer;
    uint32_t seq;       /* k: the k-th op of this direction with this peer */
    uint32_t index;     /* among this rank's sends, or among its receives */
    uint32_t ndeps;     /* receives that must have executed first */
    uint32_t dep_first; /* into coll_sched.deps */
    uint64_t off, cnt;  /* elements */
    uint64_t aoff;
};

enum coll_phase {
    COLL_PHASE_CREDIT,   /* handshake */
    COLL_PHASE_FOLD,     /* non-power-of-two ranks folded in (MPICH) */
    COLL_PHASE_EXCHANGE, /* recursive doubling */
    COLL_PHASE_RS,       /* reduce-scatter */
    COLL_PHASE_AG,       /* allgather */
    COLL_PHASE_GATHER,   /* to the root */
    COLL_PHASE_UNFOLD,
    COLL_PHASE_RELEASE, /* a reduce's folded rank waits for its partner */
};

/* A local copy done when the instance is posted, before anything else. */
struct coll_copy {
    uint8_t src, dst; /* enum coll_buf */
    uint64_t src_off, dst_off, cnt;
};

struct coll_params {
    enum xtq_coll_kind kind;
    enum xtq_coll_alg alg;  /* resolved (not AUTO) */
    int nranks, rank, root; /* root: reduce only */
    uint64_t count;         /* elements */
    uint32_t elem_size;     /* bytes per element */
    uint64_t piece_elems;   /* largest message, elements (>= 1) */
    int inplace;            /* WORK holds the input */
    int handshake;          /* receivers send credits; senders wait for them */
};

struct coll_sched {
    struct coll_params p;
    struct coll_op *ops; /* program order */
    uint32_t nops, nsends, nrecvs;
    uint32_t *recv_op; /* recv index -> op index */
    uint32_t *send_op; /* send index -> op index */
    uint32_t *deps;    /* recv indices */
    uint32_t ndeps;
    /* Inverse of deps, per receive: the receives and sends that wait for
     * it, as op indices in succ[succ_first[r] .. succ_first[r + 1]). */
    uint32_t *succ_first;
    uint32_t *succ;
    /* Receives from each peer in program order, for (peer, seq) lookup:
     * by_peer[peer_first[q] + seq] is a recv index. */
    uint32_t *peer_first; /* nranks + 1 */
    uint32_t *by_peer;
    struct coll_copy prologue[2];
    unsigned nprologue;
    uint64_t scratch_elems;
    /* Bytes that may arrive before the receive can run and so be kept
     * (stashed) until it can: reducing receives that can come before the
     * post (no handshake), or whose local inputs are not done yet. Copying
     * receives never need it (their earlier writers precede them causally:
     * coll_exec.c's run() counts receives down before it releases sends, so
     * an answer that overtakes the release still finds them done). */
    uint64_t stash_bound;
    uint64_t max_msg_elems;
    uint64_t op_cap, dep_cap; /* allocation */
};

/** MPICH's choice, with our thresholds (bytes). */
struct coll_thresholds {
    uint64_t rd_max;   /* recursive doubling up to this many bytes */
    uint64_t ring_min; /* a ring from this many bytes (else Rabenseifner) */
};

/* The algorithm AUTO resolves to. */
enum xtq_coll_alg coll_choose_alg(enum xtq_coll_kind kind, int nranks, uint64_t count,
                                  uint32_t elem_size, const struct coll_thresholds *th);

/* Build the schedule of p->rank. Returns 0, -XTQ_EINVAL or -XTQ_ENOMEM. */
int coll_sched_build(const struct coll_params *p, struct coll_sched *s);
void coll_sched_free(struct coll_sched *s);

/* The receive index for the seq-th message from `peer`, or -1. */
int64_t coll_sched_lookup(const struct coll_sched *s, int peer, uint64_t seq);

/* Largest power of two <= n (n >= 1), and its log2. */
int coll_pof2(int n);
int coll_log2(int n);

const char *coll_phase_name(unsigned phase);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_SCHED_H */
