/*
 * libxtq: Extended Task Queuing. Active messages that launch tasks on
 * remote GPUs and CPUs without the target CPU in the path.
 *
 * This umbrella header includes one header per concept.
 */
#ifndef XTQ_XTQ_H
#define XTQ_XTQ_H

#include <xtq/common.h>
#include <xtq/error.h>
#include <xtq/aql.h>
#include <xtq/signal.h>
#include <xtq/agent.h>
#include <xtq/queue.h>
#include <xtq/kernel.h>
#include <xtq/registry.h>
#include <xtq/context.h>
#include <xtq/counter.h>
#include <xtq/put.h>
#include <xtq/reduce.h>
#include <xtq/param.h>
#include <xtq/cuda.h>
#include <xtq/rocr.h>

#endif /* XTQ_XTQ_H */
