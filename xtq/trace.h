/*
 * Stage tracing for the remote-task data path (paper Fig. 7).
 *
 * XTQ_TRACE=csv:PATH or chrome:PATH turns it on; off by default. When off a
 * trace point costs one relaxed load of a global flag. When on, each thread
 * appends (stage, key, ns) to its own ring (no locks, no allocation after the
 * first record); the rings are written at process exit. `key` names one task
 * across processes: the initiator rank in the top 16 bits, the put's
 * per-target sequence number below (XTQ_TRACE_KEY()).
 */
#ifndef XTQ_TRACE_H
#define XTQ_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

/* X(id, name): in data-path order. */
#define XTQ__TRACE_STAGE_LIST(X)                                                           \
    X(PUT_ISSUED, "put_issued")                                                             \
    X(MSG_SENT, "msg_sent")                                                                 \
    X(ENGINE_RECV, "engine_recv")                                                           \
    X(ENQUEUED, "enqueued")                                                                 \
    X(DOORBELL, "doorbell")                                                                 \
    X(TASK_START, "task_start")                                                             \
    X(TASK_END, "task_end")                                                                 \
    X(COMPLETION, "completion")

#define XTQ__TRACE_ENUM_(id, name) XTQ_TRACE_##id,
enum xtq__trace_stage { XTQ__TRACE_STAGE_LIST(XTQ__TRACE_ENUM_) XTQ_TRACE_STAGE_COUNT };
#undef XTQ__TRACE_ENUM_

/* Task key: initiator rank and the put's sequence number. */
#define XTQ_TRACE_KEY(rank, seq) (((uint64_t)(uint16_t)(rank) << 48) | ((uint64_t)(seq) & 0xffffffffffffull))

extern atomic_int xtq__trace_enabled;

/* Append one record to the calling thread's ring (tracing is on). */
void xtq__trace_record(enum xtq__trace_stage stage, uint64_t key);
/* Stage name ("put_issued"), or "?" */
const char *xtq__trace_stage_name(enum xtq__trace_stage stage);
/* Write the rings now (also done at exit); returns 0 or -XTQ_EIO. */
int xtq__trace_flush(void);

#define XTQ_TRACE_POINT(stage, key)                                                        \
    do {                                                                                    \
        if (__builtin_expect(atomic_load_explicit(&xtq__trace_enabled, memory_order_relaxed), 0)) \
            xtq__trace_record((stage), (uint64_t)(key));                                   \
    } while (0)

#endif /* XTQ_TRACE_H */
