/*
 * The bootstrap, white-box: out-of-band (OOB) collectives with ranks as
 * threads of this process (tests/harness/xtq_oob_shm.h), job-key
 * agreement, the context's instance id and the shared-memory names built
 * from it, locality from host identities, the barrier's polling, and the
 * error paths. No launcher, no PMIx, no engine.
 */
#include "internal.h"

#include "bootstrap.h"
#include "xtq_oob_shm.h"
#include "xtq_test.h"

#define NR 3

struct rank_run {
    struct oob_shm_rank me;
    struct xtq__bootstrap_attr attr;
    xtq_oob_coll_t coll;
    struct xtq__bootstrap *bs;
    int rc;
    int barrier_rc;
    bool barrier;
};

static void *rank_main(void *p)
{
    struct rank_run *r = p;
    r->coll = oob_shm_coll(&r->me);
    r->attr.oob = &r->coll;
    r->rc = xtq__bootstrap_init(&r->attr, &r->bs);
    if (r->rc == 0 && r->barrier)
        r->barrier_rc = xtq__bootstrap_barrier(r->bs, NULL, NULL);
    return NULL;
}

/* Bootstrap NR thread-ranks over one OOB; `key` (if given) on ranks whose
 * bit is set in `keyed`, rank r getting key + r * `key_step`. */
static void run_ranks(struct oob_shm *shm, struct rank_run *runs, int n, bool barrier, uint64_t key,
                      unsigned keyed, uint64_t key_step)
{
    pthread_t th[OOB_SHM_MAX_RANKS];
    oob_shm_init(shm, n);
    for (int r = 0; r < n; r++) {
        memset(&runs[r], 0, sizeof(runs[r]));
        runs[r].me = (struct oob_shm_rank){shm, r, 0};
        runs[r].barrier = barrier;
        if (keyed & (1u << r)) {
            runs[r].attr.has_job_key = true;
            runs[r].attr.job_key = key + (uint64_t)r * key_step;
        }
    }
    for (int r = 0; r < n; r++)
        CHECK_EQ(pthread_create(&th[r], NULL, rank_main, &runs[r]), 0);
    for (int r = 0; r < n; r++)
        CHECK_EQ(pthread_join(th[r], NULL), 0);
}

static void fini_ranks(struct rank_run *runs, int n)
{
    for (int r = 0; r < n; r++)
        xtq__bootstrap_fini(runs[r].bs);
}

XTQ_TEST(oob_ranks_and_agreement)
{
    static struct oob_shm shm;
    struct rank_run runs[NR];

    unsetenv("XTQ_JOB_KEY");
    run_ranks(&shm, runs, NR, true, 0, 0, 0);
    for (int r = 0; r < NR; r++) {
        struct xtq__bootstrap *bs = runs[r].bs;
        CHECK_OK(runs[r].rc);
        CHECK_OK(runs[r].barrier_rc);
        CHECK(bs->oob && !bs->pmix);
        CHECK_EQ(bs->rank, r);
        CHECK_EQ(bs->size, NR);
        /* Threads of one process: one host. */
        CHECK(bs->same_host);
        CHECK_EQ(bs->local_rank, r);
        CHECK_EQ(bs->local_size, NR);
        /* Rank 0's draws, everywhere. */
        CHECK_EQ(bs->job_key, runs[0].bs->job_key);
        CHECK_EQ(bs->instance, runs[0].bs->instance);
    }
    CHECK(runs[0].bs->job_key != 0 || runs[0].bs->instance != 0);
    /* Every request was freed. */
    CHECK_EQ(oob_shm_reqs_live(&shm), 0);
    fini_ranks(runs, NR);
}

/* allgather carries each rank's blob to rank-order slots on every rank. */
struct gather_run {
    struct rank_run run;
    uint64_t got[NR];
};

static void *gather_main(void *p)
{
    struct gather_run *g = p;
    rank_main(&g->run);
    if (g->run.rc == 0) {
        uint64_t mine = 1000 + (uint64_t)g->run.me.rank;
        g->run.rc = xtq__bootstrap_allgather(g->run.bs, "t", &mine, sizeof(mine), g->got);
    }
    return NULL;
}

