/*
 * The layer's life: MPI_Init / MPI_Init_thread bring libxtq up over the
 * MPI itself (an out-of-band allgather on a duplicate of
 * MPI_COMM_WORLD: any MPI, any launcher, no PMIx needed), MPI_Finalize
 * takes it down and, with XTQ_MPI_STATS=1, prints on rank 0 what was
 * accelerated and what fell back, by reason, summed over the ranks.
 *
 * XTQ_MPI=off: nothing is set up and every call passes through.
 * XTQ ranks are ranks in MPI_COMM_WORLD; a window's communicator maps to
 * them through its group (window.c).
 */
#include "xmpi.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <strings.h>

struct xtq__mpi_global xtq__mpi = {
    .win_keyval = MPI_KEYVAL_INVALID,
    .type_keyval = MPI_KEYVAL_INVALID,
    .why_off = XTQ__MPI_R_OFF,
    .world = MPI_COMM_NULL,
};

/* ---- parameters and logging ------------------------------------------------------- */

const char *xtq__mpi_param(const char *name)
{
    xtq_param_info_t info;

    for (unsigned i = 0; i < xtq_param_count(); i++)
        if (xtq_param_get_info(i, &info) == 0 && strcmp(info.name, name) == 0)
            return info.value ? info.value : info.default_value;
    return "";
}

static bool param_bool(const char *name)
{
    const char *s = xtq__mpi_param(name);
    return strcasecmp(s, "1") == 0 || strcasecmp(s, "yes") == 0 || strcasecmp(s, "true") == 0 ||
           strcasecmp(s, "on") == 0;
}

int xtq__mpi_log_level = XMPI_LOG_WARN;

static void log_init(void)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    const char *lvl = xtq__mpi_param("XTQ_LOG_LEVEL"), *sub = xtq__mpi_param("XTQ_LOG_SUBSYS");

    xtq__mpi_log_level = XMPI_LOG_WARN;
    for (int i = 0; i < 4; i++)
        if (strcasecmp(lvl, levels[i]) == 0)
            xtq__mpi_log_level = i;
    if (strcasecmp(lvl, "trace") == 0)
        xtq__mpi_log_level = XMPI_LOG_DEBUG;
    if (strcasecmp(sub, "all") != 0 && !strstr(sub, "mpi"))
        xtq__mpi_log_level = XMPI_LOG_ERROR;
}

void xtq__mpi_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[xtq-mpi %d] %s: %s\n", xtq__mpi.xrank, names[level], msg);
}

/* ---- out-of-band collectives over MPI -------------------------------------------- */

static int oob_allgather(const void *sbuf, void *rbuf, size_t len, void *coll_info, void **req)
{
    MPI_Request *r;

    if (len > INT_MAX)
        return -XTQ_EINVAL;
    r = malloc(sizeof(*r));
    if (!r)
        return -XTQ_ENOMEM;
    if (PMPI_Iallgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE, *(MPI_Comm *)coll_info,
                        r) != MPI_SUCCESS) {
        free(r);
        return -XTQ_EBOOTSTRAP;
    }
    *req = r;
    return 0;
}

