/*
 * Out-of-band bootstrap over MPI, as mpi-ext bootstraps: MPI_Iallgather
 * starts the allgather, MPI_Test polls it. Under mpirun, MPI_COMM_WORLD is
 * split into two halves with their ranks reversed, and each half makes its
 * own context over its communicator: xtq ranks follow the communicator, not
 * the launcher (PMIx would give world ranks), and two contexts started by
 * one launcher (two jobs, each with rank 0's random key) run side by side.
 * Each runs the OOB workload (oob_workload.h). Argument "manual": manual
 * progress, so the barriers must keep the engine turning.
 */
#include <mpi.h>
#include <stdbool.h>
#include <string.h>

#include <xtq/xtq.h>

#include "oob_workload.h"
#include "xtq_test.h"

static int mpi_allgather(const void *sbuf, void *rbuf, size_t len, void *coll_info, void **req)
{
    MPI_Comm comm = *(MPI_Comm *)coll_info;
    MPI_Request *r = malloc(sizeof(*r));
    if (!r)
        return -XTQ_ENOMEM;
    if (len > INT32_MAX || MPI_Iallgather(sbuf, (int)len, MPI_BYTE, rbuf, (int)len, MPI_BYTE, comm,
                                          r) != MPI_SUCCESS) {
        free(r);
        return -XTQ_EIO;
    }
    *req = r;
    return 0;
}

static int mpi_req_test(void *req)
{
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return -XTQ_EIO;
    return done ? 0 : -XTQ_EAGAIN;
}

static int mpi_req_free(void *req)
{
    MPI_Request *r = req;
    /* A completed request is MPI_REQUEST_NULL already; one that failed is
     * still live and must be released. */
    if (*r != MPI_REQUEST_NULL)
        MPI_Request_free(r);
    free(r);
    return 0;
}

XTQ_TEST(split)
{
    bool manual = xtq_test_argc > 0 && strcmp(xtq_test_argv[0], "manual") == 0;
    int wrank, wsize, rank, size;
    MPI_Comm comm;
    xtq_init_attr_t attr;
    xtq_ctx_t *ctx = NULL;

    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    /* Halves (a single group below 4 ranks), ranks reversed in each. */
    int color = wsize >= 4 ? wrank % 2 : 0;
    MPI_Comm_split(MPI_COMM_WORLD, color, wsize - wrank, &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_INIT_ATTR_FIELD_OOB | XTQ_INIT_ATTR_FIELD_PROGRESS;
    attr.progress = manual ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_THREAD;
    attr.oob.allgather = mpi_allgather;
    attr.oob.req_test = mpi_req_test;
    attr.oob.req_free = mpi_req_free;
    attr.oob.coll_info = &comm;
    attr.oob.rank = rank;
    attr.oob.size = size;
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_EQ(xtq_rank(ctx), rank);
    CHECK_EQ(xtq_size(ctx), size);
    printf("world rank %d of %d: group %d, xtq rank %d of %d\n", wrank, wsize, color, rank, size);
    oob_workload(ctx);
    CHECK_OK(xtq_finalize(ctx));
    MPI_Comm_free(&comm);
    MPI_Finalize();
}
