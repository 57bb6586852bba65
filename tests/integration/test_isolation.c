/*
 * Isolation between jobs (run by isolation.sh): two independent processes
 * on this host over tcp, each a job of its own (separate launches, different
 * XTQ_JOB_KEY). The victim publishes its endpoint name in a file; the
 * attacker aims its rank 0 at it (a white-box hook: a real libxtq PUT with
 * the attacker's job key, through the attacker's real engine) and sends
 * commands that name indices the victim did register.
 *
 * Victim: every foreign message is rejected and counted under
 * rejected_by_reason[xtq_stats_reject_slot(-XTQ_EJOBKEY)], none runs, and its own
 * tasks keep running before and after. Attacker: no ack ever comes (the
 * victim answers only peers of its own job), so its puts do not complete
 * with success; finalize fails them.
 *
 * `test_isolation victim DIR` / `test_isolation attacker DIR`.
 *
 * Within one job (forged_rank, 3 ranks under mpirun): rank 2 writes
 * messages straight onto the transport that claim to come from rank 1
 * (another white-box hook: the engine's own endpoint, the header built by
 * hand). Rank 0 checks the claim against the transport's source address
 * (FI_SOURCE) and rejects them under rejected_by_reason[XTQ_ESRCRANK]:
 * eight PUTs (none runs) and an ACK for rank 0's put in flight to rank 1
 * (it does not complete it; rank 1's own ack later does).
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <xtq/xtq.h>

#include "xtq_test.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_INDEX 5
#define FN_INDEX 9
#define NATTACKS 16

static _Atomic uint64_t ran_own, ran_foreign;

static void fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    if (arg[2] == 0x600d)
        atomic_fetch_add(&ran_own, 1);
    else
        atomic_fetch_add(&ran_foreign, 1);
}

static const char *dir(void)
{
    if (xtq_test_argc < 1)
        XTQ_FAIL("usage: test_isolation victim|attacker DIR");
    return xtq_test_argv[0];
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir(), name);
}

/* Wait (bounded) until `name` exists in DIR; returns its contents. */
static char *wait_file(const char *name, size_t *len)
{
    char p[512];
    path_of(p, sizeof(p), name);
    for (int i = 0; i < 6000; i++) {
        FILE *f = fopen(p, "rb");
        if (f) {
            static char buf[1024];
            *len = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            return buf;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL); /* polling for the other job's file, bounded */
    }
    XTQ_FAIL("%s never appeared", p);
    return NULL;
}

