/*
 * The host half of the CUDA processor's idle exit (hsa-glue/cuda_idle.h),
 * without a GPU: the retire thread's decision table, the enqueue's check,
 * and the handshake run against a model of the processor (a thread that
 * does what idle_last_look/idle_exit in <xtq/cuda_processor.cuh> do, with
 * a seq_cst fence for fence.sc.sys). A producer publishes packets with gaps
 * around the model's idle time; the main thread plays the retire
 * thread. Every packet must be taken exactly once, none left behind.
 * The device code itself has only run where a GPU is (tests/gpu cases
 * idle_exit_*).
 */
#include "internal.h"

#include <pthread.h>
#include <sched.h>

#include "cuda_idle.h"
#include "xtq_test.h"

XTQ_TEST(wake_action_table)
{
    /* Stopped by the host (attach, quiesce, ...): whoever stopped it
     * starts it, whatever the state says. */
    CHECK_EQ(xtq__cuda_wake_action(false, XTQ__CUDA_PROC_STOPPED, false), XTQ__CUDA_WAKE_NONE);
    CHECK_EQ(xtq__cuda_wake_action(false, XTQ__CUDA_PROC_EXITING, true), XTQ__CUDA_WAKE_NONE);
    CHECK_EQ(xtq__cuda_wake_action(false, XTQ__CUDA_PROC_RUNNING, false), XTQ__CUDA_WAKE_NONE);
    /* Exited idle: relaunch, whether or not the kernel has ended yet. */
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_STOPPED, true), XTQ__CUDA_WAKE_RELAUNCH);
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_STOPPED, false), XTQ__CUDA_WAKE_RELAUNCH);
    /* Deciding: wait; gone while deciding is a fault. */
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_EXITING, true), XTQ__CUDA_WAKE_WAIT);
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_EXITING, false), XTQ__CUDA_WAKE_DEAD);
    /* Running: nothing to do; gone while running is a fault. */
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_RUNNING, true), XTQ__CUDA_WAKE_NONE);
    CHECK_EQ(xtq__cuda_wake_action(true, XTQ__CUDA_PROC_RUNNING, false), XTQ__CUDA_WAKE_DEAD);
    CHECK_EQ(xtq__cuda_wake_action(true, 77, true), XTQ__CUDA_WAKE_DEAD);
}

XTQ_TEST(after_publish_reads_state)
{
    volatile uint32_t state = XTQ__CUDA_PROC_RUNNING;
    CHECK(!xtq__cuda_idle_after_publish(&state));
    state = XTQ__CUDA_PROC_EXITING;
    CHECK(xtq__cuda_idle_after_publish(&state));
    state = XTQ__CUDA_PROC_STOPPED;
    CHECK(xtq__cuda_idle_after_publish(&state));
}

/* ---- the handshake against a model of the processor -------------------- */

enum { MODEL_N = 4000, MODEL_IDLE_POLLS = 64 };

struct model {
    _Atomic uint64_t slot[MODEL_N]; /* packet i: i + 1 once published */
    _Atomic uint32_t taken[MODEL_N];
    _Atomic uint64_t write_index;
    _Atomic uint64_t rd;     /* the processor's read position (dev->q[].rd) */
    volatile uint32_t state; /* ctl->state */
    _Atomic uint32_t alive;  /* the kernel has not ended (stream busy) */
    _Atomic uint32_t wake;   /* a doorbell's request */
    _Atomic uint64_t exits, relaunches, cancelled, stranded, never_exited;
    pthread_t proc;
};

static void state_store(struct model *m, uint32_t v)
{
    atomic_store_explicit((_Atomic uint32_t *)(uintptr_t)&m->state, v, memory_order_relaxed);
}

/* The processor: take packets in order; after MODEL_IDLE_POLLS empty
 * polls, the last look (EXITING, full fence, look again), then exit or go
 * on, as idle_last_look and idle_exit do. */
static void *model_processor(void *arg)
{
    struct model *m = arg;
    uint64_t rd = atomic_load(&m->rd);
    unsigned idle = 0;
    for (;;) {
        if (rd < MODEL_N && atomic_load_explicit(&m->slot[rd], memory_order_acquire) == rd + 1) {
            atomic_fetch_add(&m->taken[rd], 1);
            atomic_store(&m->rd, ++rd);
            idle = 0;
            continue;
        }
        if (++idle < MODEL_IDLE_POLLS) {
            sched_yield();
            continue;
        }
        /* The GPU's nap, clock read and barriers between its last empty
         * poll and the state store: a packet published here is what the
         * last look is for (without it, this test loses packets). */
        sched_yield();
        state_store(m, XTQ__CUDA_PROC_EXITING);
        xtq__cuda_idle_fence(); /* fence.sc.sys */
        sched_yield();          /* a doorbell that sees EXITING waits for the verdict */
        if (rd < MODEL_N && atomic_load_explicit(&m->slot[rd], memory_order_acquire) != 0) {
            state_store(m, XTQ__CUDA_PROC_RUNNING);
            atomic_fetch_add(&m->cancelled, 1);
            idle = 0;
            continue;
        }
        atomic_fetch_add(&m->exits, 1);
        state_store(m, XTQ__CUDA_PROC_STOPPED);
        break;
    }
    atomic_store(&m->alive, 0);
    return NULL;
}

