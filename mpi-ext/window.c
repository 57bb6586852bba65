/*
 * Windows: the decision, once per window at creation, whether it is
 * accelerated; the registration of its memory with libxtq; its record.
 *
 * Fall back whole, never half. Every rank of the window states whether it
 * can accelerate; if any cannot, the window is the MPI's alone and every
 * call on it passes through. An accelerated window sends all its
 * accumulates as XtqPuts, so accelerated and MPI accumulates never meet
 * on one window (which would break per-element atomicity).
 *
 * The layer keeps the MPI window beneath an accelerated window in one
 * passive epoch for its whole life (MPI_Win_lock_all with
 * MPI_MODE_NOCHECK) and implements every synchronisation call itself
 * (epoch.c): MPI_Put and MPI_Get still go to the MPI's own one-sided
 * layer inside that epoch, and are completed by the layer's own
 * fence/unlock/flush. Where the MPI cannot create the window at all (Open
 * MPI 4.1.6 on the GPU machines: MPI_ERR_WIN under every osc component),
 * or the memory is on a GPU, the window is a shell (a window of no memory,
 * for its handle, group, attributes and error handler) and puts and gets
 * run as tasks too.
 */
#include "xmpi.h"

#include <strings.h>

static const char *const reason_text[] = {
#define XTQ__MPI_REASON_TEXT_(id, text) text,
    XTQ__MPI_REASONS(XTQ__MPI_REASON_TEXT_)
#undef XTQ__MPI_REASON_TEXT_
};

const char *xtq__mpi_reason_text(enum xtq__mpi_reason r)
{
    return (unsigned)r < XTQ__MPI_R_COUNT ? reason_text[r] : "?";
}

int xtq__mpi_errclass(int err)
{
    switch (err) {
    case 0:
        return MPI_SUCCESS;
    case -XTQ_ERANGE:
        return MPI_ERR_RMA_RANGE;
    case -XTQ_EINVAL:
    case -XTQ_EMSGSIZE:
        return MPI_ERR_ARG;
    case -XTQ_ENOMEM:
        return MPI_ERR_NO_MEM;
    default:
        return MPI_ERR_OTHER;
    }
}

int xtq__mpi_win_error(struct xtq__mpi_win *w, int code)
{
    if (code != MPI_SUCCESS && w && w->win != MPI_WIN_NULL)
        PMPI_Win_call_errhandler(w->win, code);
    return code;
}

struct xtq__mpi_win *xtq__mpi_win_get(MPI_Win win)
{
    void *val;
    int flag = 0;

    if (xtq__mpi.win_keyval == MPI_KEYVAL_INVALID || win == MPI_WIN_NULL)
        return NULL;
    if (PMPI_Win_get_attr(win, xtq__mpi.win_keyval, &val, &flag) != MPI_SUCCESS || !flag)
        return NULL;
    return val;
}

/* ---- the decision ------------------------------------------------------------------ */

static bool info_is(MPI_Info info, const char *key, const char *value)
{
    char buf[64];
    int flag = 0;

    if (info == MPI_INFO_NULL)
        return false;
    if (PMPI_Info_get(info, key, (int)sizeof(buf) - 1, buf, &flag) != MPI_SUCCESS || !flag)
        return false;
    return strcasecmp(buf, value) == 0;
}

/* Whether every rank of `comm` is on this host (the MPI can then share
 * the memory of an MPI_Win_allocate window). Collective. */