static void write_file(const char *name, const void *data, size_t len)
{
    char p[512], tmp[520];
    path_of(p, sizeof(p), name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    FILE *f = fopen(tmp, "wb");
    CHECK(f);
    CHECK_EQ(fwrite(data, 1, len, f), len);
    CHECK_EQ(fclose(f), 0);
    CHECK_EQ(rename(tmp, p), 0);
}

static void self_put(xtq_ctx_t *ctx)
{
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t c = {0};
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_INDEX, QUEUE_INDEX, 0x600d, 0, &cmd_len));
    CHECK_OK(xtq_put(ctx, 0, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
    CHECK_EQ(xtq_completion_wait(ctx, &c, 30ll * 1000000000), 0);
}

XTQ_TEST(victim)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FN_INDEX, f, NULL));
    self_put(ctx);

    uint8_t name[XTQ__OFI_ADDR_MAX];
    size_t len = sizeof(name);
    CHECK_OK(xtq__engine_getname(ctx->engine, name, &len));
    write_file("victim.addr", name, len);

    /* The attacker's commands arrive while we keep serving our own. */
    size_t dlen;
    char *done = wait_file("attacker.done", &dlen);
    uint64_t sent = strtoull(done, NULL, 10);
    const unsigned idx = xtq_stats_reject_slot(-XTQ_EJOBKEY);
    xtq_stats_t st;
    for (int i = 0; i < 3000; i++) {
        CHECK_OK(xtq_get_stats(ctx, &st));
        if (st.rejected_by_reason[idx] >= sent)
            break;
        self_put(ctx); /* the victim keeps working meanwhile */
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    self_put(ctx);
    CHECK_OK(xtq_get_stats(ctx, &st));
    printf("victim: %llu foreign-job messages rejected (rejected_by_reason[EJOBKEY]), "
           "%llu ran; own tasks ran %llu\n",
           (unsigned long long)st.rejected_by_reason[idx],
           (unsigned long long)atomic_load(&ran_foreign),
           (unsigned long long)atomic_load(&ran_own));
    CHECK_EQ(st.rejected_by_reason[idx], sent);
    CHECK_EQ(st.msgs_rejected, sent);
    CHECK_EQ(atomic_load(&ran_foreign), 0);
    CHECK_EQ(st.puts_failed, 0);
    CHECK(atomic_load(&ran_own) >= 2);
    write_file("victim.done", "ok", 2);

    CHECK_OK(xtq_unregister_function(ctx, FN_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_finalize(ctx));
}

XTQ_TEST(attacker)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_EQ(xtq_size(ctx), 1);
    size_t len;
    char *name = wait_file("victim.addr", &len);
    CHECK(len > 0);
    CHECK_OK(xtq__engine_retarget(ctx->engine, 0, name));

    /* Commands the victim would accept from its own job. */
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t c[NATTACKS];
    memset(c, 0, sizeof(c));
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_INDEX, QUEUE_INDEX, 0xbad, 0, &cmd_len));
    for (int i = 0; i < NATTACKS; i++)
        CHECK_OK(xtq_put(ctx, 0, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c[i]));
    /* All left this process (local completion); none may succeed. */
    for (int i = 0; i < NATTACKS; i++) {
        for (int k = 0; k < 3000; k++) {
            uint32_t s = atomic_load((_Atomic uint32_t *)&c[i].state);
            if (s & XTQ_COMPLETION_LOCAL)
                break;
            xtq_progress(ctx);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        uint32_t s = atomic_load((_Atomic uint32_t *)&c[i].state);
        CHECK(s & XTQ_COMPLETION_LOCAL);
        CHECK(!(s & XTQ_COMPLETION_REMOTE));
        CHECK(!(s & XTQ_COMPLETION_DONE) || c[i].status != 0);
    }
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%d", NATTACKS);
    write_file("attacker.done", buf, (size_t)n);
    size_t dlen;
    wait_file("victim.done", &dlen);
    /* No ack came: the puts are still pending (or failed by a peer
     * timeout); finalize fails whatever is left. */
    for (int i = 0; i < NATTACKS; i++) {
        uint32_t s = atomic_load((_Atomic uint32_t *)&c[i].state);
        CHECK(!(s & XTQ_COMPLETION_DONE) || c[i].status != 0);
    }
    xtq_finalize(ctx);
    for (int i = 0; i < NATTACKS; i++) {
        CHECK(atomic_load((_Atomic uint32_t *)&c[i].state) & XTQ_COMPLETION_DONE);
        CHECK(c[i].status != 0);
    }
    printf("attacker: %d puts to another job's process; none succeeded (status %s)\n", NATTACKS,
           xtq_errname(c[0].status));
}

/* ---- forged source rank, within one job ---------------------------------- */

#define FORGED_PUTS 8
#define GATE_ARG    0x9a7e

static xtq_signal_t *gate;