XTQ_TEST(oob_allgather_order)
{
    static struct oob_shm shm;
    struct gather_run g[NR];
    pthread_t th[NR];

    oob_shm_init(&shm, NR);
    for (int r = 0; r < NR; r++) {
        memset(&g[r], 0, sizeof(g[r]));
        g[r].run.me = (struct oob_shm_rank){&shm, r, 0};
        CHECK_EQ(pthread_create(&th[r], NULL, gather_main, &g[r]), 0);
    }
    for (int r = 0; r < NR; r++) {
        CHECK_EQ(pthread_join(th[r], NULL), 0);
        CHECK_OK(g[r].run.rc);
        for (int i = 0; i < NR; i++)
            CHECK_EQ(g[r].got[i], 1000 + i);
        xtq__bootstrap_fini(g[r].run.bs);
    }
}

XTQ_TEST(job_key_given)
{
    static struct oob_shm shm;
    struct rank_run runs[NR];

    unsetenv("XTQ_JOB_KEY");
    run_ranks(&shm, runs, NR, false, 0x1234567890abcdefull, 0x7, 0);
    for (int r = 0; r < NR; r++) {
        CHECK_OK(runs[r].rc);
        CHECK_EQ(runs[r].bs->job_key, 0x1234567890abcdefull);
    }
    fini_ranks(runs, NR);

    /* XTQ_JOB_KEY when the attribute is not given; the attribute wins. */
    setenv("XTQ_JOB_KEY", "0x42", 1);
    run_ranks(&shm, runs, NR, false, 0, 0, 0);
    for (int r = 0; r < NR; r++) {
        CHECK_OK(runs[r].rc);
        CHECK_EQ(runs[r].bs->job_key, 0x42);
    }
    fini_ranks(runs, NR);
    run_ranks(&shm, runs, NR, false, 77, 0x7, 0);
    for (int r = 0; r < NR; r++) {
        CHECK_OK(runs[r].rc);
        CHECK_EQ(runs[r].bs->job_key, 77);
    }
    fini_ranks(runs, NR);
    unsetenv("XTQ_JOB_KEY");
}

/* A key given on some ranks only, or different keys: every rank refuses
 * (they all see every card, so they agree on the refusal). */
XTQ_TEST(job_key_disagreement)
{
    static struct oob_shm shm;
    struct rank_run runs[NR];

    unsetenv("XTQ_JOB_KEY");
    run_ranks(&shm, runs, NR, false, 5, 0x1, 0);
    for (int r = 0; r < NR; r++) {
        CHECK_ERR(runs[r].rc, -XTQ_EINVAL);
        CHECK(runs[r].bs == NULL);
    }
    run_ranks(&shm, runs, NR, false, 5, 0x7, 1);
    for (int r = 0; r < NR; r++)
        CHECK_ERR(runs[r].rc, -XTQ_EINVAL);
    CHECK_EQ(oob_shm_reqs_live(&shm), 0);
}

/*
 * Shared-memory names (doorbells) are unique per context: two jobs given
 * one key, and two contexts of one process with one XTQ_JOB_KEY, get
 * different names for the same rank.
 */