static int oob_test(void *req)
{
    int flag = 0;
    if (PMPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return -XTQ_EBOOTSTRAP;
    return flag ? 0 : -XTQ_EAGAIN;
}

static int oob_free(void *req)
{
    free(req);
    return 0;
}

/* ---- libxtq up and down ---------------------------------------------------------------- */

static void off(enum xtq__mpi_reason why, const char *detail)
{
    xtq__mpi.on = false;
    xtq__mpi.why_off = why;
    snprintf(xtq__mpi.why_detail, sizeof(xtq__mpi.why_detail), "%s", detail ? detail : "");
}

static void xtq_down(void)
{
    if (!xtq__mpi.ctx)
        return;
    if (xtq__mpi.sync_kernel) {
        xtq_unregister_kernel(xtq__mpi.ctx, 0);
        xtq_kernel_destroy(xtq__mpi.sync_kernel);
        xtq__mpi.sync_kernel = NULL;
    }
    for (uint32_t i = 0; i < xtq__mpi.nq; i++)
        if (xtq__mpi.queue[i]) {
            xtq_unregister_queue(xtq__mpi.ctx, i);
            xtq_queue_destroy(xtq__mpi.queue[i]);
            xtq__mpi.queue[i] = NULL;
        }
    if (xtq__mpi.cuda_queue) {
        xtq_unregister_queue(xtq__mpi.ctx, xtq__mpi.nq);
        xtq_queue_destroy(xtq__mpi.cuda_queue);
        xtq__mpi.cuda_queue = NULL;
    }
    if (xtq__mpi.cuda)
        xtq__mpi_cuda_detach(xtq__mpi.cuda);
    xtq_finalize(xtq__mpi.ctx);
    xtq__mpi.ctx = NULL;
    free(xtq__mpi.target_by_index);
    free(xtq__mpi.index_used);
    xtq__mpi.target_by_index = NULL;
    xtq__mpi.index_used = NULL;
}

/* Queues, the sync task and the tables; 0 or -XTQ_E*. */
static int xtq_setup(void)
{
    int rc;

    rc = xtq_agent_find(xtq__mpi.ctx, XTQ_AGENT_CPU, &xtq__mpi.cpu);
    if (rc)
        return rc;
    xtq__mpi.cuda = NULL;
    {
        /* One GPU per rank on a host of several: the local rank's, as the
         * MPI sees it (any launcher), unless XTQ_MPI_CUDA_DEVICE names
         * one. GPU windows on another device are left to the MPI. */
        unsigned ncuda = 0;
        for (unsigned i = 0; i < xtq_agent_count(xtq__mpi.ctx); i++) {
            xtq_agent_t *a;
            xtq_agent_info_t info;
            if (xtq_agent_get(xtq__mpi.ctx, i, &a) == 0 && xtq_agent_get_info(a, &info) == 0 &&
                info.kind == XTQ_AGENT_CUDA)
                ncuda++;
        }
        if (ncuda > 0) {
            const char *want = xtq__mpi_param("XTQ_MPI_CUDA_DEVICE");
            MPI_Comm node;
            int lrank = 0;
            PMPI_Comm_split_type(xtq__mpi.world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
            PMPI_Comm_rank(node, &lrank);
            PMPI_Comm_free(&node);
            uint32_t dev = want && *want ? (uint32_t)strtoul(want, NULL, 10) : (uint32_t)lrank % ncuda;
            if (xtq_agent_find_device(xtq__mpi.ctx, XTQ_AGENT_CUDA, dev, &xtq__mpi.cuda) != 0) {
                xmpi_log(WARN, "no CUDA agent for device %u: GPU windows are left to the MPI", dev);
                xtq__mpi.cuda = NULL;
            }
            xtq__mpi.cuda_device = (int)dev;
        }
    }
    if (xtq__mpi.cuda && xtq__mpi_cuda_attach(xtq__mpi.cuda) != 0) {
        xmpi_log(WARN, "CUDA agent present but the layer's task module did not attach: "
                       "GPU windows are left to the MPI");
        xtq__mpi.cuda = NULL;
    }
    xtq__mpi.table_size = xtq_table_size(xtq__mpi.ctx);
    xtq__mpi.nq = (uint32_t)xtq__mpi.xsize < XTQ__MPI_MAX_QUEUES ? (uint32_t)xtq__mpi.xsize
                                                                 : XTQ__MPI_MAX_QUEUES;
    if (xtq__mpi.table_size < xtq__mpi.nq + 2)
        return -XTQ_ERANGE;
    xtq__mpi.target_by_index = calloc(xtq__mpi.table_size, sizeof(*xtq__mpi.target_by_index));
    xtq__mpi.index_used = calloc(xtq__mpi.table_size, 1);
    if (!xtq__mpi.target_by_index || !xtq__mpi.index_used)
        return -XTQ_ENOMEM;
    for (uint32_t i = 0; i < xtq__mpi.nq; i++) {
        rc = xtq_queue_create(xtq__mpi.cpu, 1024, &xtq__mpi.queue[i]);
        if (rc == 0)
            rc = xtq_register_queue(xtq__mpi.ctx, i, xtq__mpi.queue[i]);
        if (rc)
            return rc;
    }
    if (xtq__mpi.cuda) {
        rc = xtq_queue_create(xtq__mpi.cuda, 1024, &xtq__mpi.cuda_queue);
        if (rc == 0)
            rc = xtq_register_queue(xtq__mpi.ctx, xtq__mpi.nq, xtq__mpi.cuda_queue);
        if (rc) {
            xmpi_log(WARN, "CUDA queue: %s; GPU windows are left to the MPI", xtq_errname(rc));
            xtq__mpi.cuda = NULL;
        }
    }
    rc = xtq_kernel_create_cpu(xtq__mpi.cpu, xtq__mpi_sync_task, XTQ__MPI_KERNARG_SIZE, NULL,
                               &xtq__mpi.sync_kernel);
    if (rc == 0)
        rc = xtq_register_kernel(xtq__mpi.ctx, 0, xtq__mpi.sync_kernel, NULL, NULL);
    xtq__mpi.index_used[0] = 1;
    xtq__mpi.max_put = xtq_put_max_size(xtq__mpi.ctx);
    return rc;
}

static bool everyone(bool mine)
{
    int v = mine, all = 0;
    PMPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, xtq__mpi.world);
    return all != 0;
}

static void layer_init(int provided)
{
    const char *mode = xtq__mpi_param("XTQ_MPI");
    xtq_init_attr_t attr;
    int rc;

    xtq__mpi.thread_level = provided;
    log_init();
    if (strcasecmp(mode, "off") == 0 || strcasecmp(mode, "0") == 0 ||
        strcasecmp(mode, "false") == 0 || strcasecmp(mode, "no") == 0) {
        off(XTQ__MPI_R_OFF, NULL);
        xtq__mpi.stats = param_bool("XTQ_MPI_STATS");
        PMPI_Comm_rank(MPI_COMM_WORLD, &xtq__mpi.xrank);
        return; /* a plain pass-through: nothing else is set up */
    }
    xtq__mpi.stats = param_bool("XTQ_MPI_STATS");
    xtq__mpi.put_get_xtq = strcasecmp(xtq__mpi_param("XTQ_MPI_PUT_GET"), "xtq") == 0;
    xtq__mpi.shm_windows_xtq = strcasecmp(xtq__mpi_param("XTQ_MPI_SHM_WINDOWS"), "xtq") == 0;
    pthread_mutex_init(&xtq__mpi.index_lock, NULL);

    PMPI_Comm_dup(MPI_COMM_WORLD, &xtq__mpi.world);
    PMPI_Comm_group(MPI_COMM_WORLD, &xtq__mpi.world_group);
    PMPI_Comm_rank(xtq__mpi.world, &xtq__mpi.xrank);
    PMPI_Comm_size(xtq__mpi.world, &xtq__mpi.xsize);
    if (xtq__mpi_window_init() != MPI_SUCCESS || xtq__mpi_datatype_init() != MPI_SUCCESS) {
        off(XTQ__MPI_R_INIT_FAILED, "MPI keyvals");
        return;
    }

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_INIT_ATTR_FIELD_OOB;
    attr.oob.allgather = oob_allgather;
    attr.oob.req_test = oob_test;
    attr.oob.req_free = oob_free;
    attr.oob.coll_info = &xtq__mpi.world;
    attr.oob.rank = xtq__mpi.xrank;
    attr.oob.size = xtq__mpi.xsize;
    rc = xtq_init(&attr, &xtq__mpi.ctx);
    if (rc) {
        xmpi_log(WARN, "xtq_init: %s", xtq_errname(rc));
        xtq__mpi.ctx = NULL;
    } else if (xtq_rank(xtq__mpi.ctx) != xtq__mpi.xrank ||
               xtq_size(xtq__mpi.ctx) != xtq__mpi.xsize) {
        xmpi_log(WARN, "libxtq rank %d of %d, MPI rank %d of %d", xtq_rank(xtq__mpi.ctx),
                 xtq_size(xtq__mpi.ctx), xtq__mpi.xrank, xtq__mpi.xsize);
        rc = -XTQ_EBOOTSTRAP;
    }
    if (rc == 0) {
        rc = xtq_setup();
        if (rc)
            xmpi_log(WARN, "setting up queues and tasks: %s", xtq_errname(rc));
    }
    if (!everyone(rc == 0)) {
        xtq_down();
        off(XTQ__MPI_R_INIT_FAILED, rc ? xtq_errname(rc) : "on another rank");
        return;
    }
    /* libxtq is up: windows can be accelerated and reductions routed. */
    if (xtq__mpi_coll_init() != MPI_SUCCESS)
        xmpi_log(WARN, "MPI keyval for collectives: every collective passes through");
    xtq__mpi.on = true;
    if (xtq__mpi.xrank == 0)
        xmpi_log(INFO, "on: %d ranks, provider %s, %s agent, largest put %zu B", xtq__mpi.xsize,
                 xtq_provider_name(xtq__mpi.ctx), xtq__mpi.cuda ? "CUDA and CPU" : "CPU",
                 xtq__mpi.max_put);
}

XMPI_EXPORT int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv), provided = MPI_THREAD_SINGLE;
    if (rc == MPI_SUCCESS) {
        PMPI_Query_thread(&provided);
        layer_init(provided);
    }
    return rc;
}

