/*
 * Epochs on accelerated windows: every synchronisation call is the
 * layer's own, so that an operation is complete at the close of its epoch
 * whichever path it took.
 *
 *  - completion (flush*, unlock*, fence, complete): the MPI's own
 *    operations first (MPI_Win_flush on the MPI window's permanent
 *    passive epoch, only where this process used it), then xtq_flush
 *    (every XtqPut acknowledged after its task finished on the target),
 *    then results unpacked into derived datatypes; errors the targets
 *    reported (an out-of-range displacement: MPI_ERR_RMA_RANGE) are
 *    raised here, at the close of the epoch.
 *  - passive target (lock/unlock): a lock word per window on the target.
 *    MPI_Win_lock sends nothing; the epoch keeps its latest command back
 *    (struct xtq__mpi_held), so that its first command carries the lock
 *    request (applied only if the lock is granted, else refused: the
 *    origin then takes the lock with the sync task, retried with a
 *    growing pause, and resends) and its last the release. A one-command
 *    epoch is one XtqPut. MPI_Win_lock_all is lazy in the same way, per
 *    target: only the targets an epoch touched are locked and released.
 *    The target process is never involved.
 *  - fence: completion, then a barrier of the window's processes.
 *  - PSCW: zero-byte messages on the window's private communicator
 *    (post -> start, complete -> wait), sent after completion.
 */
#include "xmpi.h"

#include <time.h>

enum { TAG_POST = 1, TAG_COMPLETE = 2 };

void xtq__mpi_pending_done(struct xtq__mpi_win *w, int target);

/* Errors reported to this process since the last check. */
static int new_errors(struct xtq__mpi_win *w)
{
    uint64_t err = xtq_counter_read_err(w->counter);
    int first;

    pthread_mutex_lock(&w->lock);
    if (w->local_err) {
        /* A put waited on alone (an epoch's first or last command). */
        first = w->local_err;
        w->local_err = 0;
        pthread_mutex_unlock(&w->lock);
        xmpi_log(WARN, "window %u: an operation failed on its target: %s", w->kindex,
                 xtq_errname(first));
        return xtq__mpi_errclass(first);
    }
    if (err == w->err_seen) {
        pthread_mutex_unlock(&w->lock);
        return MPI_SUCCESS;
    }
    xtq__mpi_wcount(w, XTQ__MPI_S_ERRORS, err - w->err_seen);
    w->err_seen = err;
    pthread_mutex_unlock(&w->lock);
    first = xtq_counter_error(w->counter);
    xmpi_log(WARN, "window %u: an operation failed on its target: %s", w->kindex,
             xtq_errname(first));
    return xtq__mpi_errclass(first ? first : -XTQ_EIO);
}

static int send_held(struct xtq__mpi_win *w, int target);
static int send_held_all(struct xtq__mpi_win *w);

int xtq__mpi_complete(struct xtq__mpi_win *w, int target)
{
    int rc = MPI_SUCCESS, xrc = 0;
    bool mpi_flush = false;

    /* Commands a lock epoch kept back go first (the lock stays). */
    xrc = target < 0 ? send_held_all(w) : send_held(w, target);
    if (xrc)
        rc = xtq__mpi_errclass(xrc);

    pthread_mutex_lock(&w->lock);
    if (target < 0) {
        mpi_flush = w->any_mpi_dirty;
        w->any_mpi_dirty = false;
        for (int r = 0; r < w->size; r++)
            w->peer[r].mpi_dirty = 0;
    } else if (w->peer[target].mpi_dirty) {
        mpi_flush = true;
        w->peer[target].mpi_dirty = 0;
    }
    pthread_mutex_unlock(&w->lock);
    if (mpi_flush) {
        int m = target < 0 ? PMPI_Win_flush_all(w->win) : PMPI_Win_flush(target, w->win);
        if (rc == MPI_SUCCESS)
            rc = m;
    }

    xrc = xtq_flush(xtq__mpi.ctx, target < 0 ? XTQ_TARGET_ALL : w->peer[target].xrank,
                    XTQ_TIMEOUT_INFINITE);
    xtq__mpi_pending_done(w, target);
    if (xrc) {
        xmpi_log(WARN, "window %u: flush failed: %s", w->kindex, xtq_errname(xrc));
        if (rc == MPI_SUCCESS)
            rc = xtq__mpi_errclass(xrc);
    }
    if (rc == MPI_SUCCESS)
        rc = new_errors(w);
    return xtq__mpi_win_error(w, rc);
}

