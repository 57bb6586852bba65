/*
 * CPU agent internals shared with white-box tests.
 */
#ifndef XTQ_CPU_AGENT_H
#define XTQ_CPU_AGENT_H

#include "internal.h"

/* Open a CPU agent with `workers` threads (0: XTQ_CPU_WORKERS) outside any
 * context (agent->ctx is NULL). Close it with agent->ops->close(agent). */
int xtq__cpu_agent_open_standalone(unsigned workers, xtq_agent_t **agent);

/* Packets the agent could not run (invalid type, bad kernel or function
 * object, bad signal handle); each was retired with -XTQ_EPACKET. */
uint64_t xtq__cpu_agent_bad_packets(const xtq_agent_t *agent);

/* Packets the agent has finished (successfully or not). */
uint64_t xtq__cpu_agent_packets_done(const xtq_agent_t *agent);

/* Test hooks: hold or release a queue's take lock, as a worker taking a
 * packet or a thread checking for a short task does (lock: true, false);
 * and the scans of any agent that found a take lock held. */
void xtq__cpu_queue_hold_take(xtq_queue_t *queue, bool lock);
uint64_t xtq__cpu_take_busy(void);

#endif /* XTQ_CPU_AGENT_H */
