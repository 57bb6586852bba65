/*
 * Bootstrap: who we are, how many we are, and how to reach the others.
 * Under mpirun (Open MPI) or srun --mpi=pmix the PMIx client is used; a
 * process started without a launcher is a singleton, rank 0 of 1.
 */
#ifndef XTQ_BOOTSTRAP_H
#define XTQ_BOOTSTRAP_H

#include "internal.h"

#define XTQ__HOSTNAME_MAX 64
/* hostname|network namespace|boot id (see host_identity in bootstrap.c) */
#define XTQ__HOST_ID_MAX 128

struct xtq__bootstrap {
    int rank;
    int size;
    int local_rank; /* index among the ranks on this host */
    int local_size; /* ranks on this host */
    bool pmix;      /* false: singleton */
    bool same_host; /* every rank on this host (same host identity) */
    uint64_t job_key;
    char nspace[256];
    char (*hosts)[XTQ__HOST_ID_MAX]; /* host identities, size entries */
};

int xtq__bootstrap_init(struct xtq__bootstrap **bs);
void xtq__bootstrap_fini(struct xtq__bootstrap *bs);

/*
 * Exchange one blob per rank (all blobs the same length). `out` receives
 * size * len bytes, rank r's blob at r * len.
 */
int xtq__bootstrap_allgather(struct xtq__bootstrap *bs, const char *key, const void *blob,
                             size_t len, void *out);

/*
 * Barrier. `poll` (may be NULL) is called repeatedly while waiting, so a
 * manual-progress engine keeps answering peers that are still sending.
 */
int xtq__bootstrap_barrier(struct xtq__bootstrap *bs, void (*poll)(void *arg), void *arg);

#endif /* XTQ_BOOTSTRAP_H */
