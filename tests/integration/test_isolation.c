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
 */
#include "internal.h"
#include "nic-emul/engine.h"

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