/* ---- passive target ------------------------------------------------------------------- */

static void pause_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Take the lock of `target`'s window (blocking: retried while refused). */
static int lock_take(struct xtq__mpi_win *w, int target, int type)
{
    long backoff = 1000;

    for (;;) {
        xtq_completion_t comp;
        uint64_t granted = 0;
        int rc;

        memset(&comp, 0, sizeof(comp));
        rc = xtq__mpi_sync_op(w, target, XTQ__MPI_LOCK, type, &granted, &comp);
        if (rc == 0)
            rc = xtq__mpi_wait(&comp);
        if (rc)
            return rc;
        if (granted)
            return 0;
        /* The holder may be waiting on the MPI's own put/get to us (they
         * go to the MPI's one-sided layer), and MPICH moves those only
         * when the target enters MPI: let it progress while we wait. */
        if (!w->shell) {
            int flag = 0;
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->comm, &flag, MPI_STATUS_IGNORE);
        }
        pause_ns(backoff);
        backoff = backoff < 1000000 ? backoff * 2 : backoff;
    }
}

/* ---- lazy lock epochs --------------------------------------------------------------------
 *
 * A lock epoch to a CPU window (MPI_Win_lock, or lock_all per target)
 * keeps its latest command back (peer->held), so that:
 *  - the first command carries ACQUIRE: the target applies it only with
 *    the lock granted, else refuses it (-XTQ_EBUSY, nothing applied); the
 *    origin then takes the lock with lock commands and resends it;
 *  - the last carries RELEASE (MPI_Win_unlock, _unlock_all), in the queue behind the
 *    epoch's earlier commands (barrier bit);
 *  - a lone command carries both: lock/acc/unlock is one XtqPut.
 * Nothing overtakes a first command whose lock is not known: the next
 * command (or an MPI put/get, a flush) waits for its outcome first. A
 * command that fails changes no lock state at the target (task.h), so
 * the origin always knows whether it holds the lock (peer->granted).
 * GPU windows run their commands in the CUDA queue, where no lock word
 * is: their lock is taken with lock commands before the first one.
 * Everything here runs under w->hold_lock. */

static bool keeps_back(const struct xtq__mpi_peer *p)
{
    return p->lock && !p->nocheck && !p->gpu;
}

/* A put waited on alone failed: raised at the epoch's close. */
static void note_error(struct xtq__mpi_win *w, int rc)
{
    pthread_mutex_lock(&w->lock);
    if (!w->local_err)
        w->local_err = rc;
    pthread_mutex_unlock(&w->lock);
    xtq__mpi_wcount(w, XTQ__MPI_S_ERRORS, 1);
}

static int fire_wait(struct xtq__mpi_win *w, int target, uint8_t flags)
{
    xtq_completion_t comp;
    int rc;

    memset(&comp, 0, sizeof(comp));
    rc = xtq__mpi_fire(w, target, &w->peer[target].held, flags, &comp);
    return rc ? rc : xtq__mpi_wait(&comp);
}

/* The kept-back command goes with ACQUIRE and is waited for. Refused:
 * the lock is taken with lock commands and the command resent. `need`:
 * the caller needs the lock afterwards even if the command failed. */
static int take_lock(struct xtq__mpi_win *w, int target, bool need)
{
    struct xtq__mpi_peer *p = &w->peer[target];
    int rc;

    if (p->granted || !p->lock || p->nocheck)
        return 0;
    if (p->has_held) {
        p->has_held = false;
        rc = fire_wait(w, target, XTQ__MPI_F_ACQUIRE(p->lock));
        if (rc == 0) {
            p->granted = 1;
            return 0;
        }
        if (rc == -XTQ_EBUSY) {
            xtq__mpi_wcount(w, XTQ__MPI_S_REFUSED, 1);
            rc = lock_take(w, target, p->lock);
            if (rc) {
                note_error(w, rc); /* the command was not applied */
                return rc;
            }
            p->granted = 1;
            rc = xtq__mpi_fire(w, target, &p->held, 0, NULL);
            if (rc)
                note_error(w, rc);
            return 0;
        }
        note_error(w, rc); /* not applied, no lock taken */
        if (!need)
            return 0;
    }
    rc = lock_take(w, target, p->lock);
    if (rc == 0)
        p->granted = 1;
    return rc;
}