static bool one_host(MPI_Comm comm)
{
    MPI_Comm node;
    int nsize = 0, size = 0;

    if (PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return false;
    PMPI_Comm_size(node, &nsize);
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_free(&node);
    return nsize == size;
}

/* This rank's reason not to accelerate, before talking to the others. */
static enum xtq__mpi_reason local_reason(int flavor, const void *base, MPI_Aint size, MPI_Info info,
                                         MPI_Comm comm, bool *gpu)
{
    *gpu = false;
    if (!xtq__mpi.on)
        return xtq__mpi.why_off;
    if (info_is(info, MPIX_XTQ_INFO_ACCELERATE, "false"))
        return XTQ__MPI_R_INFO_OFF;
    if (flavor == MPI_WIN_FLAVOR_DYNAMIC)
        return XTQ__MPI_R_DYNAMIC;
    if (flavor == MPI_WIN_FLAVOR_SHARED)
        return XTQ__MPI_R_SHARED;
    if (flavor == MPI_WIN_FLAVOR_CREATE && size > 0 && base && xtq__mpi_is_device_ptr(base)) {
        *gpu = true;
        if (!xtq__mpi.cuda)
            return XTQ__MPI_R_GPU_NO_AGENT;
        /* Another GPU's memory: this agent's processor cannot read it. */
        if (xtq__mpi_device_of(base) != xtq__mpi.cuda_device)
            return XTQ__MPI_R_GPU_OTHER_DEVICE;
    }
    return XTQ__MPI_R_ACCELERATED;
}

static enum xtq__mpi_reason agree(MPI_Comm comm, enum xtq__mpi_reason mine)
{
    int bad = mine != XTQ__MPI_R_ACCELERATED, any = 0;
    PMPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
    if (!any)
        return XTQ__MPI_R_ACCELERATED;
    return bad ? mine : XTQ__MPI_R_PEER;
}

static bool all_true(MPI_Comm comm, bool mine)
{
    int v = mine ? 1 : 0, all = 0;
    PMPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, comm);
    return all != 0;
}

/* ---- creating the MPI window ---------------------------------------------------------- */

struct create_args {
    int flavor;
    void *base;
    MPI_Aint size;
    int disp_unit;
    MPI_Info info;
    MPI_Comm comm;
    void *baseptr; /* MPI_Win_allocate's out argument */
};

/* The MPI's own window, with errors returned rather than raised (Open
 * MPI fails MPI_Win_create on some machines, and the layer can carry on
 * without it). */
static int mpi_window(const struct create_args *a, MPI_Win *win)
{
    MPI_Errhandler eh;
    int rc;

    PMPI_Comm_get_errhandler(a->comm, &eh);
    PMPI_Comm_set_errhandler(a->comm, MPI_ERRORS_RETURN);
    if (a->flavor == MPI_WIN_FLAVOR_ALLOCATE)
        rc = PMPI_Win_allocate(a->size, a->disp_unit, a->info, a->comm, a->baseptr, win);
    else
        rc = PMPI_Win_create(a->base, a->size, a->disp_unit, a->info, a->comm, win);
    PMPI_Comm_set_errhandler(a->comm, eh);
    PMPI_Errhandler_free(&eh);
    return rc;
}

/* A window of no memory, for its handle only. */
static int shell_window(MPI_Comm comm, MPI_Win *win)
{
    MPI_Errhandler eh;
    void *dummy;
    int rc;

    PMPI_Comm_get_errhandler(comm, &eh);
    PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    rc = PMPI_Win_create_dynamic(MPI_INFO_NULL, comm, win);
    if (rc != MPI_SUCCESS)
        rc = PMPI_Win_allocate(0, 1, MPI_INFO_NULL, comm, &dummy, win);
    PMPI_Comm_set_errhandler(comm, eh);
    PMPI_Errhandler_free(&eh);
    return rc;
}

/* ---- registration ----------------------------------------------------------------------- */

void xtq__mpi_release_index(uint32_t index)
{
    pthread_mutex_lock(&xtq__mpi.index_lock);
    xtq__mpi.index_used[index] = 0;
    pthread_mutex_unlock(&xtq__mpi.index_lock);
}

/* An index free on every rank of `comm` (index 0 is the sync task's).
 * Collective. Windows take the lowest (kernel table); collective teams
 * the highest above the layer's queues (function, kernel and queue
 * tables). The lock is not held across the allreduce (windows created by
 * several threads at once would deadlock): an index another thread took
 * meanwhile makes every rank try again. */
