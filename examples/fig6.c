/*
 * The paper's Fig. 6 on the public API. Rank 0 (the initiator) builds a
 * command naming kernel index 42 and queue index 42 and sends it with a
 * payload to every other rank; each target registered a CPU kernel and a
 * queue at those indices, then only waits on its completion signal: the
 * engine enqueued the task, the CPU agent ran it, nobody on the target
 * touched the message. Run alone, rank 0 sends to itself.
 *
 *   mpirun -np 4 ./fig6
 */
#include <xtq/xtq.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define KERNEL_INDEX 42
#define QUEUE_INDEX 42
#define COUNT 16

/* Kernel arguments: 0 and 1 are filled in by the target's engine. */
struct sum_args {
    double *result;         /* the registered target buffer */
    const double *payload;  /* where the payload landed */
    uint64_t count;
    double scale;
};

/* The task: result = scale * sum(payload). */
static void sum_kernel(const xtq_dispatch_t *dispatch, void *kernarg)
{
    const struct sum_args *a = kernarg;
    double s = 0;
    (void)dispatch;
    for (uint64_t i = 0; i < a->count; i++)
        s += a->payload[i];
    a->result[0] = a->scale * s;
    a->result[1] = (double)a->count;
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_) {                                                                         \
            fprintf(stderr, "%s failed: %s\n", #call, xtq_strerror(rc_));                  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

int main(void)
{
    xtq_ctx_t *ctx;
    TRY(xtq_init(NULL, &ctx));
    int rank = xtq_rank(ctx), size = xtq_size(ctx);
    bool is_target = rank > 0 || size == 1;
    if (rank == 0)
        printf("fig6: %d rank(s), provider %s\n", size, xtq_provider_name(ctx));

    /* Target side: queue, kernel, completion signal, registrations. */
    xtq_agent_t *cpu = NULL;
    xtq_queue_t *queue = NULL;
    xtq_kernel_t *kernel = NULL;
    xtq_signal_t *done = NULL;
    double result[2] = {0, 0};
    if (is_target) {
        TRY(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
        TRY(xtq_queue_create(cpu, 64, &queue));
        TRY(xtq_kernel_create_cpu(cpu, sum_kernel, sizeof(struct sum_args), NULL, &kernel));
        TRY(xtq_signal_create(1, &done));
        TRY(xtq_register_kernel(ctx, KERNEL_INDEX, kernel, result, done));
        TRY(xtq_register_queue(ctx, QUEUE_INDEX, queue));
    }

    /* Initiator side: the command and the payload, built before the barrier. */
    double payload[COUNT];
    uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(struct sum_args)];
    size_t cmd_len = 0;
    if (rank == 0) {
        struct sum_args args = {NULL, NULL, COUNT, 0.5};
        for (int i = 0; i < COUNT; i++)
            payload[i] = i + 1;
        TRY(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &args,
                           sizeof(args), &cmd_len));
    }

    TRY(xtq_barrier(ctx)); /* every target has registered */

    if (rank == 0) {
        for (int t = size > 1 ? 1 : 0; t < size; t++) {
            xtq_completion_t comp = {0};
            TRY(xtq_put(ctx, t, cmd, cmd_len, payload, sizeof(payload),
                        XTQ_PUT_REMOTE_COMPLETION, &comp));
            int st = xtq_completion_wait(ctx, &comp, XTQ_TIMEOUT_INFINITE);
            printf("rank 0: XtqPut to rank %d (kernel 42, queue 42, %zu-byte payload): %s, "
                   "remote completion %s\n",
                   t, sizeof(payload), st ? xtq_strerror(st) : "ok",
                   (comp.state & XTQ_COMPLETION_REMOTE) ? "received" : "missing");
            fflush(stdout);
        }
    }
    if (is_target) {
        /* The target's application thread does nothing but wait. */
        TRY(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
        printf("rank %d: task ran on the CPU agent: 0.5 * sum(1..%d) = %.1f (expected %.1f), "
               "%s\n",
               rank, (int)result[1], result[0], 0.5 * COUNT * (COUNT + 1) / 2,
               result[0] == 0.5 * COUNT * (COUNT + 1) / 2 ? "OK" : "WRONG");
        fflush(stdout);
    }

    TRY(xtq_barrier(ctx));
    if (is_target) {
        TRY(xtq_unregister_kernel(ctx, KERNEL_INDEX));
        TRY(xtq_unregister_queue(ctx, QUEUE_INDEX));
        TRY(xtq_queue_destroy(queue));
        TRY(xtq_kernel_destroy(kernel));
        TRY(xtq_signal_destroy(done));
    }
    TRY(xtq_finalize(ctx));
    return 0;
}
