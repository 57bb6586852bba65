/*
 * What a context bootstrapped out of band must do, shared by the OOB
 * integration tests (forked ranks: test_oob.c; MPI ranks: test_oob_mpi.c):
 *  1. every rank puts OOB_PUTS tasks to every rank (itself included) with
 *     remote completion; after a barrier each rank has run OOB_PUTS from
 *     every source;
 *  2. rank 0 enters xtq_barrier() at once while the others put to it and
 *     wait for remote completion before they join: with manual progress
 *     this finishes only if the barrier keeps rank 0's engine turning;
 *  3. unregister, destroy, finalize.
 * Public API only; failures exit through the harness's CHECKs.
 */
#ifndef XTQ_OOB_WORKLOAD_H
#define XTQ_OOB_WORKLOAD_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <xtq/xtq.h>

#include "xtq_test.h"

#define OOB_PUTS      40
#define OOB_MAX_RANKS 64
#define OOB_QUEUE     1
#define OOB_FUNCTION  2

/* The target buffer: tasks run, per source rank. */
static _Atomic uint64_t oob_ran[OOB_MAX_RANKS];

static void oob_count_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    _Atomic uint64_t *ran = (_Atomic uint64_t *)(uintptr_t)arg[0];
    (void)ret;
    (void)user_data;
    if (arg[2] < OOB_MAX_RANKS)
        atomic_fetch_add(&ran[arg[2]], 1);
}

static void oob_put_and_wait(xtq_ctx_t *ctx, int target, int count)
{
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t c[OOB_PUTS];

    CHECK(count <= OOB_PUTS);
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), OOB_FUNCTION, OOB_QUEUE, (uint64_t)xtq_rank(ctx), 0,
                              &cmd_len));
    for (int i = 0; i < count; i++)
        CHECK_OK(xtq_put(ctx, target, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c[i]));
    for (int i = 0; i < count; i++) {
        CHECK_OK(xtq_completion_wait(ctx, &c[i], 60ll * 1000000000));
        CHECK_EQ(xtq_completion_state(&c[i]),
                 XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
    }
}

static void oob_workload(xtq_ctx_t *ctx)
{
    int rank = xtq_rank(ctx), size = xtq_size(ctx);
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;

    CHECK(size <= OOB_MAX_RANKS);
    for (int r = 0; r < OOB_MAX_RANKS; r++)
        atomic_store(&oob_ran[r], 0);
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 64, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, oob_count_fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, OOB_QUEUE, q));
    CHECK_OK(xtq_register_function(ctx, OOB_FUNCTION, f, (void *)oob_ran));
    CHECK_OK(xtq_barrier(ctx));

    /* 1: all to all. */
    for (int t = 0; t < size; t++)
        oob_put_and_wait(ctx, (rank + t) % size, OOB_PUTS);
    CHECK_OK(xtq_barrier(ctx));
    for (int s = 0; s < size; s++)
        if (atomic_load(&oob_ran[s]) != OOB_PUTS)
            XTQ_FAIL("rank %d ran %llu tasks from rank %d, expected %d", rank,
                     (unsigned long long)atomic_load(&oob_ran[s]), s, OOB_PUTS);

    /* Nobody starts step 2 before every rank has counted step 1. */
    CHECK_OK(xtq_barrier(ctx));

    /* 2: rank 0 waits in the barrier while the others still need it. */
    if (rank != 0)
        oob_put_and_wait(ctx, 0, OOB_PUTS);
    CHECK_OK(xtq_barrier(ctx));
    if (rank == 0)
        for (int s = 1; s < size; s++)
            CHECK_EQ(atomic_load(&oob_ran[s]), 2 * OOB_PUTS);

    CHECK_OK(xtq_unregister_function(ctx, OOB_FUNCTION));
    CHECK_OK(xtq_unregister_queue(ctx, OOB_QUEUE));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_queue_destroy(q));
    printf("rank %d of %d (%s): OOB workload done\n", rank, size, xtq_provider_name(ctx));
    fflush(stdout);
}

#endif /* XTQ_OOB_WORKLOAD_H */