int xtq__mpi_choose_index(MPI_Comm comm, bool top, uint32_t *index)
{
    uint32_t n = xtq__mpi.table_size;
    uint8_t *mine = malloc(n), *all = malloc(n);
    int rc = -XTQ_ENOSPC;

    if (!mine || !all) {
        free(mine);
        free(all);
        return -XTQ_ENOMEM;
    }
    for (;;) {
        uint32_t pick = 0;
        bool got = false;
        pthread_mutex_lock(&xtq__mpi.index_lock);
        memcpy(mine, xtq__mpi.index_used, n);
        pthread_mutex_unlock(&xtq__mpi.index_lock);
        PMPI_Allreduce(mine, all, (int)n, MPI_BYTE, MPI_BOR, comm);
        if (top) {
            for (uint32_t i = n - 1; i > xtq__mpi.nq && !pick; i--)
                if (!all[i])
                    pick = i;
        } else {
            for (uint32_t i = 1; i < n && !pick; i++)
                if (!all[i])
                    pick = i;
        }
        if (!pick)
            break; /* the same answer on every rank */
        pthread_mutex_lock(&xtq__mpi.index_lock);
        if (!xtq__mpi.index_used[pick]) {
            xtq__mpi.index_used[pick] = 1;
            got = true;
        }
        pthread_mutex_unlock(&xtq__mpi.index_lock);
        if (all_true(comm, got)) {
            *index = pick;
            rc = 0;
            break;
        }
        if (got)
            xtq__mpi_release_index(pick);
    }
    free(mine);
    free(all);
    return rc;
}

/* Register this rank's memory: the window's kernel, bounded by its size. */
static int register_window(struct xtq__mpi_win *w)
{
    xtq_register_attr_t attr;
    int rc;

    if (w->gpu)
        rc = xtq__mpi_cuda_kernel(xtq__mpi.cuda, &w->kernel);
    else
        rc = xtq_kernel_create_cpu(xtq__mpi.cpu, xtq__mpi_cpu_task, XTQ__MPI_KERNARG_SIZE, &w->tgt,
                                   &w->kernel);
    if (rc)
        return rc;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS |
                      XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS;
    /* A window of no memory still needs a buffer for the rewrite; with a
     * size of 0 nothing can be reached through it. */
    attr.target_buffer = w->base ? w->base : (void *)&w->tgt;
    attr.target_size = w->base ? (size_t)w->win_size : 0;
    /* A CPU window's task is one bounded access (checked extent, stripe
     * locks held only by such tasks): short, so it may run where it
     * arrives (XTQ_REGISTER_SHORT). */
    attr.flags = XTQ_REGISTER_BOUNDED | (w->gpu ? 0u : (uint32_t)XTQ_REGISTER_SHORT);
    attr.max_work_items = w->gpu ? ((uint64_t)1 << 32) : 1;
    rc = xtq_register_kernel_attr(xtq__mpi.ctx, w->kindex, w->kernel, &attr);
    if (rc) {
        xtq_kernel_destroy(w->kernel);
        w->kernel = NULL;
        return rc;
    }
    atomic_store_explicit(&xtq__mpi.target_by_index[w->kindex], &w->tgt, memory_order_release);
    return 0;
}

static void unregister_window(struct xtq__mpi_win *w)
{
    if (!w->kernel)
        return;
    atomic_store_explicit(&xtq__mpi.target_by_index[w->kindex], NULL, memory_order_release);
    xtq_unregister_kernel(xtq__mpi.ctx, w->kindex);
    xtq_kernel_destroy(w->kernel);
    w->kernel = NULL;
}

struct peer_wire {
    uint64_t size;
    int32_t disp_unit;
    int32_t xrank;
    uint32_t gpu;
    uint32_t pad;
};

/* Everything libxtq-side of an accelerated window; undone by
 * teardown() when any rank failed. Collective. */
