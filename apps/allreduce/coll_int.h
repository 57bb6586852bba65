/*
 * libxtq_coll internals shared by the host runtime (coll.c) and the CUDA
 * team code (coll_cuda.cu): the message header every step carries in its
 * kernel arguments, and the wire constants.
 */
#ifndef XTQ_COLL_INT_H
#define XTQ_COLL_INT_H

#include <stdint.h>

#include <xtq/coll.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLL_MAGIC 0x4c4f4358u /* "XCOL" */

enum coll_msg_kind {
    COLL_MSG_DATA = 1,   /* a step's piece (or a zero-length one) */
    COLL_MSG_CREDIT = 2, /* handshake: the receiver has posted */
    COLL_MSG_ABORT = 3,  /* the sender's instance failed: every rank fails it */
    COLL_MSG_HELLO = 4,  /* team barrier (creation, destruction) */
    /* A step's piece left in the sender's memory (src_pid, src_addr): the
     * receiving task reads it itself (same host, CMA), like DATA else. */
    COLL_MSG_DATA_CMA = 5,
    /* Team creation: can the receiver read the sender's memory? It reads
     * 8 bytes at src_addr and compares them with `count`. */
    COLL_MSG_CMA_PROBE = 6,
    /* CUDA teams on one host (peer reads, XTQ_COLL_GPU_PEER). Team
     * creation: can the receiver map the sender's device memory? The
     * payload is a CUDA IPC handle; the receiver maps it and compares its
     * first 8 bytes with `count`. */
    COLL_MSG_GPU_PROBE = 7,
    /* The sender's buffer for slot `slot` from now on: the payload is its
     * IPC handle, `count` its bytes, `status` its generation (> 0). */
    COLL_MSG_GPU_HANDLE = 8,
    /* A step's piece left in the sender's GPU, in that buffer at byte
     * `src_addr`, generation `src_pid`: the receiving GPU reads it there
     * (NVLink or PCIe peer access), like DATA else. */
    COLL_MSG_DATA_GPU = 9,
    /* Team creation: whether every peer could map the sender's memory
     * (`status` 1) or not (0); a team reads peers only where all did. */
    COLL_MSG_GPU_VOTE = 10,
};

/*
 * What a step says about itself, so that the receiving task can check it
 * against its own call before touching memory: the call's signature
 * (count, type, op, root, algorithm, handshake, piece size), which message
 * of the sender's schedule it is (seq), and the range it covers.
 */
struct coll_hdr {
    uint32_t magic;
    uint8_t kind;  /* enum coll_msg_kind */
    uint8_t type;  /* enum xtq_datatype */
    uint8_t op;    /* enum xtq_op */
    uint8_t alg;   /* enum xtq_coll_alg */
    uint32_t team; /* team id: members' ranks and index hashed */
    uint16_t slot;
    uint8_t ckind; /* enum xtq_coll_kind */
    uint8_t handshake;
    uint32_t sender; /* team rank */
    uint32_t seq;    /* the sender's seq-th message to this rank */
    int32_t root;
    int32_t status; /* ABORT: the error; HELLO: the round */
    uint64_t instance;
    uint64_t count;
    uint64_t piece; /* elements per piece */
    uint64_t off, cnt;
    uint64_t src_addr; /* DATA_CMA, CMA_PROBE: where the elements are */
    int32_t src_pid;   /* ... in this process (the sender) */
    uint32_t flags;    /* COLL_HDR_*; 0 */
    uint64_t ready;    /* COLL_HDR_READY: the ready word's value to wait for */
};

/* DATA_GPU: sent with the call, before the sender's GPU wrote the piece;
 * the receiver's GPU waits until the ready word at the start of the
 * sender's buffer holds h.ready or more, then reads. */
#define COLL_HDR_READY 1u

/* Kernel arguments of every step (CPU and CUDA agents alike). Arguments 0
 * and 1 are rewritten by the engine; with a bounded registration argument
 * 0 is sent as the slot's byte offset and argument 2 is its extent. */
struct coll_kargs {
    uint64_t target;
    uint64_t payload;
    uint64_t extent;
    struct coll_hdr h;
};

struct xtq_coll_team;

/* For tests: sends a CUDA team armed on their mirror copy's completion
 * (XTQ_COLL_GPU_CHAIN), or -1 where the team does not chain (host team,
 * task mode, copies on the stream, or a GPU with native host atomics). */
int64_t coll_team_chained_sends(const struct xtq_coll_team *t); /* exported for tests only */
/* For tests: sends of a team with peer reads that went with the call, their
 * receivers waiting for the ready word (XTQ_COLL_GPU_READY), or -1 where the
 * team does not do so. */
int64_t coll_team_ready_sends(const struct xtq_coll_team *t); /* exported for tests only */
/* For tests: the team's later calls never store their ready word (a peer
 * whose GPU is wedged after its messages left). */
void coll_team_drop_ready(struct xtq_coll_team *t); /* exported for tests only */
/* For tests (exported for them only): the buffers this team maps on its
 * peers (peer reads) claim `bytes` more than they hold, as a peer whose
 * buffer is smaller than its handle says would (the peers must refuse). */
void coll_team_gpu_claim_extra(struct xtq_coll_team *t, uint64_t bytes);
/* For tests (exported for them only): one GPU task of a CUDA team that
 * waits until the 64-bit device word `word` holds `val` (as a reduction
 * waits for a peer's ready word, with the team's bounds): its result;
 * -XTQ_ENOAGENT on a host team. */
int coll_team_gpu_wait(struct xtq_coll_team *t, const void *word, uint64_t val);
/* For tests: fail call `instance` and every later one here and at every
 * member (what this rank does when its post fails), and the number of the
 * team's next call. */
void coll_team_abort(struct xtq_coll_team *t, uint64_t instance, int err);
uint64_t coll_team_next_instance(const struct xtq_coll_team *t);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_COLL_INT_H */