XMPI_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    /* The level asked for is the program's: the layer needs none higher
     * (libxtq's threads never call MPI). */
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        layer_init(*provided);
    return rc;
}

/* ---- XTQ_MPI_STATS ---------------------------------------------------------------------- */

static void print_stats(void)
{
    uint64_t mine[XTQ__MPI_S_COUNT + 2 * XTQ__MPI_R_COUNT], sum[XMPI_ARRAY_SIZE(mine)];
    const uint64_t *st = sum, *wins = sum + XTQ__MPI_S_COUNT,
                   *calls = sum + XTQ__MPI_S_COUNT + XTQ__MPI_R_COUNT;
    uint64_t nwin = 0;

    for (int i = 0; i < XTQ__MPI_S_COUNT; i++)
        mine[i] = atomic_load(&xtq__mpi.stat[i]);
    for (int i = 0; i < XTQ__MPI_R_COUNT; i++) {
        mine[XTQ__MPI_S_COUNT + i] = atomic_load(&xtq__mpi.win_by_reason[i]);
        mine[XTQ__MPI_S_COUNT + XTQ__MPI_R_COUNT + i] = atomic_load(&xtq__mpi.calls_by_reason[i]);
    }
    PMPI_Reduce(mine, sum, (int)XMPI_ARRAY_SIZE(mine), MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (xtq__mpi.xrank != 0)
        return;
    if (!xtq__mpi.on)
        fprintf(stderr, "xtq-mpi: layer off: %s%s%s\n", xtq__mpi_reason_text(xtq__mpi.why_off),
                xtq__mpi.why_detail[0] ? ": " : "", xtq__mpi.why_detail);
    else
        fprintf(stderr, "xtq-mpi: layer on: %d ranks, provider %s\n", xtq__mpi.xsize,
                xtq_provider_name(xtq__mpi.ctx));
    if (xtq__mpi.why_off == XTQ__MPI_R_OFF && !xtq__mpi.on) {
        fprintf(stderr, "xtq-mpi: every call passed through to the MPI\n");
        return;
    }
    for (int i = 0; i < XTQ__MPI_R_COUNT; i++)
        nwin += wins[i];
    fprintf(stderr, "xtq-mpi: windows (summed over ranks): %" PRIu64 ", accelerated %" PRIu64 "\n",
            nwin, wins[XTQ__MPI_R_ACCELERATED]);
    for (int i = 1; i < XTQ__MPI_R_COUNT; i++)
        if (wins[i])
            fprintf(stderr, "xtq-mpi:   not accelerated (%s): %" PRIu64 "\n",
                    xtq__mpi_reason_text(i), wins[i]);
    if (st[XTQ__MPI_S_WIN_SHELL])
        fprintf(stderr,
                "xtq-mpi:   the MPI could not create the window, put/get over XTQ: %" PRIu64 "\n",
                st[XTQ__MPI_S_WIN_SHELL]);
    fprintf(
        stderr,
        "xtq-mpi: calls accelerated: accumulate %" PRIu64 ", fetching %" PRIu64 ", put %" PRIu64
        ", get %" PRIu64 " (XtqPuts %" PRIu64 ", operand bytes %" PRIu64 ", failed %" PRIu64 ")\n",
        st[XTQ__MPI_S_ACC], st[XTQ__MPI_S_FETCH], st[XTQ__MPI_S_PUT_XTQ], st[XTQ__MPI_S_GET_XTQ],
        st[XTQ__MPI_S_XTQ_PUTS], st[XTQ__MPI_S_BYTES], st[XTQ__MPI_S_ERRORS]);
    fprintf(stderr,
            "xtq-mpi: lock epochs: lock/unlock commands on their own %" PRIu64
            ", first operations refused (lock busy) %" PRIu64 "\n",
            st[XTQ__MPI_S_LOCK_PUTS], st[XTQ__MPI_S_REFUSED]);
    fprintf(stderr, "xtq-mpi: put/get on accelerated windows left to the MPI: %" PRIu64 "\n",
            st[XTQ__MPI_S_RMA_MPI]);
    for (int i = 1; i < XTQ__MPI_R_COUNT; i++)
        if (calls[i])
            fprintf(stderr, "xtq-mpi: calls passed through (%s): %" PRIu64 "\n",
                    xtq__mpi_reason_text(i), calls[i]);
}

XMPI_EXPORT int MPI_Finalize(void)
{
    if (xtq__mpi.stats) {
        print_stats();
        xtq__mpi_coll_stats();
    }
    if (xtq__mpi.world != MPI_COMM_NULL) {
        /* Teams go first: destroying one is collective over libxtq. */
        xtq__mpi_coll_fini();
        /* Every process is done with its epochs (MPI's rule before
         * MPI_Finalize): nothing is in flight to anyone's queues. */
        PMPI_Barrier(xtq__mpi.world);
        xtq_down();
        xtq__mpi.on = false;
        if (xtq__mpi.win_keyval != MPI_KEYVAL_INVALID)
            PMPI_Win_free_keyval(&xtq__mpi.win_keyval);
        if (xtq__mpi.type_keyval != MPI_KEYVAL_INVALID)
            PMPI_Type_free_keyval(&xtq__mpi.type_keyval);
        xtq__mpi.win_keyval = MPI_KEYVAL_INVALID;
        xtq__mpi.type_keyval = MPI_KEYVAL_INVALID;
        xtq__mpi_datatype_fini();
        PMPI_Comm_free(&xtq__mpi.world);
        PMPI_Group_free(&xtq__mpi.world_group);
    }
    return PMPI_Finalize();
}
