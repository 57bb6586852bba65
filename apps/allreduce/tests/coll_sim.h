/*
 * Every rank of a team in one process: the schedules (coll_sched.c) run by
 * the receive side the library uses (coll_exec.c), with messages delivered
 * and ranks posting in a random order. A message's data is read from its
 * sender's buffer when it is delivered, not when it is sent: the latest a
 * transport may read it, so a schedule that overwrites what an earlier
 * send still has to deliver shows up as a wrong result.
 */
#ifndef XTQ_COLL_SIM_H
#define XTQ_COLL_SIM_H

#include <stdint.h>

#include "coll_exec.h"

struct sim_case {
    enum xtq_coll_kind kind;
    enum xtq_coll_alg alg;
    int nranks, root, inplace, handshake;
    uint64_t count, piece_elems;
    enum xtq_datatype type;
    enum xtq_op op;
    uint64_t seed;
    int exact; /* inputs whose reduction is exact in any order */
    /* Mismatch injection: rank `bad_rank` (>= 0) uses bad_count / bad_op. */
    int bad_rank;
    uint64_t bad_count;
    enum xtq_coll_alg bad_alg; /* the bad rank's algorithm (AUTO: the same) */
    /* Receivers read each piece from the sender's buffer themselves
     * (coll_exec_arrive_src, as same-host CMA does), reductions in chunks
     * of chunk_elems (0: the library's default). */
    int by_reader;
    uint64_t chunk_elems;
    /* Deliver each message the moment its send is released, inside the
     * releasing rank's completion (as a peer on another thread may answer
     * before that completion returns); only when the receiver has posted. */
    int immediate;
};

struct sim_result {
    int err; /* 0, or what went wrong (message in `why`) */
    char why[256];
    uint64_t msgs, bytes;       /* messages and payload bytes delivered */
    uint64_t stash_peak;        /* most bytes stashed by one rank */
    uint64_t stash_bound;       /* largest bound a rank's schedule gave */
    int detected;               /* mismatch: ranks that saw it */
    uint64_t reads, read_bytes; /* by_reader: reads of senders' buffers, bytes */
    uint64_t copy_reads;        /* ... of them straight into a copying receive's place */
};

/* Run a case; compare results bitwise with the fixed-order reference
 * (exact inputs) or across ranks (any inputs). */
void sim_run(const struct sim_case *c, struct sim_result *res);

#endif /* XTQ_COLL_SIM_H */