static void gated_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    if (arg[2] == GATE_ARG)
        CHECK_OK(xtq_signal_wait(gate, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    else
        fn(arg, ret, user_data);
}

/* A context whose first word is no kind the engine knows: the progress
 * turn ignores its send completion. */
static uint32_t forged_ctx;

/* `msg` onto the wire to `dest` from our endpoint; it stays untouched
 * until finalize (a send may read it until its completion). */
static void forge(xtq_ctx_t *ctx, int dest, void *msg, size_t len)
{
    struct xtq__ofi *o = &ctx->engine->ofi;
    struct iovec iov = {msg, len};
    ssize_t rc;
    for (;;) {
        rc = len <= o->inject_size ? xtq__ofi_inject(o, msg, len, dest)
                                   : xtq__ofi_sendv(o, &iov, 1, dest, &forged_ctx);
        if (rc != -FI_EAGAIN)
            break;
        xtq_progress(ctx);
    }
    CHECK_EQ(rc, 0);
}

XTQ_TEST(forged_rank)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_completion_t held = {0};
    CHECK_OK(xtq_init(&attr, &ctx));
    if (xtq_size(ctx) != 3)
        XTQ_FAIL("forged_rank runs at 3 ranks, not %d", xtq_size(ctx));
    if (!ctx->engine->ofi.source)
        XTQ_SKIP("provider %s has no FI_SOURCE", ctx->engine->ofi.prov_name);
    int rank = xtq_rank(ctx);
    CHECK_OK(xtq_signal_create(1, &gate));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, gated_fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FN_INDEX, f, NULL));
    CHECK_OK(xtq_barrier(ctx));

    uint8_t cmd[64];
    size_t cmd_len;
    if (rank == 0) {
        /* Sequence 0 to rank 1, held there until the end. */
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_INDEX, QUEUE_INDEX, GATE_ARG, 0, &cmd_len));
        CHECK_OK(xtq_put(ctx, 1, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &held));
    }
    CHECK_OK(xtq_barrier(ctx));
    if (rank == 2) {
        static _Alignas(64) uint8_t msg[FORGED_PUTS][128];
        static struct xtq__wire_hdr h, ack;
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_INDEX, QUEUE_INDEX, 0xbad, 0, &cmd_len));
        CHECK_EQ(cmd_len, 64);
        for (int i = 0; i < FORGED_PUTS; i++) {
            xtq__wire_hdr_init(&h, XTQ__MSG_PUT, ctx->job_key, 1, 1000 + (uint64_t)i);
            h.cmd_len = (uint32_t)cmd_len;
            memcpy(msg[i], &h, sizeof(h));
            memcpy(msg[i] + sizeof(h), cmd, cmd_len);
            forge(ctx, 0, msg[i], sizeof(msg[i]));
        }
        /* "Rank 1 ran rank 0's sequence 0." */
        xtq__wire_hdr_init(&ack, XTQ__MSG_ACK, ctx->job_key, 1, 0);
        forge(ctx, 0, &ack, sizeof(ack));
    }
    if (rank == 0) {
        const int idx = XTQ_ESRCRANK - XTQ_ENOKERNEL;
        xtq_stats_t st;
        for (int i = 0; i < 3000; i++) {
            CHECK_OK(xtq_get_stats(ctx, &st));
            if (st.rejected_by_reason[idx] >= FORGED_PUTS + 1)
                break;
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        CHECK_OK(xtq_get_stats(ctx, &st));
        printf("rank 0: %llu messages claiming rank 1 from rank 2's endpoint rejected "
               "(rejected_by_reason[ESRCRANK]), %llu ran; the put held at rank 1 is %s\n",
               (unsigned long long)st.rejected_by_reason[idx],
               (unsigned long long)atomic_load(&ran_foreign),
               xtq_completion_test(&held) ? "DONE (wrong)" : "still in flight");
        CHECK_EQ(st.rejected_by_reason[idx], FORGED_PUTS + 1);
        CHECK_EQ(st.msgs_rejected, FORGED_PUTS + 1);
        CHECK_EQ(atomic_load(&ran_foreign), 0);
        CHECK(!xtq_completion_test(&held));
    }
    CHECK_OK(xtq_barrier(ctx));
    if (rank == 1)
        xtq_signal_store(gate, 0);
    if (rank == 0) {
        CHECK_OK(xtq_completion_wait(ctx, &held, 30ll * 1000000000));
        printf("rank 0: the held put completed by rank 1's own ack\n");
    } else {
        xtq_stats_t st;
        CHECK_OK(xtq_get_stats(ctx, &st));
        CHECK_EQ(st.msgs_rejected, 0);
    }
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_unregister_function(ctx, FN_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_finalize(ctx));
    xtq_signal_destroy(gate);
    printf("rank %d: forged_rank ok\n", rank);
}
