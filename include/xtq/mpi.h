/*
 * libxtq_mpi: MPI one-sided accumulates carried by XtqPuts, for MPI
 * programs that change nothing (paper Section V-C).
 *
 * The layer is a PMPI library: link it before the MPI library
 * (-lxtq_mpi -lmpi) or preload it into an unmodified binary
 * (LD_PRELOAD=libxtq_mpi.so; libxtq_mpi_mpich.so for MPICH). It
 * initialises libxtq inside MPI_Init over MPI_COMM_WORLD, decides at
 * window creation whether a window is accelerated (every rank of the
 * window agrees; a window is accelerated whole or not at all), and then
 * runs the window's accumulates (MPI_Accumulate, MPI_Get_accumulate,
 * MPI_Fetch_and_op, MPI_Compare_and_swap and their request forms) as
 * tasks on the target's agent, without the target process entering MPI.
 * docs/mpi.md describes windows, epochs, fallbacks and limits.
 *
 * This header holds the few MPIX_ extensions a program may want; none is
 * needed to use the layer. They exist only while the layer is linked or
 * preloaded (look them up with dlsym to stay optional).
 */
#ifndef XTQ_MPI_H
#define XTQ_MPI_H

#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Info key for MPI_Win_create / MPI_Win_allocate: "false" leaves the
 * window to the MPI library (every call on it passes through); "true"
 * accelerates a window the default policy would leave to the MPI (an
 * MPI_Win_allocate window whose ranks share one host). Every rank of the
 * window should give the same value; if any rank cannot accelerate, none
 * does.
 */
#define MPIX_XTQ_INFO_ACCELERATE "xtq_accelerate"

/**
 * Info key: where MPI_Put and MPI_Get on an accelerated window go: "mpi"
 * (the MPI's own one-sided layer, the default) or "xtq" (tasks on the
 * target's agent, like the accumulates). Overrides XTQ_MPI_PUT_GET.
 */
#define MPIX_XTQ_INFO_PUT_GET "xtq_put_get"

/**
 * Whether `win` is accelerated: *flag 1 or 0. When `reason` is not NULL,
 * the reason (or "accelerated") is copied there, at most reason_len bytes
 * with the terminating NUL.
 * @return MPI_SUCCESS, or MPI_ERR_WIN for a window the layer did not see
 *         created (*flag is 0 then).
 */
int MPIX_Xtq_win_accelerated(MPI_Win win, int *flag, char *reason, int reason_len);

/** What the layer did on one window, from this process's side. */
typedef struct MPIX_Xtq_counts {
    uint64_t accumulates;  /**< MPI_Accumulate / MPI_Raccumulate run as tasks */
    uint64_t fetching;     /**< get_accumulate, fetch_and_op, compare_and_swap */
    uint64_t puts_xtq;     /**< MPI_Put / MPI_Rput run as tasks */
    uint64_t gets_xtq;     /**< MPI_Get / MPI_Rget run as tasks */
    uint64_t puts_mpi;     /**< MPI_Put / MPI_Get / MPI_R* left to the MPI */
    uint64_t xtq_puts;     /**< XtqPuts issued (large operations take several; lock
                                commands and resends after a refusal included) */
    uint64_t bytes;        /**< operand bytes sent in those puts */
    uint64_t errors;       /**< puts that failed (reported at the epoch's close) */
    uint64_t passthrough;  /**< calls on a window that is not accelerated */
    uint64_t lock_puts;    /**< of xtq_puts: lock / unlock commands sent on their own
                                (a lock epoch's first operation asks for the lock, its
                                last gives it back: none when the lock was free) */
    uint64_t lock_refused; /**< lock epochs whose first operation was refused (lock
                                busy), then resent once the lock was taken */
    uint64_t refused_here; /**< first operations of lock epochs (any origin's) that
                                this process's window refused: lock busy */
} MPIX_Xtq_counts;

/**
 * This process's counts for `win`.
 * @return MPI_SUCCESS, or MPI_ERR_WIN for a window the layer did not see
 *         created.
 */
int MPIX_Xtq_win_counts(MPI_Win win, MPIX_Xtq_counts *counts);

/**
 * Whether the layer is active in this process (*flag 1): libxtq is
 * initialised and XTQ_MPI is not off. When not, `reason` says why.
 */
int MPIX_Xtq_enabled(int *flag, char *reason, int reason_len);

/**
 * This process's reductions (MPI_Allreduce, MPI_Reduce, MPI_Iallreduce,
 * MPI_Ireduce) so far: how many were routed to libxtq_coll, how many
 * passed through to the MPI (whatever the reason: XTQ_MPI_STATS=1 prints
 * them by reason), how many failed (ranks disagreed on their arguments).
 * Any pointer may be NULL. @return MPI_SUCCESS.
 */
int MPIX_Xtq_coll_counts(uint64_t *routed, uint64_t *passed, uint64_t *failed);

#ifdef __cplusplus
}
#endif

#endif /* XTQ_MPI_H */
