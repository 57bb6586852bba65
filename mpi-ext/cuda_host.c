/*
 * Where a window's memory lives, and the CUDA task module's host side
 * when the layer is built without CUDA.
 *
 * libcuda is looked up only if the program has loaded it already
 * (RTLD_NOLOAD): a process that never touched CUDA has no device memory,
 * and the layer must not load a GPU driver into it.
 */
#include "xmpi.h"

#include <dlfcn.h>

/* From cuda.h (driver API), which the layer does not include. */
#define XMPI_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define XMPI_CU_POINTER_ATTRIBUTE_IS_MANAGED  8
#define XMPI_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define XMPI_CU_MEMORYTYPE_DEVICE             2

typedef int (*pointer_get_attribute_fn)(void *data, int attribute, unsigned long long ptr);

static pointer_get_attribute_fn pointer_get_attribute;
static pthread_once_t lookup_once = PTHREAD_ONCE_INIT;

static void lookup(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib)
        pointer_get_attribute =
            (pointer_get_attribute_fn)(uintptr_t)dlsym(lib, "cuPointerGetAttribute");
}

int xtq__mpi_is_device_ptr(const void *ptr)
{
    unsigned int type = 0, managed = 0;

    pthread_once(&lookup_once, lookup);
    if (!pointer_get_attribute || !ptr)
        return 0;
    if (pointer_get_attribute(&type, XMPI_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                              (unsigned long long)(uintptr_t)ptr) != 0)
        return 0; /* not memory CUDA knows: host */
    /* Managed memory is reachable from the CPU agent: host. */
    if (pointer_get_attribute(&managed, XMPI_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                              (unsigned long long)(uintptr_t)ptr) == 0 &&
        managed)
        return 0;
    return type == XMPI_CU_MEMORYTYPE_DEVICE;
}

int xtq__mpi_device_of(const void *ptr)
{
    int ordinal = -1;
    if (!xtq__mpi_is_device_ptr(ptr))
        return -1;
    if (pointer_get_attribute(&ordinal, XMPI_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              (unsigned long long)(uintptr_t)ptr) != 0)
        return -1;
    return ordinal;
}

#ifndef XTQ_MPI_HAVE_CUDA
/* Built without CUDA: GPU windows are left to the MPI (reason
 * "window in GPU memory and no CUDA agent"). */
int xtq__mpi_cuda_attach(xtq_agent_t *agent)
{
    return -XTQ_ENOSYS;
}

void xtq__mpi_cuda_detach(xtq_agent_t *agent) {}

int xtq__mpi_cuda_kernel(xtq_agent_t *agent, xtq_kernel_t **kernel)
{
    return -XTQ_ENOSYS;
}

int xtq__mpi_cuda_coll_task(uint64_t *fn)
{
    *fn = 0;
    return -XTQ_ENOSYS;
}
#endif
