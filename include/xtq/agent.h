/*
 * Agents: the devices that run tasks. Each agent kind is a back-end behind
 * one operations table: CPU (software packet processor, always available),
 * CUDA (NVIDIA GPUs) and ROCr (AMD GPUs through the HSA runtime). A missing
 * runtime or device marks its kind unavailable, with the reason.
 */
#ifndef XTQ_AGENT_H
#define XTQ_AGENT_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

enum xtq_agent_kind {
    XTQ_AGENT_CPU = 0,
    XTQ_AGENT_CUDA = 1,
    XTQ_AGENT_ROCR = 2,
    XTQ_AGENT_KIND_COUNT
};

typedef struct xtq_agent_info {
    enum xtq_agent_kind kind;
    char name[64];           /**< e.g. "cpu0", "NVIDIA H100 80GB HBM3" */
    uint32_t device_index;   /**< index among agents of this kind */
    uint32_t workers;        /**< CPU: worker threads; GPU: SMs/CUs in use */
    uint32_t max_queue_size; /**< largest queue size accepted (packets) */
} xtq_agent_info_t;

/** Number of available agents of every kind. */
XTQ_API unsigned xtq_agent_count(xtq_ctx_t *ctx);

/** The `index`-th available agent (0 <= index < xtq_agent_count()). */
XTQ_API int xtq_agent_get(xtq_ctx_t *ctx, unsigned index, xtq_agent_t **agent);

/** The first available agent of `kind`; -XTQ_ENOAGENT if none. */
XTQ_API int xtq_agent_find(xtq_ctx_t *ctx, enum xtq_agent_kind kind, xtq_agent_t **agent);

/**
 * The available agent of `kind` whose device_index is `device_index` (for
 * CUDA: the CUDA device ordinal, as cudaSetDevice takes it). A process that
 * drives one GPU of several finds that GPU's agent this way; tasks for its
 * memory must run there (another GPU's processor cannot read it without
 * peer access). -XTQ_ENOAGENT if none.
 */
XTQ_API int xtq_agent_find_device(xtq_ctx_t *ctx, enum xtq_agent_kind kind, uint32_t device_index,
                                  xtq_agent_t **agent);

/** Describe an agent. */
XTQ_API int xtq_agent_get_info(const xtq_agent_t *agent, xtq_agent_info_t *info);

/**
 * Whether a kind of agent is usable in this process. Returns 0 when it is,
 * else -XTQ_ENOAGENT and a reason ("no /dev/kfd", "libcuda.so.1 not found")
 * copied into `reason` (may be NULL).
 */
XTQ_API int xtq_agent_kind_status(xtq_ctx_t *ctx, enum xtq_agent_kind kind, char *reason,
                                  size_t reason_len);

/** "cpu", "cuda" or "rocr". */
XTQ_API const char *xtq_agent_kind_name(enum xtq_agent_kind kind);

XTQ_EXTERN_C_END

#endif /* XTQ_AGENT_H */
