/*
 * Out-of-band bootstrap without a launcher or MPI: the runner forks N
 * ranks that meet in a shared-memory allgather (tests/harness/
 * xtq_oob_shm.h), each calls xtq_init() with XTQ_INIT_ATTR_FIELD_OOB and
 * runs the OOB workload (oob_workload.h: puts between ranks, barriers
 * that must keep a manual engine turning, finalize). PMIx variables are
 * removed from the children's environment, so only the OOB can work.
 * Also: the init attributes' field mask (singleton).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xtq/xtq.h>

#include "oob_workload.h"
#include "xtq_oob_shm.h"
#include "xtq_test.h"

struct job {
    struct oob_shm *shm;
    int size;
    bool manual;
    bool keyed; /* all ranks given one job key */
    uint64_t key;
    pid_t pids[OOB_SHM_MAX_RANKS];
};

static void rank_main(struct job *j, int rank)
{
    struct oob_shm_rank me = {j->shm, rank, 0};
    xtq_init_attr_t attr;
    xtq_ctx_t *ctx = NULL;

    /* A hung rank must not outlive the test. */
    alarm(240);
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_INIT_ATTR_FIELD_OOB | XTQ_INIT_ATTR_FIELD_PROGRESS;
    attr.oob = oob_shm_coll(&me);
    attr.progress = j->manual ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_THREAD;
    if (j->keyed) {
        attr.field_mask |= XTQ_INIT_ATTR_FIELD_JOB_KEY;
        attr.job_key = j->key;
    }
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_EQ(xtq_rank(ctx), rank);
    CHECK_EQ(xtq_size(ctx), j->size);
    oob_workload(ctx);
    CHECK_OK(xtq_finalize(ctx));
    /* Every request the library started on this rank, it freed. */
    CHECK_EQ(atomic_load(&j->shm->reqs_live[rank]), 0);
    exit(0);
}

static void job_start(struct job *j, int size, bool manual, bool keyed, uint64_t key)
{
    CHECK(size <= OOB_SHM_MAX_RANKS);
    j->shm = mmap(NULL, sizeof(*j->shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(j->shm != MAP_FAILED);
    oob_shm_init(j->shm, size);
    j->size = size;
    j->manual = manual;
    j->keyed = keyed;
    j->key = key;
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < size; r++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            rank_main(j, r);
        j->pids[r] = pid;
    }
}

/* Wait for every rank; one that fails takes its job down (the others
 * would wait for it in a collective). Returns the number that failed. */
static int job_wait(struct job *j)
{
    int failed = 0, left = j->size;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0 && errno == EINTR)
            continue;
        CHECK(pid > 0);
        int r = -1;
        for (int i = 0; i < j->size; i++)
            if (j->pids[i] == pid)
                r = i;
        if (r < 0)
            continue; /* a rank of another job (two_jobs_one_key) */
        j->pids[r] = 0;
        left--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (%s %d)\n", r, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            failed++;
            for (int i = 0; i < j->size; i++)
                if (j->pids[i] > 0)
                    kill(j->pids[i], SIGKILL);
        }
    }
    munmap(j->shm, sizeof(*j->shm));
    return failed;
}

static int ranks_arg(int def)
{
    return xtq_test_argc > 0 ? atoi(xtq_test_argv[0]) : def;
}

XTQ_TEST(fork_thread)
{
    struct job j;
    job_start(&j, ranks_arg(3), false, false, 0);
    CHECK_EQ(job_wait(&j), 0);
}

/* Manual progress: the barriers must poll the engine (workload step 2). */
XTQ_TEST(fork_manual)
{
    struct job j;
    job_start(&j, ranks_arg(3), true, false, 0);
    CHECK_EQ(job_wait(&j), 0);
}

/* Two jobs at once on one host, given the same job key: each works as if
 * alone (per-context names, no cross-talk). */
XTQ_TEST(two_jobs_one_key)
{
    struct job a, b;
    job_start(&a, 2, false, true, 0x5a5a);
    job_start(&b, 2, false, true, 0x5a5a);
    int fa = 0, fb = 0;
    /* Reap in any order: job_wait ignores the other job's pids. */
    pid_t all[4] = {a.pids[0], a.pids[1], b.pids[0], b.pids[1]};
    for (int n = 0; n < 4; n++) {
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0 && errno == EINTR) {
            n--;
            continue;
        }
        CHECK(pid > 0);
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok) {
            fprintf(stderr, "rank pid %d failed\n", (int)pid);
            for (int i = 0; i < 4; i++)
                if (all[i] != pid)
                    kill(all[i], SIGKILL);
        }
        if (pid == a.pids[0] || pid == a.pids[1])
            fa += !ok;
        else
            fb += !ok;
    }
    munmap(a.shm, sizeof(*a.shm));
    munmap(b.shm, sizeof(*b.shm));
    CHECK_EQ(fa, 0);
    CHECK_EQ(fb, 0);
}

/* ---- init attributes (one process, no launcher) --------------------------- */

XTQ_TEST(init_attr_mask)
{
    xtq_init_attr_t attr;
    xtq_ctx_t *ctx = NULL;

    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    /* Bits this library does not know are refused. */
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = 1ull << 40;
    CHECK_ERR(xtq_init(&attr, &ctx), -XTQ_EINVAL);
    CHECK(ctx == NULL);
    /* Fields outside the mask are not read: garbage there is harmless. */
    memset(&attr, 0xa5, sizeof(attr));
    attr.field_mask = 0;
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_EQ(xtq_size(ctx), 1);
    CHECK_OK(xtq_finalize(ctx));
    /* Named fields are read and checked. */
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS;
    attr.progress = (enum xtq_progress_mode)7;
    CHECK_ERR(xtq_init(&attr, &ctx), -XTQ_EINVAL);
    attr.field_mask = XTQ_INIT_ATTR_FIELD_PROVIDER;
    attr.provider = "no-such-provider";
    CHECK(xtq_init(&attr, &ctx) != 0);
    attr.field_mask = XTQ_INIT_ATTR_FIELD_OOB;
    memset(&attr.oob, 0, sizeof(attr.oob));
    CHECK_ERR(xtq_init(&attr, &ctx), -XTQ_EINVAL);
    /* A job key given alone (no OOB, no launcher). */
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = XTQ_INIT_ATTR_FIELD_JOB_KEY | XTQ_INIT_ATTR_FIELD_PROGRESS;
    attr.job_key = 0x1234;
    attr.progress = XTQ_PROGRESS_MANUAL;
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_finalize(ctx));
}
