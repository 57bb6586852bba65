/* Time, futex and spin-policy helpers. */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t xtq__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xtq__deadline_ns(uint64_t ns)
{
    uint64_t now = xtq__now_ns();
    return ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
}

int xtq__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns != XTQ_TIMEOUT_INFINITE) {
        if (timeout_ns < 0)
            timeout_ns = 0;
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tsp = &ts;
    }
    long rc = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0);
    if (rc == 0)
        return 0;
    if (errno == ETIMEDOUT)
        return -XTQ_ETIMEDOUT;
    return 0; /* EAGAIN (value changed) or EINTR: caller re-checks */
}

void xtq__futex_wake(_Atomic uint32_t *addr, int count)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, count < 0 ? INT_MAX : count, NULL,
            NULL, 0);
}

/* Cores this process may use by itself: its affinity mask when the
 * launcher bound it, else the host's cores shared by the ranks on it. */
unsigned xtq__cores_per_rank(unsigned local_ranks)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned avail = online > 0 ? (unsigned)online : 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        unsigned mine = (unsigned)CPU_COUNT(&set);
        if (mine > 0 && mine < avail)
            return mine; /* bound: these cores are ours */
    }
    if (local_ranks > 1)
        avail /= local_ranks;
    return avail ? avail : 1;
}

/*
 * Spinning before sleeping saves a wake-up (several microseconds) per hand-off
 * between threads, but only where the spinner does not take the core the
 * thread it waits for needs. "auto" (-1) spins `roomy_us` when each rank has
 * XTQ__SPIN_MIN_CORES cores (application thread, progress thread, a busy
 * agent worker), else `tight_us`.
 */
uint64_t xtq__spin_ns(enum xtq__param_id id, unsigned local_ranks, int64_t roomy_us,
                      int64_t tight_us)
{
    int64_t us = xtq__param_int(id);
    if (us < 0)
        us = xtq__cores_per_rank(local_ranks) >= XTQ__SPIN_MIN_CORES ? roomy_us : tight_us;
    return xtq__mul_sat((uint64_t)us, 1000u);
}

/* ---- spin, then sleep ------------------------------------------------- */

bool xtq__spin_until(bool (*ready)(void *arg), void *arg, uint64_t spin_ns)
{
    if (ready(arg))
        return true;
    if (!spin_ns)
        return false;
    uint64_t end = xtq__deadline_ns(spin_ns);
    for (unsigned i = 1;; i++) {
        /* No yield: spins are on only where each thread has a core
         * (sched_yield costs ~0.5 us in a virtual machine). */
        xtq__cpu_relax();
        if (ready(arg))
            return true;
        if ((i & 63) == 0 && xtq__now_ns() >= end)
            return false;
    }
}

int xtq__spin_wait(const struct xtq__spin_wait *w, uint64_t deadline)
{
    uint64_t now = xtq__now_ns();
    uint64_t spin = w->spin_ns;
    int rc = -XTQ_ETIMEDOUT;

    if (deadline <= now)
        spin = 0;
    else if (deadline - now < spin)
        spin = deadline - now;
    if (xtq__spin_until(w->ready, w->arg, spin))
        return 0;
    /* Past the deadline already: not worth announcing a sleeper (the
     * waker would pay for a wake-up nobody waits for). */
    if (xtq__now_ns() >= deadline)
        return -XTQ_ETIMEDOUT;
    if (w->enlist)
        w->enlist(w->arg);
    else if (w->waiters)
        atomic_fetch_add_explicit(w->waiters, 1, memory_order_seq_cst);
    for (bool slept = false;; slept = true) {
        /* The value the sleep compares against is read before the last
         * check: a change after the check makes the futex return at once. */
        uint32_t v = w->sleeper_bit
                         ? atomic_fetch_or_explicit(w->word, w->sleeper_bit, memory_order_acq_rel) |
                               w->sleeper_bit
                         : atomic_load_explicit(w->word, memory_order_seq_cst);
        if (w->ready(w->arg)) {
            rc = slept ? 1 : 0;
            break;
        }
        now = xtq__now_ns();
        if (now >= deadline)
            break;
        int64_t nap = deadline == UINT64_MAX || deadline - now > (uint64_t)INT64_MAX
                          ? XTQ_TIMEOUT_INFINITE
                          : (int64_t)(deadline - now);
        if (w->nap_ns != XTQ_TIMEOUT_INFINITE && (nap == XTQ_TIMEOUT_INFINITE || nap > w->nap_ns))
            nap = w->nap_ns;
        (void)xtq__futex_wait(w->word, v, nap);
    }
    if (w->delist)
        w->delist(w->arg);
    else if (w->waiters)
        atomic_fetch_sub_explicit(w->waiters, 1, memory_order_relaxed);
    return rc;
}

/*
 * Locks on the data path (the transport, the put window, the live-task
 * list) are held for well under a microsecond, while a plain mutex puts a
 * contender to sleep at once and makes it pay a futex wake-up (seen: ~15 us
 * on a virtual 16-core host) whenever the progress thread meets an agent
 * worker or the application there. Two ways to avoid it, chosen with
 * XTQ_MUTEX: "spin", contenders poll first and sleep only after
 * xtq__lock_spin_ns (set from the spin policy at init: on only where each
 * thread has a core; on an oversubscribed host the holder may need the
 * contender's core, so they sleep at once); or "adaptive", glibc's
 * PTHREAD_MUTEX_ADAPTIVE_NP, which polls a bounded number of times (about
 * 100 tries, glibc.pthread.mutex_spin_count) whatever the core count.
 */
_Atomic uint64_t xtq__lock_spin_ns;
static _Atomic bool mutex_adaptive;

void xtq__mutex_configure(uint64_t spin_ns)
{
    const char *kind = xtq__param_string(XTQ__PARAM_XTQ_MUTEX);
    bool adaptive = strcmp(kind, "adaptive") == 0;
    if (!adaptive && strcmp(kind, "spin") != 0)
        xtq_warn(CORE, "XTQ_MUTEX=%s is neither spin nor adaptive; using spin", kind);
    atomic_store(&mutex_adaptive, adaptive);
    xtq_dbg(CORE, "data-path locks: %s", adaptive ? "glibc adaptive" : "spin, then sleep");
    /* The adaptive mutex spins by itself: no second spin around it. */
    atomic_store(&xtq__lock_spin_ns, adaptive ? 0 : spin_ns);
}

void xtq__mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (atomic_load(&mutex_adaptive))
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
}

static bool mutex_taken(void *m)
{
    return pthread_mutex_trylock(m) == 0;
}

void xtq__mutex_lock(pthread_mutex_t *m)
{
    uint64_t spin = atomic_load_explicit(&xtq__lock_spin_ns, memory_order_relaxed);
    if (spin && xtq__spin_until(mutex_taken, m, spin))
        return;
    pthread_mutex_lock(m);
}