static int setup_accelerated(struct xtq__mpi_win *w, MPI_Comm comm)
{
    struct peer_wire mine, *all = NULL;
    int rc = 0;

    xtq__mpi_target_init(&w->tgt, w->base, (uint64_t)w->win_size);
    PMPI_Comm_dup(comm, &w->comm);
    PMPI_Comm_rank(w->comm, &w->rank);
    PMPI_Comm_size(w->comm, &w->size);
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->hold_lock, NULL);
    w->peer = calloc((size_t)w->size, sizeof(*w->peer));
    all = calloc((size_t)w->size, sizeof(*all));
    if (!w->peer || !all)
        rc = -XTQ_ENOMEM;

    if (xtq__mpi_choose_index(w->comm, false, &w->kindex) != 0) {
        w->reason = XTQ__MPI_R_NO_INDEX;
        rc = -XTQ_ENOSPC;
    }
    if (rc == 0)
        rc = xtq_counter_create(xtq__mpi.ctx, &w->counter);
    if (rc == 0) {
        rc = register_window(w);
        if (rc)
            xmpi_log(WARN, "window registration at kernel index %u failed: %s", w->kindex,
                     xtq_errname(rc));
    }
    if (!all_true(w->comm, rc == 0)) {
        if (w->reason == XTQ__MPI_R_ACCELERATED)
            w->reason = rc ? XTQ__MPI_R_REGISTER : XTQ__MPI_R_PEER;
        free(all);
        return -1;
    }

    memset(&mine, 0, sizeof(mine));
    mine.size = (uint64_t)w->win_size;
    mine.disp_unit = w->disp_unit;
    mine.xrank = xtq__mpi.xrank;
    mine.gpu = w->gpu;
    PMPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, w->comm);
    for (int r = 0; r < w->size; r++) {
        struct xtq__mpi_peer *p = &w->peer[r];
        p->xrank = all[r].xrank;
        p->size = all[r].size;
        p->disp_unit = all[r].disp_unit;
        p->gpu = all[r].gpu;
        /* One origin's commands stay in one queue of the target: the
         * barrier bit then orders them (accumulate_ordering). */
        p->queue = p->gpu ? xtq__mpi.nq : (uint32_t)xtq__mpi.xrank % xtq__mpi.nq;
    }
    free(all);
    return 0;
}

static void teardown(struct xtq__mpi_win *w)
{
    unregister_window(w);
    if (w->kindex)
        xtq__mpi_release_index(w->kindex);
    w->kindex = 0;
    if (w->counter)
        xtq_counter_destroy(w->counter);
    w->counter = NULL;
    xtq__mpi_target_fini(&w->tgt);
    for (struct xtq__mpi_pending *p = w->pending, *n; p; p = n) {
        n = p->next;
        xtq__mpi_layout_put(p->rl);
        free(p);
    }
    w->pending = NULL;
    if (w->ncomplete_req)
        xtq__mpi_waitall(w->ncomplete_req, w->complete_req);
    free(w->complete_req);
    free(w->post_to);
    free(w->post_req);
    free(w->wait_req);
    free(w->start_to);
    free(w->peer);
    w->peer = NULL;
    if (w->comm != MPI_COMM_NULL)
        PMPI_Comm_free(&w->comm);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->hold_lock);
}

static void record(struct xtq__mpi_win *w, MPI_Win win)
{
    w->win = win;
    atomic_fetch_add_explicit(&xtq__mpi.win_by_reason[w->reason], 1, memory_order_relaxed);
    if (xtq__mpi.win_keyval != MPI_KEYVAL_INVALID)
        PMPI_Win_set_attr(win, xtq__mpi.win_keyval, w);
}

