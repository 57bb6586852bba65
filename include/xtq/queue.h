/*
 * User-mode queues with HSA semantics: a power-of-two ring of 64-byte AQL
 * slots, 64-bit monotonically increasing write and read indices, an INVALID
 * header marking a free slot and a doorbell. Producers reserve a slot,
 * write the packet body, publish the header with release order, then ring
 * the doorbell. "Full" is always defined: reservation fails instead of
 * overwriting.
 */
#ifndef XTQ_QUEUE_H
#define XTQ_QUEUE_H

#include <xtq/common.h>
#include <xtq/aql.h>

XTQ_EXTERN_C_BEGIN

/**
 * Create a queue of `size` packets (power of two, >= 2) on an agent.
 * @return 0, -XTQ_EINVAL (size), -XTQ_ENOMEM, or the agent's error.
 */
XTQ_API int xtq_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue);

/**
 * Destroy a queue. Packets not yet processed are abandoned; unregister it
 * first if it is registered. Returns -XTQ_EBUSY if it is still registered.
 */
XTQ_API int xtq_queue_destroy(xtq_queue_t *queue);

/** Number of slots. */
XTQ_API uint32_t xtq_queue_size(const xtq_queue_t *queue);

/** The agent the queue belongs to. */
XTQ_API xtq_agent_t *xtq_queue_agent(const xtq_queue_t *queue);

/** Current write index (acquire). */
XTQ_API uint64_t xtq_queue_load_write_index(const xtq_queue_t *queue);

/** Current read index (acquire): packets below it have been taken by the agent. */
XTQ_API uint64_t xtq_queue_load_read_index(const xtq_queue_t *queue);

/**
 * Reserve `count` consecutive slots. Safe with several producers.
 * @param index receives the first reserved index.
 * @return 0, or -XTQ_EAGAIN when fewer than `count` slots are free.
 */
XTQ_API int xtq_queue_reserve(xtq_queue_t *queue, uint32_t count, uint64_t *index);

/** The slot for a packet index (valid after a successful reserve). */
XTQ_API xtq_aql_packet_t *xtq_queue_slot(xtq_queue_t *queue, uint64_t index);

/**
 * Publish a slot whose body (bytes 4..63) is written: store header and the
 * following 16-bit field (setup / type / reserved) together, release order.
 */
XTQ_API void xtq_queue_publish(xtq_queue_t *queue, uint64_t index, uint16_t header,
                               uint16_t rest);

/** Ring the doorbell with the index of the last published packet. */
XTQ_API void xtq_queue_ring_doorbell(xtq_queue_t *queue, uint64_t index);

/**
 * Reserve, copy, publish and ring for one packet.
 * @param timeout_ns 0 returns -XTQ_EAGAIN at once if the queue is full;
 *        otherwise waits for space up to the timeout (-XTQ_ETIMEDOUT).
 * @param index if not NULL, receives the packet's index.
 */
XTQ_API int xtq_queue_submit(xtq_queue_t *queue, const xtq_aql_packet_t *packet, int64_t timeout_ns,
                             uint64_t *index);

/**
 * xtq_queue_submit for a kernel dispatch whose arguments, and the payload
 * they point at, the agent may carry with the packet: the engine's enqueue
 * for a task submitted locally.
 *
 * The arguments are the `kernarg_len` bytes at packet->kernel.kernarg_address;
 * the payload is `payload_len` bytes at the address in argument 1 (bytes
 * 8..15 of the arguments; `kernarg_len` >= 16), 0 for none. The CUDA agent
 * copies arguments and a payload of up to XTQ_CUDA_INLINE_MAX bytes into
 * the queue slot, so that its processor reads the task in one PCIe round
 * trip instead of three (argument 1 then points at its copy); the CPU agent
 * hands the task its payload (xtq_task_payload). Both memories must stay
 * valid until the packet completes either way: an agent, or a packet too
 * large for the slot, reads them in place.
 * @param timeout_ns as for xtq_queue_submit.
 * @return 0; -XTQ_EINVAL (NULL queue or packet, a packet that is not a
 *         kernel dispatch with arguments, a payload without argument 1,
 *         negative timeout); -XTQ_EAGAIN or -XTQ_ETIMEDOUT as for
 *         xtq_queue_submit; an agent's refusal (-XTQ_ENOSYS).
 */
XTQ_API int xtq_queue_submit_args(xtq_queue_t *queue, const xtq_aql_packet_t *packet,
                                  uint32_t kernarg_len, uint64_t payload_len, int64_t timeout_ns);

XTQ_EXTERN_C_END

#endif /* XTQ_QUEUE_H */