int xtq__mpi_emit(struct xtq__mpi_win *w, int target, struct xtq__mpi_held *h, bool must_send)
{
    struct xtq__mpi_peer *p = &w->peer[target];
    int rc = 0;

    pthread_mutex_lock(&w->hold_lock);
    if (p->lock && !p->nocheck && !p->granted && (p->gpu || must_send || p->has_held))
        rc = take_lock(w, target, true);
    if (rc == 0 && p->has_held) {
        p->has_held = false;
        rc = xtq__mpi_fire(w, target, &p->held, 0, NULL);
        if (rc) {
            note_error(w, rc);
            rc = 0;
        }
    }
    if (rc == 0) {
        if (keeps_back(p) && !must_send) {
            p->held = *h;
            p->has_held = true;
        } else {
            rc = xtq__mpi_fire(w, target, h, 0, NULL);
        }
    }
    pthread_mutex_unlock(&w->hold_lock);
    return rc;
}

int xtq__mpi_epoch_need_lock(struct xtq__mpi_win *w, int target)
{
    int rc;

    pthread_mutex_lock(&w->hold_lock);
    rc = take_lock(w, target, true);
    pthread_mutex_unlock(&w->hold_lock);
    return rc;
}

/* Completion: the kept-back command goes (with ACQUIRE where the lock is
 * not known yet); the lock stays. */
static int send_held(struct xtq__mpi_win *w, int target)
{
    struct xtq__mpi_peer *p = &w->peer[target];
    int rc = 0;

    pthread_mutex_lock(&w->hold_lock);
    if (p->has_held) {
        if (!p->granted && p->lock && !p->nocheck) {
            rc = take_lock(w, target, false);
        } else {
            p->has_held = false;
            rc = xtq__mpi_fire(w, target, &p->held, 0, NULL);
            if (rc) {
                note_error(w, rc);
                rc = 0;
            }
        }
    }
    pthread_mutex_unlock(&w->hold_lock);
    return rc;
}

/* Completion of every target (flush_all, unlock_all's end, fence): the
 * kept-back commands whose lock is not known yet go together, each with
 * ACQUIRE, and are waited for together (one round trip for a lock_all
 * epoch's first flush_all, not one per target); the others go at once. A
 * refused one takes its lock with lock commands and is resent, as in
 * take_lock. The first error (a lock that could not be taken). */
static int send_held_all(struct xtq__mpi_win *w)
{
    xtq_completion_t *comp = calloc((size_t)w->size, sizeof(*comp));
    uint8_t *asked = calloc((size_t)w->size, 1);
    int rc = 0;

    if (!comp || !asked) {
        free(comp);
        free(asked);
        for (int r = 0; r < w->size; r++) {
            int x = send_held(w, r);
            if (x && !rc)
                rc = x;
        }
        return rc;
    }
    pthread_mutex_lock(&w->hold_lock);
    for (int r = 0; r < w->size; r++) {
        struct xtq__mpi_peer *p = &w->peer[r];
        bool acquire = !p->granted && p->lock && !p->nocheck;
        int x;

        if (!p->has_held)
            continue;
        p->has_held = false;
        x = xtq__mpi_fire(w, r, &p->held, acquire ? XTQ__MPI_F_ACQUIRE(p->lock) : 0,
                          acquire ? &comp[r] : NULL);
        if (x)
            note_error(w, x); /* not applied, no lock taken */
        else if (acquire)
            asked[r] = 1;
    }
    for (int r = 0; r < w->size; r++) {
        struct xtq__mpi_peer *p = &w->peer[r];
        int x;

        if (!asked[r])
            continue;
        x = xtq__mpi_wait(&comp[r]);
        if (x == 0) {
            p->granted = 1;
            continue;
        }
        if (x != -XTQ_EBUSY) {
            note_error(w, x); /* not applied, no lock taken */
            continue;
        }
        xtq__mpi_wcount(w, XTQ__MPI_S_REFUSED, 1);
        x = lock_take(w, r, p->lock);
        if (x) {
            note_error(w, x); /* the command was not applied */
            if (!rc)
                rc = x;
            continue;
        }
        p->granted = 1;
        x = xtq__mpi_fire(w, r, &p->held, 0, NULL);
        if (x)
            note_error(w, x);
    }
    pthread_mutex_unlock(&w->hold_lock);
    free(comp);
    free(asked);
    return rc;
}

