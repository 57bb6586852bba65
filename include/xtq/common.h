/*
 * libxtq: Extended Task Queuing.
 * Common definitions shared by every public header: export macro, version,
 * opaque handle types.
 */
#ifndef XTQ_COMMON_H
#define XTQ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define XTQ_EXTERN_C_BEGIN extern "C" {
#define XTQ_EXTERN_C_END }
#else
#define XTQ_EXTERN_C_BEGIN
#define XTQ_EXTERN_C_END
#endif

#if defined(XTQ_BUILDING_LIBRARY)
#define XTQ_API __attribute__((visibility("default")))
#else
#define XTQ_API
#endif

#define XTQ_VERSION_MAJOR 0
#define XTQ_VERSION_MINOR 1
#define XTQ_VERSION_PATCH 0
#define XTQ_VERSION_STRING "0.1.0"

/** Wait forever in the `timeout_ns` argument of the wait functions. */
#define XTQ_TIMEOUT_INFINITE INT64_MAX

XTQ_EXTERN_C_BEGIN

/** A process's XTQ context: transport, engine, agents and lookup tables. */
typedef struct xtq_ctx xtq_ctx_t;
/** A 64-bit HSA-style signal. */
typedef struct xtq_signal xtq_signal_t;
/** A compute agent (CPU, CUDA GPU, ROCr GPU). */
typedef struct xtq_agent xtq_agent_t;
/** An HSA-style user-mode queue of 64-byte AQL packets. */
typedef struct xtq_queue xtq_queue_t;
/** A kernel object: what a kernel-dispatch packet runs. */
typedef struct xtq_kernel xtq_kernel_t;
/** A function object: what an agent-dispatch packet calls. */
typedef struct xtq_function xtq_function_t;

/** Library version as "major.minor.patch". */
XTQ_API const char *xtq_version(void);

XTQ_EXTERN_C_END

#endif /* XTQ_COMMON_H */
