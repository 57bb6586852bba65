/*
 * Across hosts (network namespaces, the scripts in tests/multihost): faults and the
 * soak. Every case runs under the scripts beside this file.
 *
 * `stream DIR [stopped=R] [dead=R]` (faults.sh): every rank streams puts
 * (remote completion, payloads 0-64 KiB whose bytes derive from (source,
 * id)) to every other rank, at most PER_PEER in flight per peer, while the
 * script breaks the network or a rank. Targets verify each payload and
 * count each (source, id). A put refused at once (-XTQ_EHOSTDOWN: peer
 * declared down) is retried every PROBE_MS. The script writes
 * DIR/fault_start, DIR/restored (CLOCK_MONOTONIC ns, one clock for every
 * namespace of the machine) and DIR/stop; after `restored` each rank notes
 * when a put to each peer issued after it first succeeded (the peer is
 * usable again). Then every rank drains (each put completes or fails;
 * one still pending 2 x XTQ_PEER_TIMEOUT_MS + 5 s later is a hang), writes
 * what it sent and what ran here under DIR, and finalizes.
 *
 * `check DIR NRANKS [dead=R] [stopped=R] [recover=MS]`: reads those files.
 * A put acknowledged with 0 ran exactly once; one that failed ran at most
 * once (its outcome is unknown to the initiator); none ran twice; no put
 * hung; no payload arrived corrupted; with recover=MS every pair of live
 * ranks was usable again within MS of `restored`.
 *
 * `soak DIR SECONDS` (soak.sh): every rank puts to every other for
 * SECONDS, payloads 0 B to 1 MiB, kernel and function commands alike, all
 * with remote completion; every CHURN_MS each target unregisters its
 * "churning" kernel and function indices and, CHURN_AWAY_MS later,
 * registers them again with the other of two objects. Puts naming a stable index must all succeed;
 * puts naming a churning one succeed or get -XTQ_ENOKERNEL / -XTQ_ENOFUNC. At the end each target
 * checks, per source, that it ran exactly as many tasks as the source saw acknowledged, and no
 * payload was corrupted. The script samples RSS and open file descriptors every second until
 * the first rank writes drain.RANK (its put loop ended).
 *
 * `clock`: prints CLOCK_MONOTONIC in ns (the scripts' timestamps).
 */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_INDEX 6
#define FN_INDEX    13
#define PER_PEER    32
#define MAX_PAYLOAD 65536
#define CAP         (1u << 20) /* ids per initiator */
#define PROBE_MS    100
#define ST_PENDING  1 /* a put that never completed (hang) */
#define MAX_RANKS   16

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t len_of(uint32_t src, uint64_t id)
{
    uint64_t m = mix(((uint64_t)src << 40) ^ id);
    /* Mostly small (eager), one in eight up to 64 KiB (gathered sends). */
    return (size_t)((m & 7) ? (m >> 8) % 257 : (m >> 8) % (MAX_PAYLOAD + 1));
}

static uint8_t byte_of(uint32_t src, uint64_t id, size_t i)
{
    return (uint8_t)(id * 7u + src * 29u + i * 131u + (i >> 7));
}

/* key=value among the case's arguments, else `dflt`. */
static long arg_long(const char *key, long dflt)
{
    size_t n = strlen(key);
    for (int i = 0; i < xtq_test_argc; i++)
        if (strncmp(xtq_test_argv[i], key, n) == 0 && xtq_test_argv[i][n] == '=')
            return strtol(xtq_test_argv[i] + n + 1, NULL, 0);
    return dflt;
}

static const char *dir_arg(void)
{
    if (xtq_test_argc < 1)
        XTQ_FAIL("usage: test_multihost CASE DIR ...");
    return xtq_test_argv[0];
}

static void path_of(char *buf, size_t n, const char *name, int rank)
{
    if (rank >= 0)
        snprintf(buf, n, "%s/%s.%d", dir_arg(), name, rank);
    else
        snprintf(buf, n, "%s/%s", dir_arg(), name);
}

static bool file_exists(const char *name, int rank)
{
    char p[512];
    struct stat st;
    path_of(p, sizeof(p), name, rank);
    return stat(p, &st) == 0;
}