/* MPI_Win_create and MPI_Win_allocate. */
static int win_create(struct create_args *a, MPI_Win *win)
{
    struct xtq__mpi_win *w;
    enum xtq__mpi_reason mine;
    bool gpu, want_mpi_rma, real_ok;
    int rc;

    if (!xtq__mpi.on && xtq__mpi.win_keyval == MPI_KEYVAL_INVALID) {
        /* XTQ_MPI=off: a plain pass-through. */
        if (a->flavor == MPI_WIN_FLAVOR_ALLOCATE)
            return PMPI_Win_allocate(a->size, a->disp_unit, a->info, a->comm, a->baseptr, win);
        return PMPI_Win_create(a->base, a->size, a->disp_unit, a->info, a->comm, win);
    }

    w = calloc(1, sizeof(*w));
    if (!w)
        return MPI_ERR_NO_MEM;
    w->flavor = a->flavor;
    w->comm = MPI_COMM_NULL;
    mine = local_reason(a->flavor, a->base, a->size, a->info, a->comm, &gpu);
    if (xtq__mpi.on) {
        /* Collective from here: every rank of `comm` runs the same steps. */
        if (mine == XTQ__MPI_R_ACCELERATED && a->flavor == MPI_WIN_FLAVOR_ALLOCATE &&
            !xtq__mpi.shm_windows_xtq && !info_is(a->info, MPIX_XTQ_INFO_ACCELERATE, "true") &&
            one_host(a->comm))
            mine = XTQ__MPI_R_ALLOCATE_SHM;
        mine = agree(a->comm, mine);
    }
    w->reason = mine;
    if (mine != XTQ__MPI_R_ACCELERATED) {
        rc = mpi_window(a, win);
        if (rc != MPI_SUCCESS) {
            free(w);
            PMPI_Comm_call_errhandler(a->comm, rc);
            return rc;
        }
        record(w, *win);
        return MPI_SUCCESS;
    }

    /* Accelerated: the MPI's window for put/get where it can, else a
     * shell. GPU memory anywhere: the MPI's put/get cannot reach it. */
    w->gpu = gpu;
    {
        bool pg_xtq = info_is(a->info, MPIX_XTQ_INFO_PUT_GET, "xtq") ||
                      (xtq__mpi.put_get_xtq && !info_is(a->info, MPIX_XTQ_INFO_PUT_GET, "mpi"));
        want_mpi_rma = all_true(a->comm, !pg_xtq && !gpu);
    }
    rc = want_mpi_rma ? mpi_window(a, win) : MPI_ERR_WIN;
    if (want_mpi_rma && rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        PMPI_Error_string(rc, msg, &len);
        xmpi_warn_once("the MPI could not create a window (%s); its puts and gets go over XTQ",
                       msg);
    }
    real_ok = all_true(a->comm, rc == MPI_SUCCESS);
    if (!real_ok && rc == MPI_SUCCESS)
        PMPI_Win_free(win); /* another rank failed: all use shells */
    w->shell = !real_ok;
    w->put_get_xtq = !real_ok;
    if (want_mpi_rma && !real_ok)
        xtq__mpi_count(XTQ__MPI_S_WIN_SHELL, 1);
    if (w->shell) {
        if (a->flavor == MPI_WIN_FLAVOR_ALLOCATE) {
            void *mem = NULL;
            if (a->size > 0 && posix_memalign(&mem, 64, (size_t)a->size) != 0)
                mem = NULL;
            w->own_mem = mem;
            a->base = mem;
            *(void **)a->baseptr = mem;
        }
        rc = shell_window(a->comm, win);
        if (!all_true(a->comm, rc == MPI_SUCCESS && (a->size == 0 || a->base))) {
            if (rc == MPI_SUCCESS)
                PMPI_Win_free(win);
            free(w->own_mem);
            free(w);
            PMPI_Comm_call_errhandler(a->comm, MPI_ERR_WIN);
            return MPI_ERR_WIN;
        }
    } else if (a->flavor == MPI_WIN_FLAVOR_ALLOCATE) {
        a->base = *(void **)a->baseptr;
    }
    w->win = *win;
    w->base = a->base;
    w->win_size = a->size;
    w->disp_unit = a->disp_unit;
    w->ordered = !info_is(a->info, "accumulate_ordering", "none");

    if (setup_accelerated(w, a->comm) != 0) {
        /* Registration failed somewhere: the window is the MPI's, unless
         * the MPI has none for it. */
        teardown(w);
        w->accelerated = false;
        if (w->shell) {
            PMPI_Win_free(win);
            free(w->own_mem);
            free(w);
            PMPI_Comm_call_errhandler(a->comm, MPI_ERR_WIN);
            return MPI_ERR_WIN;
        }
        record(w, *win);
        return MPI_SUCCESS;
    }
    w->accelerated = true;
    if (!w->shell)
        PMPI_Win_lock_all(MPI_MODE_NOCHECK, *win);
    record(w, *win);
    xmpi_log(INFO, "window %u: accelerated (%s memory, put/get via %s, %s)", w->kindex,
             w->gpu ? "GPU" : "host", w->put_get_xtq ? "XTQ" : "the MPI",
             w->ordered ? "ordered" : "unordered");
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info,
                               MPI_Comm comm, MPI_Win *win)
{
    struct create_args a = {MPI_WIN_FLAVOR_CREATE, base, size, disp_unit, info, comm, NULL};
    return win_create(&a, win);
}

