/* Time and futex helpers. */
#include "internal.h"

#include <errno.h>
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