/* A timestamp file the script wrote (ns), or 0. */
static uint64_t read_stamp(const char *name)
{
    char p[512];
    unsigned long long v = 0;
    path_of(p, sizeof(p), name, -1);
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void write_blob(const char *name, int rank, const void *a, size_t alen, const void *b,
                       size_t blen)
{
    char p[512], tmp[520];
    path_of(p, sizeof(p), name, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    FILE *f = fopen(tmp, "wb");
    CHECK(f);
    CHECK_EQ(fwrite(a, 1, alen, f), alen);
    if (blen)
        CHECK_EQ(fwrite(b, 1, blen, f), blen);
    CHECK_EQ(fclose(f), 0);
    CHECK_EQ(rename(tmp, p), 0);
}

static void *read_blob(const char *name, int rank, size_t *len)
{
    char p[512];
    path_of(p, sizeof(p), name, rank);
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    CHECK(buf);
    CHECK_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Wait (bounded) until every rank in `mask` left `name`. */
static bool wait_all(const char *name, int size, int skip, uint64_t timeout_ns)
{
    uint64_t end = now_ns() + timeout_ns;
    for (;;) {
        bool all = true;
        for (int r = 0; r < size; r++)
            if (r != skip && !file_exists(name, r))
                all = false;
        if (all)
            return true;
        if (now_ns() > end)
            return false;
        nap_us(10000);
    }
}

/* ---- what each rank writes -------------------------------------------- */

struct rec {
    int32_t status; /* 0, -XTQ_E*, or ST_PENDING */
    uint16_t target;
    uint16_t pad_;
};

struct summary {
    uint32_t rank, size;
    uint64_t nids;             /* puts issued (ids 0..nids-1) */
    uint64_t refused;          /* xtq_put returned -XTQ_EHOSTDOWN */
    uint64_t other_put_errors; /* xtq_put returned something else */
    uint64_t bad_tasks;        /* arrived here with wrong arguments or payload */
    uint64_t max_ok_ns;        /* slowest put that succeeded */
    uint64_t max_fail_ns;      /* slowest put that failed */
    uint64_t max_call_ns;      /* longest xtq_put call */
    uint64_t restored;         /* the script's stamp */
    uint64_t fault_start;
    uint64_t first_fail[MAX_RANKS]; /* first failure per peer (ns), 0: none */
    uint64_t usable[MAX_RANKS];     /* first success after `restored` (ns), 0: never */
    xtq_stats_t stats;
};

/* ---- stream -------------------------------------------------------------- */

static struct {
    int rank, size;
    _Atomic uint8_t *count; /* [src * CAP + id] */
    _Atomic uint64_t bad;
} S;

/* A payload that differs: where, how far, and whether what is there is
 * the sender's pattern for another id (ids equal mod 256 share it): its
 * buffer reused while the transport still read it, or another of its
 * messages at the same offset; else something else wrote there. */
static void report_bad(uint32_t src, uint64_t id, size_t len, const uint8_t *p, size_t at)
{
    size_t end = at;
    while (end < len && p[end] != byte_of(src, id, end))
        end++;
    /* byte_of() moves by 7 per id: 183 is 7's inverse mod 256. */
    uint64_t other = id + (uint8_t)((uint8_t)(p[at] - byte_of(src, id, at)) * 183u);
    size_t same = 0;
    while (at + same < end && p[at + same] == byte_of(src, other, at + same))
        same++;
    fprintf(stderr,
            "rank %d: bad task src=%u id=%llu len=%zu: bytes [%zu, %zu) differ (%02x, expected "
            "%02x); %zu of them are the sender's pattern for id %llu (mod 256)\n",
            S.rank, src, (unsigned long long)id, len, at, end, p[at], byte_of(src, id, at), same,
            (unsigned long long)other);
}

static void task_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    uint32_t src = (uint32_t)(arg[2] >> 40);
    uint64_t id = arg[2] & ((1ull << 40) - 1);
    const uint8_t *p = (const uint8_t *)(uintptr_t)arg[1];
    size_t len = (size_t)arg[3];
    bool ok =
        src < (uint32_t)S.size && id < CAP && len == len_of(src, id) && ((len == 0) == (p == NULL));
    size_t bad_at = 0;
    for (size_t i = 0; ok && i < len; i++)
        if (!(ok = p[i] == byte_of(src, id, i)))
            bad_at = i;
    if (!ok) {
        if (atomic_fetch_add(&S.bad, 1) < 5)
            report_bad(src, id, len, p, bad_at);
        return;
    }
    atomic_fetch_add_explicit(&S.count[(size_t)src * CAP + id], 1, memory_order_relaxed);
}

struct slot {
    xtq_completion_t c;
    uint8_t cmd[64]; /* the command, like the payload, stays put until LOCAL */
    bool busy;
    bool held; /* DONE, not yet LOCAL: the buffers are not ours yet */
    uint64_t id;
    uint64_t issued;
    uint8_t *buf;
};

struct peer {
    struct slot slots[PER_PEER];
    uint64_t down_since, next_probe;
};

XTQ_TEST(stream)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    const int stopped = (int)arg_long("stopped", -1), dead = (int)arg_long("dead", -1);

    CHECK_OK(xtq_init(&attr, &ctx));
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    if (S.size < 2 || S.size > MAX_RANKS) {
        xtq_finalize(ctx);
        XTQ_SKIP("stream runs at 2 to %d ranks under tests/multihost/faults.sh", MAX_RANKS);
    }
    const char *pt = getenv("XTQ_PEER_TIMEOUT_MS");
    const uint64_t timeout_ns = (pt ? strtoull(pt, NULL, 10) : 5000) * 1000000ull;
    S.count = calloc((size_t)S.size * CAP, 1);
    struct rec *recs = calloc(CAP, sizeof(*recs));
    struct peer *peers = calloc((size_t)S.size, sizeof(*peers));
    struct summary sum = {.rank = (uint32_t)S.rank, .size = (uint32_t)S.size};
    CHECK(S.count && recs && peers);
    for (int t = 0; t < S.size; t++)
        for (int k = 0; k < PER_PEER && t != S.rank; k++)
            CHECK((peers[t].slots[k].buf = malloc(MAX_PAYLOAD)));

    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 256, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, task_fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FN_INDEX, f, NULL));
    CHECK_OK(xtq_barrier(ctx));
    write_blob("ready", S.rank, "1", 1, NULL, 0);

    uint64_t next_look = 0, last_progress = now_ns();
    bool stop = false;
    while (!stop) {
        uint64_t now = now_ns();
        if (now >= next_look) {
            next_look = now + 10000000;
            if (!sum.restored)
                sum.restored = read_stamp("restored");
            stop = file_exists("stop", -1) || now - last_progress > 600ull * 1000000000ull;
        }
        bool moved = false;
        for (int t = 0; t < S.size; t++) {
            if (t == S.rank)
                continue;
            struct peer *pe = &peers[t];
            for (int k = 0; k < PER_PEER; k++) {
                struct slot *s = &pe->slots[k];
                if (s->held) {
                    /* A failed put's buffers: the transport's until LOCAL. */
                    if (!(xtq_completion_state(&s->c) & XTQ_COMPLETION_LOCAL))
                        continue;
                    s->held = false;
                }
                if (s->busy) {
                    if (!xtq_completion_test(&s->c))
                        continue;
                    uint64_t done = now_ns(), lat = done - s->issued;
                    int st = s->c.status;
                    recs[s->id].status = st;
                    s->busy = false;
                    s->held = !(xtq_completion_state(&s->c) & XTQ_COMPLETION_LOCAL);
                    moved = true;
                    if (st == 0) {
                        sum.max_ok_ns = lat > sum.max_ok_ns ? lat : sum.max_ok_ns;
                        if (sum.restored && s->issued >= sum.restored && !sum.usable[t])
                            sum.usable[t] = done;
                    } else {
                        sum.max_fail_ns = lat > sum.max_fail_ns ? lat : sum.max_fail_ns;
                        if (!sum.first_fail[t])
                            sum.first_fail[t] = done;
                    }
                }
                if (stop || sum.nids >= CAP || s->held)
                    continue;
                uint64_t t0 = now_ns();
                if (pe->down_since && t0 < pe->next_probe)
                    continue;
                uint64_t id = sum.nids;
                size_t len = len_of((uint32_t)S.rank, id);
                for (size_t i = 0; i < len; i++)
                    s->buf[i] = byte_of((uint32_t)S.rank, id, i);
                size_t cmd_len;
                CHECK_OK(xtq_cmd_function(s->cmd, sizeof(s->cmd), FN_INDEX, QUEUE_INDEX,
                                          ((uint64_t)S.rank << 40) | id, len, &cmd_len));
                memset(&s->c, 0, sizeof(s->c));
                int rc = xtq_put(ctx, t, s->cmd, cmd_len, len ? s->buf : NULL, len,
                                 XTQ_PUT_REMOTE_COMPLETION, &s->c);
                uint64_t t1 = now_ns();
                sum.max_call_ns = t1 - t0 > sum.max_call_ns ? t1 - t0 : sum.max_call_ns;
                if (rc == -XTQ_EHOSTDOWN) {
                    sum.refused++;
                    if (!pe->down_since)
                        pe->down_since = t1;
                    if (!sum.first_fail[t])
                        sum.first_fail[t] = t1;
                    pe->next_probe = t1 + PROBE_MS * 1000000ull;
                    break; /* the rest of this peer's slots wait for the probe */
                }
                if (rc) {
                    sum.other_put_errors++;
                    if (sum.other_put_errors < 5)
                        fprintf(stderr, "rank %d: xtq_put to %d: %s\n", S.rank, t, xtq_errname(rc));
                    pe->next_probe = t1 + PROBE_MS * 1000000ull;
                    pe->down_since = pe->down_since ? pe->down_since : t1;
                    break;
                }
                pe->down_since = 0;
                recs[id] = (struct rec){.status = ST_PENDING, .target = (uint16_t)t};
                s->busy = true;
                s->id = id;
                s->issued = t0;
                sum.nids++;
                moved = true;
            }
        }
        if (moved)
            last_progress = now_ns();
        else
            nap_us(200);
    }

    /* Drain: each put completes or fails, within twice the peer timeout
     * (plus slack for a loaded 2-core machine); one that does not hung. */
    uint64_t drain_end = now_ns() + 2 * timeout_ns + 5000000000ull;
    for (int t = 0; t < S.size; t++)
        for (int k = 0; t != S.rank && k < PER_PEER; k++) {
            struct slot *s = &peers[t].slots[k];
            if (!s->busy)
                continue;
            uint64_t now = now_ns();
            int64_t left = drain_end > now ? (int64_t)(drain_end - now) : 0;
            int rc = xtq_completion_wait(ctx, &s->c, left);
            if (rc == -XTQ_ETIMEDOUT && !xtq_completion_test(&s->c)) {
                fprintf(stderr, "rank %d: put %llu to rank %d still pending: a hang\n", S.rank,
                        (unsigned long long)s->id, t);
                continue; /* stays ST_PENDING */
            }
            recs[s->id].status = s->c.status;
            uint64_t lat = now_ns() - s->issued;
            if (s->c.status == 0)
                sum.max_ok_ns = lat > sum.max_ok_ns ? lat : sum.max_ok_ns;
            else
                sum.max_fail_ns = lat > sum.max_fail_ns ? lat : sum.max_fail_ns;
            s->busy = false;
        }
    write_blob("drained", S.rank, "1", 1, NULL, 0);
    /* Everyone's puts are settled before the counts are taken. */
    if (!wait_all("drained", S.size, dead, 120ull * 1000000000ull))
        fprintf(stderr, "rank %d: not every rank drained in 120 s\n", S.rank);
    xtq_stats_t st;
    uint64_t seen = UINT64_MAX;
    for (int i = 0; i < 100; i++) { /* tasks still running here settle */
        CHECK_OK(xtq_get_stats(ctx, &st));
        if (st.tasks_completed == seen)
            break;
        seen = st.tasks_completed;
        nap_us(100000);
    }
    sum.bad_tasks = atomic_load(&S.bad);
    sum.fault_start = read_stamp("fault_start");
    sum.restored = read_stamp("restored");
    sum.stats = st;
    write_blob("sent", S.rank, &sum, sizeof(sum), recs, sum.nids * sizeof(*recs));
    write_blob("ran", S.rank, (const void *)S.count, (size_t)S.size * CAP, NULL, 0);
    printf("rank %d%s: %llu puts issued, %llu refused (peer down), stats: puts_issued %llu "
           "puts_completed %llu puts_failed %llu msgs_received %llu tasks_enqueued %llu "
           "tasks_completed %llu msgs_rejected %llu acks_sent %llu queue_full_events %llu\n",
           S.rank, S.rank == stopped ? " (the stopped rank)" : "", (unsigned long long)sum.nids,
           (unsigned long long)sum.refused, (unsigned long long)st.puts_issued,
           (unsigned long long)st.puts_completed, (unsigned long long)st.puts_failed,
           (unsigned long long)st.msgs_received, (unsigned long long)st.tasks_enqueued,
           (unsigned long long)st.tasks_completed, (unsigned long long)st.msgs_rejected,
           (unsigned long long)st.acks_sent, (unsigned long long)st.queue_full_events);
    fflush(stdout);
    /* Nobody closes its endpoint while another still counts. */
    write_blob("counted", S.rank, "1", 1, NULL, 0);
    wait_all("counted", S.size, dead, 60ull * 1000000000ull);

    CHECK_OK(xtq_unregister_function(ctx, FN_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    int frc = xtq_finalize(ctx);
    /* A peer still down makes finalize local (and say so). */
    if (frc != 0 && frc != -XTQ_EHOSTDOWN)
        XTQ_FAIL("rank %d: xtq_finalize: %s", S.rank, xtq_errname(frc));
    for (int t = 0; t < S.size; t++)
        for (int k = 0; t != S.rank && k < PER_PEER; k++)
            free(peers[t].slots[k].buf);
    free(peers);
    free(recs);
    free((void *)S.count);
}

/* ---- check ---------------------------------------------------------------- */

XTQ_TEST(check)
{
    CHECK(xtq_test_argc >= 2);
    const int n = atoi(xtq_test_argv[1]);
    const int dead = (int)arg_long("dead", -1), stopped = (int)arg_long("stopped", -1);
    const long recover_ms = arg_long("recover", -1);
    CHECK(n >= 2 && n <= MAX_RANKS);
    struct summary *sums[MAX_RANKS] = {0};
    struct rec *recs[MAX_RANKS] = {0};
    uint8_t *ran[MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        size_t len = 0;
        uint8_t *blob = read_blob("sent", r, &len);
        if (r == dead) {
            free(blob);
            continue;
        }
        if (!blob)
            XTQ_FAIL("rank %d wrote no results (it did not finish)", r);
        CHECK(len >= sizeof(struct summary));
        sums[r] = (struct summary *)blob;
        recs[r] = (struct rec *)(blob + sizeof(struct summary));
        CHECK_EQ(len, sizeof(struct summary) + sums[r]->nids * sizeof(struct rec));
        ran[r] = read_blob("ran", r, &len);
        CHECK(ran[r] && len == (size_t)n * CAP);
    }
    uint64_t acked = 0, failed = 0, failed_ran = 0, lost = 0, dup = 0, hangs = 0, bad = 0,
             to_dead_ok = 0, to_dead_failed = 0, refused = 0, unknown = 0, not_run = 0,
             not_run_ran = 0;
    uint64_t max_ok = 0, max_fail = 0, max_call = 0;
    for (int s = 0; s < n; s++) {
        if (!sums[s])
            continue;
        bad += sums[s]->bad_tasks;
        refused += sums[s]->refused;
        if (s != stopped) {
            max_ok = sums[s]->max_ok_ns > max_ok ? sums[s]->max_ok_ns : max_ok;
            max_fail = sums[s]->max_fail_ns > max_fail ? sums[s]->max_fail_ns : max_fail;
            max_call = sums[s]->max_call_ns > max_call ? sums[s]->max_call_ns : max_call;
        }
        for (uint64_t id = 0; id < sums[s]->nids; id++) {
            struct rec *rc = &recs[s][id];
            int t = rc->target;
            if (rc->status == ST_PENDING) {
                hangs++;
                continue;
            }
            if (t == dead) {
                if (rc->status == 0)
                    to_dead_ok++;
                else if (rc->status == -XTQ_EHOSTDOWN)
                    to_dead_failed++;
                else
                    unknown++;
                continue;
            }
            unsigned c = ran[t][(size_t)s * CAP + id];
            if (c > 1)
                dup++;
            if (rc->status == 0) {
                acked++;
                if (c == 0)
                    lost++;
            } else if (rc->status == -XTQ_EIO) {
                /* Lost in the transport, refused by the target for good
                 * (MISSING): it must not have run. */
                not_run++;
                not_run_ran += c != 0;
            } else {
                failed++;
                failed_ran += c == 1;
                if (rc->status != -XTQ_EHOSTDOWN)
                    unknown++;
            }
        }
        /* Tasks that ran here but were never issued. */
        for (int t = 0; t < n; t++)
            if (ran[t])
                for (uint64_t id = sums[s]->nids; id < CAP; id++)
                    dup += ran[t][(size_t)s * CAP + id] != 0;
    }
    const char *pt = getenv("XTQ_PEER_TIMEOUT_MS");
    const uint64_t timeout_ns = (pt ? strtoull(pt, NULL, 10) : 5000) * 1000000ull;
    printf("puts: %llu acknowledged (each ran exactly once unless counted lost/duplicated), "
           "%llu failed (%llu of them ran: outcome unknown to the initiator), %llu refused at "
           "once (peer down), to the dead rank %llu acked + %llu failed\n",
           (unsigned long long)acked, (unsigned long long)failed, (unsigned long long)failed_ran,
           (unsigned long long)refused, (unsigned long long)to_dead_ok,
           (unsigned long long)to_dead_failed);
    printf("%llu failed with -XTQ_EIO (lost in the transport, refused by the target: must not "
           "have run; %llu ran)\n",
           (unsigned long long)not_run, (unsigned long long)not_run_ran);
    printf("lost %llu, duplicated %llu, hung %llu, corrupted %llu, other errors %llu\n",
           (unsigned long long)lost, (unsigned long long)dup, (unsigned long long)hangs,
           (unsigned long long)bad, (unsigned long long)unknown);
    printf("slowest put: %.0f ms to succeed, %.0f ms to fail, %.0f ms in one xtq_put call "
           "(XTQ_PEER_TIMEOUT_MS=%llu%s)\n",
           max_ok / 1e6, max_fail / 1e6, max_call / 1e6, (unsigned long long)(timeout_ns / 1000000),
           stopped >= 0 ? "; the stopped rank's own puts excluded" : "");
    /* Recovery: each live pair, both ways. */
    long worst = 0;
    bool never = false;
    for (int s = 0; s < n; s++) {
        if (!sums[s])
            continue;
        uint64_t restored = sums[s]->restored, start = sums[s]->fault_start;
        for (int t = 0; t < n; t++) {
            if (t == s || t == dead)
                continue;
            if (sums[s]->first_fail[t] && start)
                printf("rank %d -> %d: first failure %.0f ms after the fault began\n", s, t,
                       (sums[s]->first_fail[t] - start) / 1e6);
            if (!restored)
                continue;
            if (!sums[s]->usable[t]) {
                printf("rank %d -> %d: not usable again after the fault ended\n", s, t);
                never = true;
            } else {
                long ms = (long)((sums[s]->usable[t] - restored) / 1000000);
                printf("rank %d -> %d: usable again %ld ms after the fault ended\n", s, t, ms);
                worst = ms > worst ? ms : worst;
            }
        }
    }
    CHECK_EQ(lost, 0);
    CHECK_EQ(dup, 0);
    CHECK_EQ(hangs, 0);
    CHECK_EQ(bad, 0);
    CHECK_EQ(unknown, 0);
    CHECK_EQ(not_run_ran, 0);
    /* In flight, nothing outlives the peer timeout by much: the check
     * period (timeout / 8) and a loaded machine's scheduling. */
    CHECK(max_fail <= 2 * timeout_ns);
    if (recover_ms >= 0) {
        CHECK(!never);
        CHECK(worst <= recover_ms);
    }
    for (int r = 0; r < n; r++) {
        free(sums[r]);
        free(ran[r]);
    }
    printf("check: ok%s\n", recover_ms >= 0 ? " (every live pair usable again in time)" : "");
}

/* ---- soak ---------------------------------------------------------------- */

#define SOAK_QUEUE    7
#define K_STABLE      30
#define F_STABLE      31
#define K_CHURN       32
#define F_CHURN       33
#define SOAK_SLOTS    8
#define CHURN_MS      250
#define CHURN_AWAY_MS 20

struct soak_args {
    void *target;            /* rewritten: registered buffer (unused) */
    const uint64_t *payload; /* rewritten: where the payload landed */
    uint64_t tag;            /* src << 40 | id */
    uint64_t len;
};

static struct {
    int size;
    _Atomic uint64_t ran[MAX_RANKS], ran_churn[MAX_RANKS], bad;
} K;

enum { KIND_STABLE = 1, KIND_CHURN = 2 };
static int kind_stable = KIND_STABLE, kind_churn = KIND_CHURN;

static uint64_t word_of(uint64_t tag, size_t i)
{
    return mix(tag) + i * 0x9e3779b97f4a7c15ull;
}

static size_t soak_len(uint64_t tag, size_t max)
{
    uint64_t m = mix(tag ^ 0x50a4ull);
    size_t cap = (m & 63) == 0 ? max : (m & 7) == 0 ? 65536 : 4096;
    if (cap > max)
        cap = max;
    return (size_t)((m >> 8) % (cap + 1)) & ~(size_t)7; /* whole words */
}

static void soak_task(uint64_t tag, const uint64_t *p, uint64_t len, const int *kind)
{
    uint32_t src = (uint32_t)(tag >> 40);
    bool ok = src < (uint32_t)K.size && (kind == &kind_stable || kind == &kind_churn) &&
              ((len == 0) == (p == NULL));
    for (size_t i = 0; ok && i < len / 8; i++)
        ok = p[i] == word_of(tag, i);
    if (!ok) {
        if (atomic_fetch_add(&K.bad, 1) < 5)
            fprintf(stderr, "soak: bad task tag=%llx len=%llu\n", (unsigned long long)tag,
                    (unsigned long long)len);
        return;
    }
    atomic_fetch_add_explicit(kind == &kind_stable ? &K.ran[src] : &K.ran_churn[src], 1,
                              memory_order_relaxed);
}

static void soak_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct soak_args *a = kernarg;
    soak_task(a->tag, a->payload, a->len, d->user_data);
}

