/*
 * ROCr agent internals shared with its white-box tests (tests/unit/test_rocr.c).
 */
#ifndef XTQ_ROCR_AGENT_H
#define XTQ_ROCR_AGENT_H

#include "internal.h"

/* The runtime library the agent loads with dlopen. */
#define XTQ__ROCR_LIBRARY "libhsa-runtime64.so.1"

/* Load the HSA runtime and resolve every entry point the agent uses,
 * without hsa_init (so it works where the library is installed but no GPU
 * is). 0, or -XTQ_ENOAGENT with the reason. */
int xtq__rocr_load(char *reason, size_t reason_len);

/* Number of entry points resolved by xtq__rocr_load(). */
unsigned xtq__rocr_symbol_count(void);

/* The agent's ISA name (HSA_AGENT_INFO_NAME, e.g. "gfx90a"): which
 * kernels/xtq_kernels-<isa>.hsaco it loads. 0, -XTQ_EAGENTKIND or -XTQ_EIO. */
int xtq__rocr_agent_isa(xtq_agent_t *agent, char *isa, size_t isa_len);

#endif /* XTQ_ROCR_AGENT_H */
