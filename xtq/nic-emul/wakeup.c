/*
 * Wake-ups: how a sleeping progress thread learns that there is work.
 *
 * A thread that queues work for the engine (an ack from an agent worker, a
 * put, a retired task that frees queue space) calls xtq__engine_wake(); a
 * sender that wrote to another rank rings that rank's doorbell. The
 * progress thread sleeps in xtq__progress_block() on what can wake it: the
 * CQ's wait fd plus an eventfd, or, for providers whose CQ has no wait fd
 * (shm in libfabric 1.17), a doorbell per rank in POSIX shared memory, as a
 * NIC's doorbell would be. Idle, the thread sleeps for real.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"
#include "bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static long shared_futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* A message went to `dest`: wake its progress thread if it sleeps. */
void xtq__bell_ring(struct xtq__engine *e, int dest)
{
    if (!e->bells)
        return;
    struct doorbell *b = e->bells[dest];
    /* Pairs with xtq__progress_block(): our send's stores before its load
     * of `sleeping`, its store of `sleeping` before its CQ read. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleeping, memory_order_relaxed)) {
        atomic_fetch_add(&b->seq, 1);
        /* Every sleeper: the progress thread, and a lone waiter
         * (initiator.c) that sleeps on the transport beside it. */
        shared_futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
    }
}

void *xtq__shm_create(const struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX], const char *tag,
                      size_t len)
{
    static _Atomic uint32_t made;
    xtq_ctx_t *ctx = e->ctx;
    snprintf(name, XTQ__BELL_NAME_MAX, "/xtq-%016llx-%d-%ld-%u-%s",
             (unsigned long long)ctx->job_key, ctx->rank, (long)getpid(),
             (unsigned)atomic_fetch_add(&made, 1), tag);
    /* O_EXCL: a name is never shared; one that exists already was left by
     * a dead process that had our pid. */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST && shm_unlink(name) == 0)
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (p == MAP_FAILED) {
        if (fd >= 0)
            shm_unlink(name);
        name[0] = '\0';
        errno = err;
        return NULL;
    }
    return p; /* ftruncate zeroed it */
}

void *xtq__shm_map(const char *name, int prot, size_t min, size_t *len)
{
    int fd = shm_open(name, (prot & PROT_WRITE) ? O_RDWR : O_RDONLY, 0);
    if (fd < 0)
        return NULL;
    struct stat sb;
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size >= min)
        p = mmap(NULL, (size_t)sb.st_size, prot, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    *len = (size_t)sb.st_size;
    return p;
}

int xtq__shm_peers_map(struct xtq__engine *e, struct shm_peers *t, const char *names,
                       size_t stride, void *own,
                       void *(*map)(const char *name, int r, int nranks, size_t *len))
{
    const int n = e->ctx->size;
    t->seg = calloc((size_t)n, sizeof(*t->seg));
    t->len = calloc((size_t)n, sizeof(*t->len));
    if (!t->seg || !t->len) {
        free(t->seg);
        free(t->len);
        t->seg = NULL;
        t->len = NULL;
        return -1;
    }
    int mapped = 0;
    for (int r = 0; r < n; r++) {
        const char *name = names + (size_t)r * stride;
        if (!name[0] || memchr(name, '\0', XTQ__BELL_NAME_MAX) == NULL)
            continue;
        t->seg[r] = r == e->ctx->rank ? own : map(name, r, n, &t->len[r]);
        mapped += t->seg[r] != NULL;
    }
    return mapped;
}

void xtq__shm_peers_unmap(struct xtq__engine *e, struct shm_peers *t, const void *own)
{
    for (int r = 0; t->seg && r < e->ctx->size; r++)
        if (t->seg[r] && t->seg[r] != own)
            munmap(t->seg[r], t->len[r]);
    free(t->seg);
    free(t->len);
    t->seg = NULL;
    t->len = NULL;
}

void xtq__shm_unmap(struct xtq__engine *e, void *p, size_t len, bool agents)
{
    if (p == NULL)
        return;
    if (agents)
        xtq__agents_mem_deregister(e->ctx, p, len);
    munmap(p, len);
}