static void soak_function(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    soak_task(arg[2], (const uint64_t *)(uintptr_t)arg[1], arg[3], user_data);
}

struct soak_slot {
    xtq_completion_t c;
    uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(struct soak_args)];
    uint64_t *buf;
    bool busy, churn;
};

struct soak_result {
    uint64_t acked[MAX_RANKS], acked_churn[MAX_RANKS], rejected_churn[MAX_RANKS];
    uint64_t ran[MAX_RANKS], ran_churn[MAX_RANKS];
    uint64_t bad, errors, churns, bytes;
};

XTQ_TEST(soak)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_kernel_t *ks, *kc[2];
    xtq_function_t *fs, *fc[2];
    CHECK(xtq_test_argc >= 2);
    const double seconds = atof(xtq_test_argv[1]);
    CHECK_OK(xtq_init(&attr, &ctx));
    const int rank = xtq_rank(ctx), size = xtq_size(ctx);
    if (size < 2 || size > MAX_RANKS) {
        xtq_finalize(ctx);
        XTQ_SKIP("soak runs at 2 to %d ranks under tests/multihost/soak.sh", MAX_RANKS);
    }
    K.size = size;
    const size_t max_len =
        (xtq_put_max_size(ctx) - XTQ_AQL_PACKET_SIZE - sizeof(struct soak_args)) & ~(size_t)7;
    const size_t buf_len = max_len < (1u << 20) ? max_len : (1u << 20);
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 256, &q));
    const uint32_t ksz = sizeof(struct soak_args);
    CHECK_OK(xtq_kernel_create_cpu(cpu, soak_kernel, ksz, &kind_stable, &ks));
    CHECK_OK(xtq_function_create_cpu(cpu, soak_function, &kind_stable, &fs));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(xtq_kernel_create_cpu(cpu, soak_kernel, ksz, &kind_churn, &kc[i]));
        CHECK_OK(xtq_function_create_cpu(cpu, soak_function, &kind_churn, &fc[i]));
    }
    CHECK_OK(xtq_register_queue(ctx, SOAK_QUEUE, q));
    CHECK_OK(xtq_register_kernel(ctx, K_STABLE, ks, NULL, NULL));
    CHECK_OK(xtq_register_function(ctx, F_STABLE, fs, NULL));
    CHECK_OK(xtq_register_kernel(ctx, K_CHURN, kc[0], NULL, NULL));
    CHECK_OK(xtq_register_function(ctx, F_CHURN, fc[0], NULL));

    struct soak_slot(*slots)[SOAK_SLOTS] = calloc((size_t)size, sizeof(*slots));
    struct soak_result res = {0};
    CHECK(slots);
    for (int t = 0; t < size; t++)
        for (int k = 0; t != rank && k < SOAK_SLOTS; k++)
            CHECK((slots[t][k].buf = malloc(buf_len ? buf_len : 8)));
    CHECK_OK(xtq_barrier(ctx));
    write_blob("ready", rank, "1", 1, NULL, 0);

    const uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    uint64_t id = 0, next_churn = start + CHURN_MS * 1000000ull, next_report = start;
    int which = 0;
    bool away = false;
    for (uint64_t now = start; now < end; now = now_ns()) {
        bool moved = false;
        if (now >= next_churn && !away) {
            /* Under load: the churning indices go away for CHURN_AWAY_MS
             * and come back with the other object; puts arriving meanwhile
             * get ENOKERNEL/ENOFUNC, those enqueued before run. */
            CHECK_OK(xtq_unregister_kernel(ctx, K_CHURN));
            CHECK_OK(xtq_unregister_function(ctx, F_CHURN));
            away = true;
            next_churn = now + CHURN_AWAY_MS * 1000000ull;
        } else if (now >= next_churn) {
            which ^= 1;
            CHECK_OK(xtq_register_kernel(ctx, K_CHURN, kc[which], NULL, NULL));
            CHECK_OK(xtq_register_function(ctx, F_CHURN, fc[which], NULL));
            away = false;
            next_churn = now + CHURN_MS * 1000000ull;
            res.churns++;
        }
        if (rank == 0 && now >= next_report) {
            next_report = now + 10000000000ull;
            printf("soak: %.0f s of %.0f\n", (now - start) / 1e9, seconds);
            fflush(stdout);
        }
        for (int t = 0; t < size; t++) {
            for (int k = 0; t != rank && k < SOAK_SLOTS; k++) {
                struct soak_slot *s = &slots[t][k];
                if (s->busy) {
                    if (!xtq_completion_test(&s->c))
                        continue;
                    int st = s->c.status;
                    if (st == 0)
                        (s->churn ? res.acked_churn : res.acked)[t]++;
                    else if (s->churn && (st == -XTQ_ENOKERNEL || st == -XTQ_ENOFUNC))
                        res.rejected_churn[t]++;
                    else if (res.errors++ < 5)
                        fprintf(stderr, "rank %d: put to %d failed: %s\n", rank, t,
                                xtq_errname(st));
                    s->busy = false;
                    moved = true;
                }
                uint64_t tag = ((uint64_t)rank << 40) | id;
                size_t len = soak_len(tag, buf_len);
                for (size_t i = 0; i < len / 8; i++)
                    s->buf[i] = word_of(tag, i);
                s->churn = (id & 15) == 7;
                bool kernel = id & 1;
                uint32_t index =
                    kernel ? (s->churn ? K_CHURN : K_STABLE) : (s->churn ? F_CHURN : F_STABLE);
                size_t cmd_len;
                if (kernel) {
                    struct soak_args a = {NULL, NULL, tag, len};
                    CHECK_OK(xtq_cmd_kernel(s->cmd, sizeof(s->cmd), index, SOAK_QUEUE, NULL, &a,
                                            sizeof(a), &cmd_len));
                } else {
                    CHECK_OK(xtq_cmd_function(s->cmd, sizeof(s->cmd), index, SOAK_QUEUE, tag, len,
                                              &cmd_len));
                }
                memset(&s->c, 0, sizeof(s->c));
                CHECK_OK(xtq_put(ctx, t, s->cmd, cmd_len, len ? s->buf : NULL, len,
                                 XTQ_PUT_REMOTE_COMPLETION, &s->c));
                s->busy = true;
                res.bytes += len;
                id++;
                moved = true;
            }
        }
        if (!moved)
            nap_us(200);
    }
    /* The steady run ends here: the script samples no further (what
     * follows is the drain and the teardown, which free memory and close
     * descriptors). */
    write_blob("drain", rank, "1", 1, NULL, 0);
    for (int t = 0; t < size; t++)
        for (int k = 0; t != rank && k < SOAK_SLOTS; k++) {
            struct soak_slot *s = &slots[t][k];
            if (!s->busy)
                continue;
            int st = xtq_completion_wait(ctx, &s->c, 60ll * 1000000000);
            if (st == 0)
                (s->churn ? res.acked_churn : res.acked)[t]++;
            else if (s->churn && (st == -XTQ_ENOKERNEL || st == -XTQ_ENOFUNC))
                res.rejected_churn[t]++;
            else if (res.errors++ < 5)
                fprintf(stderr, "rank %d: put to %d failed: %s\n", rank, t, xtq_errname(st));
        }
    /* All acknowledged: every task that will run here has run. */
    CHECK_OK(xtq_barrier(ctx));
    for (int s = 0; s < size; s++) {
        res.ran[s] = atomic_load(&K.ran[s]);
        res.ran_churn[s] = atomic_load(&K.ran_churn[s]);
    }
    res.bad = atomic_load(&K.bad);
    write_blob("soak", rank, &res, sizeof(res), NULL, 0);
    CHECK_OK(xtq_barrier(ctx));

    /* What each source saw acknowledged ran here, exactly. */
    uint64_t sent = 0, ran = 0, rejected = 0;
    for (int s = 0; s < size; s++) {
        if (s == rank)
            continue;
        size_t len = 0;
        struct soak_result *o = read_blob("soak", s, &len);
        CHECK(o && len == sizeof(*o));
        CHECK_EQ(res.ran[s], o->acked[rank]);
        CHECK_EQ(res.ran_churn[s], o->acked_churn[rank]);
        sent += o->acked[rank] + o->acked_churn[rank] + o->rejected_churn[rank];
        rejected += o->rejected_churn[rank];
        ran += res.ran[s] + res.ran_churn[s];
        free(o);
    }
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(ctx, &st));
    printf("rank %d: %llu puts received (%llu ran, %llu rejected while their index was away), "
           "%llu puts sent (%.1f GiB), %llu registration changes; stats: puts_issued %llu "
           "puts_failed %llu msgs_received %llu tasks_completed %llu msgs_rejected %llu "
           "acks_sent %llu queue_full_events %llu\n",
           rank, (unsigned long long)sent, (unsigned long long)ran, (unsigned long long)rejected,
           (unsigned long long)id, res.bytes / 1073741824.0, (unsigned long long)res.churns,
           (unsigned long long)st.puts_issued, (unsigned long long)st.puts_failed,
           (unsigned long long)st.msgs_received, (unsigned long long)st.tasks_completed,
           (unsigned long long)st.msgs_rejected, (unsigned long long)st.acks_sent,
           (unsigned long long)st.queue_full_events);
    CHECK_EQ(res.bad, 0);
    CHECK_EQ(res.errors, 0);

    CHECK_OK(xtq_unregister_kernel(ctx, K_STABLE));
    CHECK_OK(xtq_unregister_function(ctx, F_STABLE));
    if (!away) {
        CHECK_OK(xtq_unregister_kernel(ctx, K_CHURN));
        CHECK_OK(xtq_unregister_function(ctx, F_CHURN));
    }
    CHECK_OK(xtq_unregister_queue(ctx, SOAK_QUEUE));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(ks));
    CHECK_OK(xtq_function_destroy(fs));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(xtq_kernel_destroy(kc[i]));
        CHECK_OK(xtq_function_destroy(fc[i]));
    }
    CHECK_OK(xtq_finalize(ctx));
    for (int t = 0; t < size; t++)
        for (int k = 0; t != rank && k < SOAK_SLOTS; k++)
            free(slots[t][k].buf);
    free(slots);
}

XTQ_TEST(clock)
{
    printf("%llu\n", (unsigned long long)now_ns());
}
