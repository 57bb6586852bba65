/*
 * Bootstrap: who we are, how many we are, and how to reach the others.
 * Three ways, chosen in this order: the caller's out-of-band collectives
 * (xtq_init_attr_t.oob: any MPI, any launcher), the PMIx client under
 * mpirun (Open MPI) or srun --mpi=pmix, or a singleton (rank 0 of 1) when
 * the process was started without a launcher.
 */
#ifndef XTQ_BOOTSTRAP_H
#define XTQ_BOOTSTRAP_H

#include "internal.h"

/* Room for a host identity (bootstrap.c, host_identity()). */
#define XTQ__HOST_ID_MAX 192

struct xtq__bootstrap {
    int rank;
    int size;
    int local_rank; /* index among the ranks on this host */
    int local_size; /* ranks on this host */
    bool pmix;      /* the PMIx client is in use */
    bool oob;       /* the caller's collectives (oob_coll) are in use */
    bool same_host; /* every rank on this host */
    uint64_t job_key;
    /*
     * Random, drawn by rank 0 and agreed at bootstrap: unique per context,
     * whatever the job key (two contexts of one process, two jobs started
     * with one XTQ_JOB_KEY). Names what must not collide between contexts,
     * such as shared-memory objects (xtq__bootstrap_shm_name).
     */
    uint64_t instance;
    xtq_oob_coll_t oob_coll;
    uint8_t *barrier_buf; /* size bytes: the OOB barrier's allgather */
    char nspace[256];
    char (*hosts)[XTQ__HOST_ID_MAX]; /* size entries */
};

/* What xtq_init() hands the bootstrap from xtq_init_attr_t. */
struct xtq__bootstrap_attr {
    const xtq_oob_coll_t *oob; /* NULL: PMIx, or a singleton */
    bool has_job_key;          /* job_key given by the caller */
    uint64_t job_key;
};

/*
 * Returns 0, -XTQ_EINVAL (a bad OOB description, or ranks that disagree on
 * a job key they were given), -XTQ_EBOOTSTRAP or -XTQ_ENOMEM.
 */
int xtq__bootstrap_init(const struct xtq__bootstrap_attr *attr, struct xtq__bootstrap **bs);
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

/*
 * The name of rank `rank`'s shared-memory object `what` ("bell", say) in
 * this context: "/xtq-<what>-<job key>-<instance>-<rank>", unique across
 * contexts and jobs. Returns 0 or -XTQ_ENOSPC.
 */
int xtq__bootstrap_shm_name(const struct xtq__bootstrap *bs, const char *what, int rank, char *buf,
                            size_t len);

/*
 * Locality from every rank's host identity (`hosts`, size entries): this
 * rank's index among the ranks that share its identity, their number, and
 * whether every rank shares it. Pure; exposed for tests.
 */
void xtq__bootstrap_locality(const char (*hosts)[XTQ__HOST_ID_MAX], int size, int rank,
                             int *local_rank, int *local_size, bool *same_host);

#endif /* XTQ_BOOTSTRAP_H */