XMPI_EXPORT int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                                 void *baseptr, MPI_Win *win)
{
    struct create_args a = {MPI_WIN_FLAVOR_ALLOCATE, NULL, size, disp_unit, info, comm, baseptr};
    return win_create(&a, win);
}

/* Dynamic and shared windows stay the MPI's; recorded for the counts. */
static int record_plain(int rc, enum xtq__mpi_reason reason, MPI_Win *win)
{
    struct xtq__mpi_win *w;

    if (rc != MPI_SUCCESS || xtq__mpi.win_keyval == MPI_KEYVAL_INVALID)
        return rc;
    w = calloc(1, sizeof(*w));
    if (!w)
        return rc;
    w->comm = MPI_COMM_NULL;
    w->reason = xtq__mpi.on ? reason : xtq__mpi.why_off;
    record(w, *win);
    return rc;
}

XMPI_EXPORT int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win *win)
{
    return record_plain(PMPI_Win_create_dynamic(info, comm, win), XTQ__MPI_R_DYNAMIC, win);
}

XMPI_EXPORT int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                                        void *baseptr, MPI_Win *win)
{
    return record_plain(PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win),
                        XTQ__MPI_R_SHARED, win);
}

XMPI_EXPORT int MPI_Win_free(MPI_Win *win)
{
    struct xtq__mpi_win *w = win ? xtq__mpi_win_get(*win) : NULL;
    int rc = MPI_SUCCESS;

    if (w && w->accelerated) {
        /* Everything this process issued completes; then nobody's
         * commands to this window are still in flight (the barrier), and
         * its registration can go. */
        rc = xtq__mpi_complete(w, -1);
        PMPI_Barrier(w->comm);
        teardown(w);
        if (!w->shell)
            PMPI_Win_unlock_all(*win);
        w->accelerated = false;
    }
    if (w)
        PMPI_Win_delete_attr(*win, xtq__mpi.win_keyval); /* frees w */
    {
        int frc = PMPI_Win_free(win);
        return rc != MPI_SUCCESS ? rc : frc;
    }
}

static int win_attr_delete(MPI_Win win, int keyval, void *val, void *extra)
{
    struct xtq__mpi_win *w = val;
    if (w) {
        free(w->own_mem);
        free(w);
    }
    return MPI_SUCCESS;
}

int xtq__mpi_window_init(void)
{
    return PMPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_attr_delete, &xtq__mpi.win_keyval,
                                  NULL);
}

/* A shell holds none of the window's memory: its predefined attributes
 * are the layer's. */