static void model_launch(struct model *m)
{
    state_store(m, XTQ__CUDA_PROC_RUNNING); /* before the launch, as processor_start */
    xtq__cuda_idle_fence();
    atomic_store(&m->alive, 1);
    CHECK(pthread_create(&m->proc, NULL, model_processor, m) == 0);
}

/* The enqueue: reserve, publish, then the doorbell's check. The producer
 * waits for each packet to be taken before the next, so a packet left
 * behind by an exit is not rescued by a later packet's doorbell: it is
 * counted as stranded after 30 s (a loaded machine stalls threads for
 * seconds; a lost packet is never taken). */
static void *model_producer(void *arg)
{
    struct model *m = arg;
    unsigned seed = 4242;
    for (uint64_t i = atomic_fetch_add(&m->write_index, 1); i < MODEL_N;
         i = atomic_fetch_add(&m->write_index, 1)) {
        atomic_store_explicit(&m->slot[i], i + 1, memory_order_release);
        if (xtq__cuda_idle_after_publish(&m->state))
            atomic_store_explicit(&m->wake, 1, memory_order_release);
        uint64_t limit = xtq__now_ns() + 30000000000ull; /* loaded machines stall threads for seconds */
        while (atomic_load(&m->taken[i]) == 0) {
            if (xtq__now_ns() > limit) {
                atomic_fetch_add(&m->stranded, 1);
                return NULL;
            }
            sched_yield();
        }
        /* Every 400th packet, wait for the model to exit, so that the
         * relaunch is exercised however the threads are scheduled (on a
         * loaded 2-core machine the random gaps alone can miss it). */
        if (i % 400 == 399) {
            uint64_t seen = atomic_load(&m->exits);
            limit = xtq__now_ns() + 30000000000ull;
            while (atomic_load(&m->exits) == seen && xtq__now_ns() < limit)
                sched_yield();
            if (atomic_load(&m->exits) == seen)
                atomic_fetch_add(&m->never_exited, 1);
        }
        /* Gaps: none, short, and long enough for the model to exit. */
        unsigned g = rand_r(&seed) % 8;
        for (unsigned n = g < 3 ? 0 : g < 6 ? rand_r(&seed) % 64 : 64 + rand_r(&seed) % 128; n; n--)
            sched_yield();
    }
    return NULL;
}

XTQ_TEST(handshake_model_exactly_once)
{
    struct model *m = calloc(1, sizeof(*m));
    pthread_t prod;
    CHECK(m != NULL);
    model_launch(m);
    CHECK(pthread_create(&prod, NULL, model_producer, m) == 0);
    /* The retire thread: on a doorbell's request, decide and relaunch. A
     * lost packet shows as a queue that never drains: fail, not hang. */
    uint64_t deadline = xtq__now_ns() + 120ull * 1000000000ull;
    while (atomic_load(&m->rd) < MODEL_N && atomic_load(&m->stranded) == 0) {
        if (xtq__now_ns() > deadline)
            XTQ_FAIL("model: %llu of %d packets taken after 120 s",
                     (unsigned long long)atomic_load(&m->rd), MODEL_N);
        if (!atomic_exchange(&m->wake, 0)) {
            sched_yield();
            continue;
        }
        for (;;) {
            uint32_t st = atomic_load((_Atomic uint32_t *)(uintptr_t)&m->state);
            enum xtq__cuda_wake w = xtq__cuda_wake_action(true, st, atomic_load(&m->alive));
            if (w == XTQ__CUDA_WAKE_WAIT) {
                sched_yield();
                continue;
            }
            CHECK(w != XTQ__CUDA_WAKE_DEAD);
            if (w == XTQ__CUDA_WAKE_RELAUNCH) {
                pthread_join(m->proc, NULL); /* cudaStreamSynchronize */
                atomic_fetch_add(&m->relaunches, 1);
                model_launch(m);
            }
            break;
        }
    }
    pthread_join(prod, NULL);
    CHECK_EQ(atomic_load(&m->stranded), 0);
    CHECK_EQ(atomic_load(&m->never_exited), 0);
    for (uint64_t i = 0; i < MODEL_N; i++)
        CHECK_EQ(atomic_load(&m->taken[i]), 1);
    /* No packet is left: the model exits once idle, and that last exit
     * is the only one without a relaunch. */
    pthread_join(m->proc, NULL);
    uint64_t exits = atomic_load(&m->exits), relaunches = atomic_load(&m->relaunches);
    printf("model: %llu exits, %llu relaunches, %llu exits cancelled by a late packet\n",
           (unsigned long long)exits, (unsigned long long)relaunches,
           (unsigned long long)atomic_load(&m->cancelled));
    CHECK(relaunches >= 1);
    CHECK_EQ(exits, relaunches + 1);
    free(m);
}