/* The end of a lock epoch: the kept-back command goes with RELEASE (and
 * ACQUIRE if the lock was never needed before: one XtqPut for the whole
 * epoch); otherwise, where the lock was taken, a release on its own. */
static int lock_release(struct xtq__mpi_win *w, int target)
{
    struct xtq__mpi_peer *p = &w->peer[target];
    int type = p->lock, rc = 0;

    if (p->nocheck)
        return MPI_SUCCESS;
    /* A GPU window's commands run in another queue: completed first. */
    if (p->gpu && p->granted) {
        rc = xtq__mpi_complete(w, target);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    pthread_mutex_lock(&w->hold_lock);
    if (p->has_held) {
        p->has_held = false;
        rc = fire_wait(w, target,
                       XTQ__MPI_F_RELEASE(type) | (p->granted ? 0 : XTQ__MPI_F_ACQUIRE(type)));
        if (rc == -XTQ_EBUSY && !p->granted) {
            xtq__mpi_wcount(w, XTQ__MPI_S_REFUSED, 1);
            rc = lock_take(w, target, type);
            if (rc == 0) {
                p->granted = 1;
                rc = fire_wait(w, target, XTQ__MPI_F_RELEASE(type));
            }
        }
        if (rc == 0)
            p->granted = 0; /* given back by the command */
        else
            note_error(w, rc); /* not applied; a lock held goes on its own below */
        rc = 0;
    }
    if (p->granted) {
        rc = xtq__mpi_sync_op(w, target, XTQ__MPI_UNLOCK, type, NULL, NULL);
        p->granted = 0;
    }
    pthread_mutex_unlock(&w->hold_lock);
    return rc ? xtq__mpi_win_error(w, xtq__mpi_errclass(rc)) : MPI_SUCCESS;
}

static int to_lock_type(int lock_type)
{
    return lock_type == MPI_LOCK_EXCLUSIVE ? XTQ__MPI_LOCK_EXCLUSIVE : XTQ__MPI_LOCK_SHARED;
}

/* MPI_Win_lock sends nothing to another process: the epoch's first
 * command asks for the lock (MPI-3.1 11.5.3 lets MPI_Win_lock return
 * before the lock is acquired). A lock of one's own window is taken at
 * once: the program may load and store its window inside the epoch. */
XMPI_EXPORT int MPI_Win_lock(int lock_type, int rank, int assert, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    struct xtq__mpi_peer *p;
    int rc = 0;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_lock(lock_type, rank, assert, win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    if (rank < 0 || rank >= w->size)
        return xtq__mpi_win_error(w, MPI_ERR_RANK);
    if (lock_type != MPI_LOCK_SHARED && lock_type != MPI_LOCK_EXCLUSIVE)
        return xtq__mpi_win_error(w, MPI_ERR_LOCKTYPE);
    p = &w->peer[rank];
    if (p->lock)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    if (!(assert &MPI_MODE_NOCHECK) && rank == w->rank)
        rc = lock_take(w, rank, to_lock_type(lock_type));
    if (rc)
        return xtq__mpi_win_error(w, xtq__mpi_errclass(rc));
    pthread_mutex_lock(&w->hold_lock);
    p->lock = (uint8_t)to_lock_type(lock_type);
    p->nocheck = (assert &MPI_MODE_NOCHECK) != 0;
    p->granted = !p->nocheck && rank == w->rank;
    pthread_mutex_unlock(&w->hold_lock);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_unlock(int rank, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    struct xtq__mpi_peer *p;
    int rc = MPI_SUCCESS, rc2;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_unlock(rank, win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    if (rank < 0 || rank >= w->size)
        return xtq__mpi_win_error(w, MPI_ERR_RANK);
    p = &w->peer[rank];
    if (!p->lock || w->lock_all)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    /* The MPI's own puts complete before the lock goes. */
    if (p->mpi_dirty) {
        pthread_mutex_lock(&w->lock);
        p->mpi_dirty = 0;
        pthread_mutex_unlock(&w->lock);
        rc = PMPI_Win_flush(rank, win);
    }
    rc2 = lock_release(w, rank);
    pthread_mutex_lock(&w->hold_lock);
    p->lock = 0;
    p->nocheck = 0;
    p->granted = 0;
    pthread_mutex_unlock(&w->hold_lock);
    /* One wait for the commands and the release behind them (nothing
     * left to wait for after a one-command epoch). */
    {
        int rc3 = xtq__mpi_complete(w, rank);
        if (rc == MPI_SUCCESS)
            rc = rc2 != MPI_SUCCESS ? rc2 : rc3;
    }
    return rc;
}

/* The shared lock of one's own window, taken here (no command: a lock
 * epoch's own window may be loaded and stored at once), retried while an
 * exclusive holder has it. */
static void own_lock_take(struct xtq__mpi_win *w)
{
    long backoff = 1000;

    while (!xtq__mpi_lock_local_try(&w->tgt, XTQ__MPI_LOCK_SHARED, (uint32_t)w->rank)) {
        /* The holder may wait for the MPI's own put/get to us (MPICH
         * moves those only when we enter MPI), as in lock_take. */
        if (!w->shell) {
            int flag = 0;
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->comm, &flag, MPI_STATUS_IGNORE);
        }
        pause_ns(backoff);
        backoff = backoff < 1000000 ? backoff * 2 : backoff;
    }
}

/* MPI_Win_lock_all is lazy per target, as MPI_Win_lock is: it sends
 * nothing; a target's shared lock rides with the epoch's first command to
 * it (refused: taken with lock commands, and the command resent), its
 * release with the last. Only one's own window is locked at once, here. */
XMPI_EXPORT int MPI_Win_lock_all(int assert, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    bool nocheck = (assert &MPI_MODE_NOCHECK) != 0;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_lock_all(assert, win);
    if (w->lock_all)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    for (int r = 0; r < w->size; r++)
        if (w->peer[r].lock)
            return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    if (!nocheck)
        own_lock_take(w);
    pthread_mutex_lock(&w->hold_lock);
    for (int r = 0; r < w->size; r++) {
        w->peer[r].lock = XTQ__MPI_LOCK_SHARED;
        w->peer[r].nocheck = nocheck;
        w->peer[r].granted = !nocheck && r == w->rank;
    }
    w->lock_all = true;
    pthread_mutex_unlock(&w->hold_lock);
    return MPI_SUCCESS;
}

/* The end of a lock_all epoch's locks on other processes' windows: the
 * kept-back commands go together, each with RELEASE (and ACQUIRE where the
 * lock was never needed before), and are then waited for: one round trip
 * for them all rather than one per target. A refused one takes its lock
 * with lock commands and goes again, as in lock_release. Targets still
 * granted afterwards (no command kept back, or it failed) and GPU windows
 * go through lock_release; untouched targets send nothing. */
static int release_touched(struct xtq__mpi_win *w)
{
    xtq_completion_t *comp = calloc((size_t)w->size, sizeof(*comp));
    uint8_t *fired = calloc((size_t)w->size, 1);
    int rc = MPI_SUCCESS;

    pthread_mutex_lock(&w->hold_lock);
    for (int r = 0; comp && fired && r < w->size; r++) {
        struct xtq__mpi_peer *p = &w->peer[r];
        if (r == w->rank || p->nocheck || p->gpu || !p->has_held)
            continue;
        p->has_held = false;
        int x = xtq__mpi_fire(
            w, r, &p->held,
            XTQ__MPI_F_RELEASE(p->lock) | (p->granted ? 0 : XTQ__MPI_F_ACQUIRE(p->lock)), &comp[r]);
        if (x)
            note_error(w, x); /* not applied; a lock held goes on its own below */
        else
            fired[r] = 1;
    }
    for (int r = 0; comp && fired && r < w->size; r++) {
        struct xtq__mpi_peer *p = &w->peer[r];
        if (!fired[r])
            continue;
        int x = xtq__mpi_wait(&comp[r]);
        if (x == -XTQ_EBUSY && !p->granted) {
            xtq__mpi_wcount(w, XTQ__MPI_S_REFUSED, 1);
            x = lock_take(w, r, p->lock);
            if (x == 0) {
                p->granted = 1;
                x = fire_wait(w, r, XTQ__MPI_F_RELEASE(p->lock));
            }
        }
        if (x == 0)
            p->granted = 0; /* given back by the command */
        else
            note_error(w, x);
    }
    pthread_mutex_unlock(&w->hold_lock);
    free(comp);
    free(fired);
    /* The rest one by one (without memory for the above: all of them). */
    for (int r = 0; r < w->size; r++) {
        if (r == w->rank)
            continue;
        int x = lock_release(w, r);
        if (x != MPI_SUCCESS && rc == MPI_SUCCESS)
            rc = x;
    }
    return rc;
}

/* One's own window: its kept-back command carries the release; else its
 * commands complete and the lock is given back here. */
static int release_own(struct xtq__mpi_win *w)
{
    struct xtq__mpi_peer *p = &w->peer[w->rank];
    int rc;

    if (p->nocheck || !p->granted)
        return MPI_SUCCESS;
    if (p->has_held && !p->gpu)
        return lock_release(w, w->rank);
    rc = xtq__mpi_complete(w, w->rank);
    pthread_mutex_lock(&w->hold_lock);
    if (xtq__mpi_lock_local_drop(&w->tgt, p->lock, (uint32_t)w->rank))
        xmpi_log(WARN, "window %u: own shared lock was not held at unlock_all", w->kindex);
    p->granted = 0;
    pthread_mutex_unlock(&w->hold_lock);
    return rc;
}

XMPI_EXPORT int MPI_Win_unlock_all(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int rc = MPI_SUCCESS, rc2;
    bool mpi_flush;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_unlock_all(win);
    if (!w->lock_all)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    /* The MPI's own puts complete before any lock goes. */
    pthread_mutex_lock(&w->lock);
    mpi_flush = w->any_mpi_dirty;
    w->any_mpi_dirty = false;
    for (int r = 0; r < w->size; r++)
        w->peer[r].mpi_dirty = 0;
    pthread_mutex_unlock(&w->lock);
    if (mpi_flush)
        rc = PMPI_Win_flush_all(win);
    rc2 = release_touched(w);
    if (rc == MPI_SUCCESS)
        rc = rc2;
    rc2 = release_own(w);
    if (rc == MPI_SUCCESS)
        rc = rc2;
    pthread_mutex_lock(&w->hold_lock);
    for (int r = 0; r < w->size; r++) {
        w->peer[r].lock = 0;
        w->peer[r].nocheck = 0;
        w->peer[r].granted = 0;
    }
    w->lock_all = false;
    pthread_mutex_unlock(&w->hold_lock);
    /* One wait for the commands and the releases behind them. */
    rc2 = xtq__mpi_complete(w, -1);
    return rc != MPI_SUCCESS ? rc : rc2;
}

XMPI_EXPORT int MPI_Win_flush(int rank, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_flush(rank, win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    if (rank < 0 || rank >= w->size)
        return xtq__mpi_win_error(w, MPI_ERR_RANK);
    return xtq__mpi_complete(w, rank);
}

XMPI_EXPORT int MPI_Win_flush_all(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_flush_all(win);
    return xtq__mpi_complete(w, -1);
}

/* Local completion: the layer has no cheaper notion than completion. */
XMPI_EXPORT int MPI_Win_flush_local(int rank, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_flush_local(rank, win);
    if (rank == MPI_PROC_NULL)
        return MPI_SUCCESS;
    if (rank < 0 || rank >= w->size)
        return xtq__mpi_win_error(w, MPI_ERR_RANK);
    return xtq__mpi_complete(w, rank);
}

XMPI_EXPORT int MPI_Win_flush_local_all(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_flush_local_all(win);
    return xtq__mpi_complete(w, -1);
}

XMPI_EXPORT int MPI_Win_sync(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_sync(win);
    atomic_thread_fence(memory_order_seq_cst);
    return w->shell ? MPI_SUCCESS : PMPI_Win_sync(win);
}

/* ---- active target ---------------------------------------------------------------------- */

XMPI_EXPORT int MPI_Win_fence(int assert, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int rc = MPI_SUCCESS, brc;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_fence(assert, win);
    /* Complete what this process issued, then nobody leaves before every
     * process has: its memory then holds every update of the epoch. */
    if (!(assert &MPI_MODE_NOPRECEDE))
        rc = xtq__mpi_complete(w, -1);
    brc = PMPI_Barrier(w->comm);
    return rc != MPI_SUCCESS ? rc : brc;
}

/* Ranks of `group` in the window's communicator. */
static int *group_ranks(struct xtq__mpi_win *w, MPI_Group group, int *n)
{
    MPI_Group wg;
    int *in, *out;

    PMPI_Group_size(group, n);
    in = malloc(sizeof(int) * (size_t)(*n + 1));
    out = malloc(sizeof(int) * (size_t)(*n + 1));
    if (!in || !out) {
        free(in);
        free(out);
        return NULL;
    }
    for (int i = 0; i < *n; i++)
        in[i] = i;
    PMPI_Comm_group(w->comm, &wg);
    PMPI_Group_translate_ranks(group, *n, in, wg, out);
    PMPI_Group_free(&wg);
    free(in);
    return out;
}

/* Sends of `complete` still in flight from an earlier epoch. */
static void complete_sends_done(struct xtq__mpi_win *w)
{
    if (w->ncomplete_req)
        xtq__mpi_waitall(w->ncomplete_req, w->complete_req);
    w->ncomplete_req = 0;
}

XMPI_EXPORT int MPI_Win_post(MPI_Group group, int assert, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int n;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_post(group, assert, win);
    if (w->post_to)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    w->post_to = group_ranks(w, group, &n);
    if (!w->post_to)
        return xtq__mpi_win_error(w, MPI_ERR_NO_MEM);
    w->npost_to = n;
    w->post_req = calloc((size_t)n + 1, sizeof(MPI_Request));
    if (!w->post_req)
        return xtq__mpi_win_error(w, MPI_ERR_NO_MEM);
    for (int i = 0; i < n; i++) {
        w->post_req[i] = MPI_REQUEST_NULL;
        if (!(assert &MPI_MODE_NOCHECK))
            PMPI_Isend(NULL, 0, MPI_BYTE, w->post_to[i], TAG_POST, w->comm, &w->post_req[i]);
    }
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_start(MPI_Group group, int assert, MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int n;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_start(group, assert, win);
    if (w->start_to)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    complete_sends_done(w);
    w->start_to = group_ranks(w, group, &n);
    if (!w->start_to)
        return xtq__mpi_win_error(w, MPI_ERR_NO_MEM);
    w->nstart_to = n;
    if (!(assert &MPI_MODE_NOCHECK))
        for (int i = 0; i < n; i++)
            PMPI_Recv(NULL, 0, MPI_BYTE, w->start_to[i], TAG_POST, w->comm, MPI_STATUS_IGNORE);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_complete(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int rc;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_complete(win);
    if (!w->start_to)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    rc = xtq__mpi_complete(w, w->nstart_to == 1 ? w->start_to[0] : -1);
    free(w->complete_req);
    w->complete_req = calloc((size_t)w->nstart_to + 1, sizeof(MPI_Request));
    w->ncomplete_req = 0;
    for (int i = 0; i < w->nstart_to && w->complete_req; i++)
        PMPI_Isend(NULL, 0, MPI_BYTE, w->start_to[i], TAG_COMPLETE, w->comm,
                   &w->complete_req[w->ncomplete_req++]);
    free(w->start_to);
    w->start_to = NULL;
    w->nstart_to = 0;
    return rc;
}

static void exposure_done(struct xtq__mpi_win *w)
{
    xtq__mpi_waitall(w->npost_to, w->post_req);
    free(w->post_to);
    free(w->post_req);
    free(w->wait_req);
    w->post_to = NULL;
    w->post_req = NULL;
    w->wait_req = NULL;
    w->npost_to = 0;
}

static int post_wait_recvs(struct xtq__mpi_win *w)
{
    if (w->wait_req)
        return MPI_SUCCESS;
    w->wait_req = calloc((size_t)w->npost_to + 1, sizeof(MPI_Request));
    if (!w->wait_req)
        return MPI_ERR_NO_MEM;
    for (int i = 0; i < w->npost_to; i++)
        PMPI_Irecv(NULL, 0, MPI_BYTE, w->post_to[i], TAG_COMPLETE, w->comm, &w->wait_req[i]);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_wait(MPI_Win win)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int rc;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_wait(win);
    if (!w->post_to)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    rc = post_wait_recvs(w);
    if (rc != MPI_SUCCESS)
        return xtq__mpi_win_error(w, rc);
    /* Each origin sent `complete` after its commands finished here. */
    xtq__mpi_waitall(w->npost_to, w->wait_req);
    exposure_done(w);
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_test(MPI_Win win, int *flag)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);
    int rc;

    if (!xtq__mpi_accelerated(w))
        return PMPI_Win_test(win, flag);
    *flag = 0;
    if (!w->post_to)
        return xtq__mpi_win_error(w, MPI_ERR_RMA_SYNC);
    rc = post_wait_recvs(w);
    if (rc != MPI_SUCCESS)
        return xtq__mpi_win_error(w, rc);
    xtq__mpi_testall(w->npost_to, w->wait_req, flag);
    if (*flag)
        exposure_done(w);
    return MPI_SUCCESS;
}