/* Our doorbell's name leaves /dev/shm as soon as every peer has mapped it
 * (xtq__wakeup_connect), else here: no exit path leaves it behind. */
static void bell_unlink(struct xtq__engine *e)
{
    if (e->bell_name[0]) {
        shm_unlink(e->bell_name);
        e->bell_name[0] = '\0';
    }
}

static void bells_close(struct xtq__engine *e)
{
    bell_unlink(e);
    if (!e->bells)
        return;
    for (int r = 0; r < e->ctx->size; r++)
        if (e->bells[r])
            munmap(e->bells[r], sizeof(struct doorbell));
    free(e->bells);
    e->bells = NULL;
}

static int bell_map(const char *name, bool create, struct doorbell **out)
{
    /* O_EXCL: a name is never shared, whoever else runs on the host. One
     * that exists already was left by a dead process that had our pid. */
    int fd = shm_open(name, create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
    if (fd < 0 && create && errno == EEXIST && shm_unlink(name) == 0)
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return -XTQ_ENOENT;
    if (create && ftruncate(fd, sizeof(struct doorbell)) != 0) {
        close(fd);
        return -XTQ_ENOMEM;
    }
    void *p = mmap(NULL, sizeof(struct doorbell), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -XTQ_ENOMEM;
    *out = p;
    return 0;
}

/*
 * Create ours before the address exchange, which carries its name to the
 * peers; map theirs after. The name is unique on the host whoever else
 * runs there (two contexts of one process, two jobs with one key): job
 * key, rank, process id and a count of the doorbells this process made.
 */
static int bells_create(struct xtq__engine *e)
{
    static _Atomic uint32_t made;
    xtq_ctx_t *ctx = e->ctx;
    e->bells = calloc((size_t)ctx->size, sizeof(*e->bells));
    if (!e->bells)
        return -XTQ_ENOMEM;
    snprintf(e->bell_name, sizeof(e->bell_name), "/xtq-%016llx-%d-%ld-%u",
             (unsigned long long)ctx->job_key, ctx->rank, (long)getpid(),
             (unsigned)atomic_fetch_add(&made, 1));
    int rc = bell_map(e->bell_name, true, &e->bells[ctx->rank]);
    if (rc) {
        e->bell_name[0] = '\0';
        free(e->bells);
        e->bells = NULL;
    }
    return rc;
}

static int bells_open_peers(struct xtq__engine *e, const char *names, size_t stride)
{
    xtq_ctx_t *ctx = e->ctx;
    for (int r = 0; r < ctx->size; r++) {
        const char *name = names + (size_t)r * stride;
        if (r == ctx->rank)
            continue;
        if (!name[0] || memchr(name, '\0', XTQ__BELL_NAME_MAX) == NULL ||
            bell_map(name, false, &e->bells[r]) != 0) {
            xtq_warn(ENGINE, "no doorbell for rank %d; the engine naps instead", r);
            bells_close(e);
            return -XTQ_ENOENT;
        }
    }
    return 0;
}

int xtq__wakeup_open(struct xtq__engine *e, bool same_host)
{
    /* Every rank takes part in the doorbell fence when the provider needs
     * doorbells at all, whether or not its own could be made. */
    e->bell_fence = e->ofi.wait_fd < 0 && same_host;
    if (e->bell_fence && !e->manual && bells_create(e) != 0)
        xtq_warn(ENGINE, "no shared-memory doorbell; the progress thread naps (1 ms)");
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->wake_fd < 0)
        return -XTQ_ENOMEM;
    return 0;
}

void xtq__wakeup_name(struct xtq__engine *e, char name[XTQ__BELL_NAME_MAX])
{
    snprintf(name, XTQ__BELL_NAME_MAX, "%s", e->bells ? e->bell_name : "");
}

int xtq__wakeup_connect(struct xtq__engine *e, const char *names, size_t stride)
{
    if (e->bells)
        bells_open_peers(e, names, stride);
    /* Every rank of a job on one host takes the fence (bell_fence implies
     * same_host): it also ends the completion words' names (notify.c). */
    if (!e->bell_fence && !e->same_host)
        return 0;
    /* Once every rank has mapped the doorbells it rings, no name is needed
     * any more: a process killed later leaves nothing in /dev/shm. */
    uint8_t one = 1, *all = calloc((size_t)e->ctx->size, 1);
    if (!all)
        return -XTQ_ENOMEM;
    char key[XTQ__KEY_MAX];
    xtq__engine_key(e, "xtq.bells", key);
    int rc = xtq__bootstrap_allgather(e->ctx->bootstrap, key, &one, 1, all);
    free(all);
    bell_unlink(e);
    return rc;
}

void xtq__wakeup_close(struct xtq__engine *e)
{
    bells_close(e);
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    e->wake_fd = -1;
}

/* Ask the progress thread for a turn. Paired with xtq__progress_block():
 * both sides store then load with seq_cst, so either the thread sees the
 * kick before it sleeps or the waker sees it sleeping and writes the
 * eventfd. */
void xtq__engine_wake(struct xtq__engine *e)
{
    atomic_store(&e->kick, 1);
    if (e->bells) {
        xtq__bell_ring(e, e->ctx->rank);
        return;
    }
    if (e->wake_fd >= 0 && atomic_load(&e->sleeping)) {
        uint64_t one = 1;
        ssize_t w = write(e->wake_fd, &one, sizeof(one));
        (void)w;
    }
}

void xtq__wakeup_interrupt(struct xtq__engine *e)
{
    uint64_t one = 1;
    atomic_fetch_add(&e->sleeping, 1); /* for good: every later kick writes */
    ssize_t w = write(e->wake_fd, &one, sizeof(one));
    (void)w;
    xtq__engine_wake(e);
}

/* Block until the CQ has something, a wake-up arrives, or a timeout. Two
 * threads may sleep here at once (the progress thread and a lone waiter,
 * initiator.c): `sleeping` counts them, and a wake-up wakes both. */
void xtq__progress_block(struct xtq__engine *e)
{
    struct pollfd fds[2];
    nfds_t nfds = 0;
    int timeout_ms;

    if (e->bells) {
        struct doorbell *b = e->bells[e->ctx->rank];
        atomic_fetch_add(&b->sleeping, 1);
        uint32_t v = atomic_load(&b->seq);
        /* Anything that arrived before `sleeping` was visible is seen here;
         * anything after rings the bell. */
        if (atomic_exchange(&e->kick, 0) || atomic_load(&e->acks_pending) ||
            atomic_load(&e->stop) || xtq__engine_progress(e) > 0) {
            atomic_fetch_sub(&b->sleeping, 1);
            return;
        }
        /* Transfers the provider finishes on its own (large shm sends) ring
         * no bell: while puts are in flight, nap briefly. */
        long ns = atomic_load(&e->puts_outstanding) ? 1000000L : 100000000L;
        struct timespec ts = {0, ns};
        /* A GPU's completions are the agent thread's to retire while we sleep. */
        xtq__agents_retire_release(e->ctx);
        shared_futex(&b->seq, FUTEX_WAIT, v, &ts);
        atomic_fetch_sub(&b->sleeping, 1);
        return;
    }
    fds[nfds].fd = e->wake_fd;
    fds[nfds++].events = POLLIN;
    atomic_fetch_add(&e->sleeping, 1);
    if (atomic_exchange(&e->kick, 0) || atomic_load(&e->acks_pending) || atomic_load(&e->stop)) {
        atomic_fetch_sub(&e->sleeping, 1);
        return;
    }
    if (xtq__ofi_trywait(&e->ofi) == 0) {
        fds[nfds].fd = e->ofi.wait_fd;
        fds[nfds++].events = POLLIN;
        /* The fd may not see sends that only the provider's progress
         * would advance; puts in flight keep the naps short. */
        timeout_ms = atomic_load(&e->puts_outstanding) ? 1 : 100;
    } else {
        timeout_ms = 1;
    }
    xtq__agents_retire_release(e->ctx);
    int rc = poll(fds, nfds, timeout_ms);
    atomic_fetch_sub_explicit(&e->sleeping, 1, memory_order_relaxed);
    if (rc > 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(e->wake_fd, &v, sizeof(v));
        (void)r;
    }
}