XTQ_TEST(shm_names_unique)
{
    static struct oob_shm shm;
    struct rank_run a[2], b[2];
    char na[128], nb[128], n0[128];

    unsetenv("XTQ_JOB_KEY");
    run_ranks(&shm, a, 2, false, 99, 0x3, 0);
    run_ranks(&shm, b, 2, false, 99, 0x3, 0);
    for (int r = 0; r < 2; r++) {
        CHECK_OK(a[r].rc);
        CHECK_OK(b[r].rc);
        CHECK_EQ(a[r].bs->job_key, b[r].bs->job_key);
        CHECK_OK(xtq__bootstrap_shm_name(a[r].bs, "bell", 1, na, sizeof(na)));
        CHECK_OK(xtq__bootstrap_shm_name(b[r].bs, "bell", 1, nb, sizeof(nb)));
        CHECK(strcmp(na, nb) != 0);
        /* Within one context every rank names rank 1's object alike. */
        CHECK_OK(xtq__bootstrap_shm_name(a[0].bs, "bell", 1, n0, sizeof(n0)));
        CHECK(strcmp(na, n0) == 0);
        CHECK(na[0] == '/' && strchr(na + 1, '/') == NULL);
    }
    CHECK_OK(xtq__bootstrap_shm_name(a[0].bs, "bell", 0, na, sizeof(na)));
    CHECK_OK(xtq__bootstrap_shm_name(a[0].bs, "bell", 1, nb, sizeof(nb)));
    CHECK(strcmp(na, nb) != 0);
    CHECK_ERR(xtq__bootstrap_shm_name(a[0].bs, "bell", 1, na, 8), -XTQ_ENOSPC);
    fini_ranks(a, 2);
    fini_ranks(b, 2);

    /* Two singleton contexts in one process, one XTQ_JOB_KEY. */
    struct xtq__bootstrap *s1, *s2;
    setenv("XTQ_JOB_KEY", "1234", 1);
    CHECK_OK(xtq__bootstrap_init(NULL, &s1));
    CHECK_OK(xtq__bootstrap_init(NULL, &s2));
    CHECK_EQ(s1->job_key, 1234);
    CHECK_EQ(s2->job_key, 1234);
    CHECK_OK(xtq__bootstrap_shm_name(s1, "bell", 0, na, sizeof(na)));
    CHECK_OK(xtq__bootstrap_shm_name(s2, "bell", 0, nb, sizeof(nb)));
    CHECK(strcmp(na, nb) != 0);
    xtq__bootstrap_fini(s1);
    xtq__bootstrap_fini(s2);
    unsetenv("XTQ_JOB_KEY");
}

XTQ_TEST(locality_from_identities)
{
    char hosts[5][XTQ__HOST_ID_MAX];
    int lr, ls;
    bool same;

    memset(hosts, 0, sizeof(hosts));
    const char *names[5] = {"a", "b", "a", "b", "a"};
    for (int r = 0; r < 5; r++)
        strcpy(hosts[r], names[r]);
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])hosts, 5, 2, &lr, &ls, &same);
    CHECK_EQ(lr, 1);
    CHECK_EQ(ls, 3);
    CHECK(!same);
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])hosts, 5, 3, &lr, &ls, &same);
    CHECK_EQ(lr, 1);
    CHECK_EQ(ls, 2);
    CHECK(!same);
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])hosts, 5, 0, &lr, &ls, &same);
    CHECK_EQ(lr, 0);
    CHECK_EQ(ls, 3);
    /* Identities differ past the first bytes too: compared whole. */
    strcpy(hosts[4], "a");
    hosts[4][XTQ__HOST_ID_MAX - 1] = 'x';
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])hosts, 5, 4, &lr, &ls, &same);
    CHECK_EQ(lr, 0);
    CHECK_EQ(ls, 1);
    xtq__bootstrap_locality((const char(*)[XTQ__HOST_ID_MAX])hosts, 1, 0, &lr, &ls, &same);
    CHECK_EQ(lr, 0);
    CHECK_EQ(ls, 1);
    CHECK(same);
}

/* ---- the barrier polls the engine while it waits ------------------------ */

static _Atomic uint64_t polls;

static void count_poll(void *arg)
{
    atomic_fetch_add((_Atomic uint64_t *)arg, 1);
}

struct poll_run {
    struct rank_run run;
    bool late; /* enters the barrier only once the other has polled */
};

static void *poll_main(void *p)
{
    struct poll_run *pr = p;
    rank_main(&pr->run);
    if (pr->run.rc)
        return NULL;
    if (pr->late) {
        /* The early rank is inside the barrier: it must be polling. */
        while (atomic_load(&polls) < 100) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        pr->run.barrier_rc = xtq__bootstrap_barrier(pr->run.bs, NULL, NULL);
    } else {
        pr->run.barrier_rc = xtq__bootstrap_barrier(pr->run.bs, count_poll, &polls);
    }
    return NULL;
}