XMPI_EXPORT int MPI_Win_get_attr(MPI_Win win, int keyval, void *value, int *flag)
{
    static int unified = MPI_WIN_UNIFIED;
    struct xtq__mpi_win *w;

    if (keyval == MPI_WIN_BASE || keyval == MPI_WIN_SIZE || keyval == MPI_WIN_DISP_UNIT ||
        keyval == MPI_WIN_CREATE_FLAVOR || keyval == MPI_WIN_MODEL) {
        w = xtq__mpi_win_get(win);
        if (w && w->accelerated && w->shell) {
            *flag = 1;
            if (keyval == MPI_WIN_BASE)
                *(void **)value = w->base;
            else if (keyval == MPI_WIN_SIZE)
                *(MPI_Aint **)value = &w->win_size;
            else if (keyval == MPI_WIN_DISP_UNIT)
                *(int **)value = &w->disp_unit;
            else if (keyval == MPI_WIN_CREATE_FLAVOR)
                *(int **)value = &w->flavor;
            else
                *(int **)value = &unified;
            return MPI_SUCCESS;
        }
    }
    return PMPI_Win_get_attr(win, keyval, value, flag);
}

/* ---- MPIX_ extensions -------------------------------------------------------------------- */

static void copy_reason(char *dst, int len, const char *text)
{
    if (dst && len > 0) {
        strncpy(dst, text, (size_t)len - 1);
        dst[len - 1] = '\0';
    }
}

XMPI_EXPORT int MPIX_Xtq_win_accelerated(MPI_Win win, int *flag, char *reason, int reason_len)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);

    *flag = 0;
    if (!w) {
        copy_reason(reason, reason_len,
                    xtq__mpi.on ? "unknown window" : xtq__mpi_reason_text(xtq__mpi.why_off));
        return xtq__mpi.on ? MPI_ERR_WIN : MPI_SUCCESS;
    }
    *flag = w->accelerated;
    copy_reason(reason, reason_len, xtq__mpi_reason_text(w->reason));
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPIX_Xtq_win_counts(MPI_Win win, MPIX_Xtq_counts *c)
{
    struct xtq__mpi_win *w = xtq__mpi_win_get(win);

    memset(c, 0, sizeof(*c));
    if (!w)
        return MPI_ERR_WIN;
    c->accumulates = atomic_load(&w->count[XTQ__MPI_S_ACC]);
    c->fetching = atomic_load(&w->count[XTQ__MPI_S_FETCH]);
    c->puts_xtq = atomic_load(&w->count[XTQ__MPI_S_PUT_XTQ]);
    c->gets_xtq = atomic_load(&w->count[XTQ__MPI_S_GET_XTQ]);
    c->puts_mpi = atomic_load(&w->count[XTQ__MPI_S_RMA_MPI]);
    c->xtq_puts = atomic_load(&w->count[XTQ__MPI_S_XTQ_PUTS]);
    c->bytes = atomic_load(&w->count[XTQ__MPI_S_BYTES]);
    c->errors = atomic_load(&w->count[XTQ__MPI_S_ERRORS]);
    c->passthrough = atomic_load(&w->passthrough);
    c->lock_puts = atomic_load(&w->count[XTQ__MPI_S_LOCK_PUTS]);
    c->lock_refused = atomic_load(&w->count[XTQ__MPI_S_REFUSED]);
    if (w->accelerated) {
        pthread_mutex_lock(&w->tgt.sync);
        c->refused_here = w->tgt.refused;
        pthread_mutex_unlock(&w->tgt.sync);
    }
    return MPI_SUCCESS;
}

XMPI_EXPORT int MPIX_Xtq_enabled(int *flag, char *reason, int reason_len)
{
    *flag = xtq__mpi.on;
    copy_reason(reason, reason_len,
                xtq__mpi.on ? "accelerated"
                            : (xtq__mpi.why_detail[0] ? xtq__mpi.why_detail
                                                      : xtq__mpi_reason_text(xtq__mpi.why_off)));
    return MPI_SUCCESS;
}
