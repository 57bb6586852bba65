/*
 * Kernel and function objects: the generic accessors. Each agent kind
 * creates its own objects (xtq_kernel_create_cpu lives with the CPU agent)
 * and frees them through its operations table. Also the running CPU
 * task's result buffer, payload and status (xtq_task_result,
 * xtq_task_payload, xtq_task_fail).
 */
#include "internal.h"
#include "nic-emul/engine.h"

#include <unistd.h>

/*
 * Take the kernel's last reference. A GPU task can be DONE for its
 * initiator before it retires here: on one host the device stores the
 * initiator's completion word itself (nic-emul/notify.c), and the retire
 * that drops the task's reference follows within microseconds. A destroy
 * the application orders after that completion must not be refused for
 * it: while tasks are in flight, finished ones are retired (for up to
 * 2 ms) before a refusal stands.
 */
static int kernel_kill(xtq_kernel_t *kernel)
{
    int rc = xtq__refs_kill(&kernel->refs);
    xtq_ctx_t *ctx = kernel->agent->ctx;
    for (int i = 0; rc && ctx && i < 20 && xtq__ctx_tasks_inflight(ctx); i++) {
        (void)xtq__agents_retire_poll(ctx);
        usleep(100);
        rc = xtq__refs_kill(&kernel->refs);
    }
    return rc;
}

int xtq_kernel_destroy(xtq_kernel_t *kernel)
{
    int rc;

    if (kernel == NULL || kernel->agent == NULL)
        return -XTQ_EINVAL;
    /* Registered, or named by a queued task: freeing it now would let its
     * pool slot be reused under the table entry or the task. */
    rc = kernel_kill(kernel);
    if (rc) {
        xtq_dbg(CORE, "kernel %p destroy refused: %u registrations or tasks name it",
                (void *)kernel, atomic_load(&kernel->refs) & ~XTQ__REFS_DEAD);
        return rc;
    }
    rc = kernel->agent->ops->kernel_destroy(kernel);
    if (rc)
        xtq__refs_revive(&kernel->refs);
    return rc;
}

uint64_t xtq_kernel_object(const xtq_kernel_t *kernel)
{
    return kernel->object;
}

uint32_t xtq_kernel_kernarg_size(const xtq_kernel_t *kernel)
{
    return kernel->kernarg_size;
}

xtq_agent_t *xtq_kernel_agent(const xtq_kernel_t *kernel)
{
    return kernel->agent;
}

int xtq_function_destroy(xtq_function_t *function)
{
    int rc;

    if (function == NULL || function->agent == NULL)
        return -XTQ_EINVAL;
    rc = xtq__refs_kill(&function->refs);
    if (rc) {
        xtq_dbg(CORE, "function %p destroy refused: %u registrations or tasks name it",
                (void *)function, atomic_load(&function->refs) & ~XTQ__REFS_DEAD);
        return rc;
    }
    rc = function->agent->ops->function_destroy(function);
    if (rc)
        xtq__refs_revive(&function->refs);
    return rc;
}

uint64_t xtq_function_object(const xtq_function_t *function)
{
    return function->object;
}

/* The task this thread runs (CPU agent workers), or NULL. */
static __thread struct xtq__task_state *current_task;

struct xtq__task_state *xtq__task_enter(struct xtq__task_state *st)
{
    struct xtq__task_state *prev = current_task;
    current_task = st;
    return prev;
}

void xtq__task_leave(struct xtq__task_state *prev)
{
    current_task = prev;
}

void *xtq_task_result(size_t *len)
{
    struct xtq__task_state *st = current_task;
    void *buf = st && st->result_len ? st->result : NULL;

    if (len)
        *len = buf ? st->result_len : 0;
    return buf;
}

const void *xtq_task_payload(size_t *len)
{
    struct xtq__task_state *st = current_task;
    const void *p = st && st->payload_len ? st->payload : NULL;

    if (len)
        *len = p ? st->payload_len : 0;
    return p;
}

void xtq_task_fail(int status)
{
    struct xtq__task_state *st = current_task;

    if (!st || status == 0)
        return;
    /* Either sign, as xtq_strerror takes it; the first failure wins. */
    if (st->status == 0)
        st->status = status < 0 ? status : -status;
}