XTQ_TEST(barrier_polls_while_waiting)
{
    static struct oob_shm shm;
    struct poll_run pr[2];
    pthread_t th[2];

    oob_shm_init(&shm, 2);
    for (int r = 0; r < 2; r++) {
        memset(&pr[r], 0, sizeof(pr[r]));
        pr[r].run.me = (struct oob_shm_rank){&shm, r, 0};
        pr[r].late = r == 1;
        CHECK_EQ(pthread_create(&th[r], NULL, poll_main, &pr[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
        CHECK_EQ(pthread_join(th[r], NULL), 0);
        CHECK_OK(pr[r].run.rc);
        CHECK_OK(pr[r].run.barrier_rc);
        xtq__bootstrap_fini(pr[r].run.bs);
    }
    CHECK(atomic_load(&polls) >= 100);
}

/* ---- errors ---------------------------------------------------------------- */

static int fake_allgather(const void *s, void *r, size_t len, void *info, void **req)
{
    return 0;
}
static int fake_test(void *req)
{
    return 0;
}
static int fake_free(void *req)
{
    return 0;
}

XTQ_TEST(oob_invalid)
{
    xtq_oob_coll_t ok = {fake_allgather, fake_test, fake_free, NULL, 0, 1};
    struct xtq__bootstrap_attr attr = {.oob = NULL};
    struct xtq__bootstrap *bs = NULL;
    xtq_oob_coll_t c;

    attr.oob = &c;
    c = ok;
    c.allgather = NULL;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    c = ok;
    c.req_test = NULL;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    c = ok;
    c.req_free = NULL;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    c = ok;
    c.size = 0;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    c = ok;
    c.rank = 1;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    c = ok;
    c.rank = -1;
    CHECK_ERR(xtq__bootstrap_init(&attr, &bs), -XTQ_EINVAL);
    CHECK(bs == NULL);
    /* A one-rank OOB is fine (the fake allgather "gathers" nothing; one
     * rank's card is then zeros, which is still a valid card). */
    c = ok;
    CHECK_OK(xtq__bootstrap_init(&attr, &bs));
    CHECK_EQ(bs->rank, 0);
    CHECK_EQ(bs->size, 1);
    CHECK_OK(xtq__bootstrap_barrier(bs, NULL, NULL));
    xtq__bootstrap_fini(bs);
}

/* A collective that fails to start or fails while tested fails the
 * bootstrap on every rank, with every request freed. */
XTQ_TEST(oob_collective_fails)
{
    static struct oob_shm shm;
    struct rank_run runs[NR];
    pthread_t th[NR];

    for (int mode = 0; mode < 2; mode++) {
        oob_shm_init(&shm, NR);
        if (mode == 0)
            shm.fail_start_round = 0;
        else
            shm.fail_test_round = 0;
        for (int r = 0; r < NR; r++) {
            memset(&runs[r], 0, sizeof(runs[r]));
            runs[r].me = (struct oob_shm_rank){&shm, r, 0};
            CHECK_EQ(pthread_create(&th[r], NULL, rank_main, &runs[r]), 0);
        }
        for (int r = 0; r < NR; r++) {
            CHECK_EQ(pthread_join(th[r], NULL), 0);
            CHECK_ERR(runs[r].rc, -XTQ_EBOOTSTRAP);
            CHECK(runs[r].bs == NULL);
        }
        CHECK_EQ(oob_shm_reqs_live(&shm), 0);
    }
    /* A barrier whose collective fails reports it. */
    run_ranks(&shm, runs, NR, false, 0, 0, 0);
    shm.fail_test_round = (int64_t)runs[0].me.round;
    for (int r = 0; r < NR; r++) {
        CHECK_OK(runs[r].rc);
        CHECK_ERR(xtq__bootstrap_barrier(runs[r].bs, NULL, NULL), -XTQ_EBOOTSTRAP);
    }
    fini_ranks(runs, NR);
}
