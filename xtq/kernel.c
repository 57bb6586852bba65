/*
 * Kernel and function objects: the generic accessors. Each agent kind
 * creates its own objects (xtq_kernel_create_cpu lives with the CPU agent)
 * and frees them through its operations table.
 */
#include "internal.h"

int xtq_kernel_destroy(xtq_kernel_t *kernel)
{
    if (kernel == NULL || kernel->agent == NULL)
        return -XTQ_EINVAL;
    return kernel->agent->ops->kernel_destroy(kernel);
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
    if (function == NULL || function->agent == NULL)
        return -XTQ_EINVAL;
    return function->agent->ops->function_destroy(function);
}

uint64_t xtq_function_object(const xtq_function_t *function)
{
    return function->object;
}
