/*
 * Diagnostic (not a test case): which ways of reading and updating mapped
 * pinned host memory work from a kernel that is already running, as the
 * CUDA agent's persistent processor does. One combination per process
 * (a fault poisons the context):
 *
 *   hostmem_probe attrs
 *   hostmem_probe LOAD PTR WHEN UPDATE
 *     LOAD   acq_global | acq_generic | vol_global | vol_generic | relaxed_global
 *     PTR    host | dev        (address handed to the kernel)
 *     WHEN   early | late | register  (cudaHostAlloc before / after the
 *            launch, or malloc + cudaHostRegister after it)
 *     UPDATE store | atomic    (how the kernel answers: plain store or
 *            atomicAdd_system on the same block)
 *
 * Prints one line: the combination, "ok" or the CUDA error.
 * Build: nvcc -arch=sm_90 -o hostmem_probe tests/gpu/hostmem_probe.cu
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

struct mailbox {
    volatile unsigned long long ptr; /* 0 until the host hands the block over */
    volatile unsigned int stop;
};

template <int L> __device__ uint32_t load(const uint32_t *p)
{
    uint32_t v;
    if (L == 0)
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (L == 1)
        asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (L == 2)
        asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (L == 3)
        asm volatile("ld.volatile.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else
        asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

template <int L> __global__ void poller(mailbox *mb, int atomic)
{
    unsigned long long pp;
    while ((pp = mb->ptr) == 0) {
        if (mb->stop)
            return;
        __nanosleep(200);
    }
    uint32_t *p = (uint32_t *)pp;
    while (load<L>(p) != 1) {
        if (mb->stop)
            return;
        __nanosleep(200);
    }
    if (atomic)
        atomicAdd_system((unsigned long long *)(p + 2), 41ull);
    else
        *(volatile unsigned long long *)(p + 2) = 41;
    __threadfence_system();
    *(volatile uint32_t *)(p + 1) = 7;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int attrs(void)
{
    int dev = 0, v;
    const struct {
        cudaDeviceAttr a;
        const char *n;
    } as[] = {{cudaDevAttrCanMapHostMemory, "canMapHostMemory"},
              {cudaDevAttrUnifiedAddressing, "unifiedAddressing"},
              {cudaDevAttrHostNativeAtomicSupported, "hostNativeAtomicSupported"},
              {cudaDevAttrPageableMemoryAccess, "pageableMemoryAccess"},
              {cudaDevAttrPageableMemoryAccessUsesHostPageTables, "pageableUsesHostPageTables"},
              {cudaDevAttrCanUseHostPointerForRegisteredMem, "canUseHostPointerForRegisteredMem"},
              {cudaDevAttrConcurrentManagedAccess, "concurrentManagedAccess"},
              {cudaDevAttrDirectManagedMemAccessFromHost, "directManagedMemAccessFromHost"}};
    for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++) {
        cudaDeviceGetAttribute(&v, as[i].a, dev);
        printf("attr %s=%d\n", as[i].n, v);
    }
    void *h = NULL, *d = NULL;
    cudaHostAlloc(&h, 4096, cudaHostAllocMapped | cudaHostAllocPortable);
    cudaHostGetDevicePointer(&d, h, 0);
    cudaPointerAttributes at;
    cudaPointerGetAttributes(&at, h);
    printf("hostalloc host=%p devptr=%p attr.type=%d attr.dev=%p attr.host=%p\n", h, d,
           (int)at.type, at.devicePointer, at.hostPointer);
    void *m = aligned_alloc(4096, 4096);
    cudaError_t e = cudaHostRegister(m, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable);
    cudaHostGetDevicePointer(&d, m, 0);
    cudaPointerGetAttributes(&at, m);
    printf("register rc=%s host=%p devptr=%p attr.type=%d attr.dev=%p\n", cudaGetErrorName(e), m,
           d, (int)at.type, at.devicePointer);
    printf("last error %s\n", cudaGetErrorName(cudaGetLastError()));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "attrs"))
        return attrs();
    if (argc != 5) {
        fprintf(stderr, "usage: see the header comment\n");
        return 2;
    }
    const char *loads[] = {"acq_global", "acq_generic", "vol_global", "vol_generic",
                           "relaxed_global"};
    int L = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(argv[1], loads[i]))
            L = i;
    int use_dev = !strcmp(argv[2], "dev");
    int when = !strcmp(argv[3], "early") ? 0 : !strcmp(argv[3], "late") ? 1 : 2;
    int atomic = !strcmp(argv[4], "atomic");
    if (L < 0)
        return 2;

    mailbox *mb;
    cudaStream_t run, ctl;
    cudaMalloc(&mb, sizeof(*mb));
    cudaMemset(mb, 0, sizeof(*mb));
    cudaDeviceSynchronize();
    cudaStreamCreateWithFlags(&run, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&ctl, cudaStreamNonBlocking);
    uint32_t *h = NULL;
    if (when == 0)
        cudaHostAlloc((void **)&h, 4096, cudaHostAllocMapped | cudaHostAllocPortable);
    void (*k[])(mailbox *, int) = {poller<0>, poller<1>, poller<2>, poller<3>, poller<4>};
    k[L]<<<1, 32, 0, run>>>(mb, atomic);
    cudaError_t e = cudaGetLastError();
    if (when == 1)
        e = cudaHostAlloc((void **)&h, 4096, cudaHostAllocMapped | cudaHostAllocPortable);
    if (when == 2) {
        h = (uint32_t *)aligned_alloc(4096, 4096);
        e = cudaHostRegister(h, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable);
    }
    if (e != cudaSuccess) {
        printf("%s %s %s %s: setup %s\n", argv[1], argv[2], argv[3], argv[4], cudaGetErrorName(e));
        return 1;
    }
    memset(h, 0, 4096);
    void *d = h;
    if (use_dev)
        cudaHostGetDevicePointer(&d, h, 0);
    unsigned long long pv = (unsigned long long)(uintptr_t)d;
    cudaMemcpyAsync((void *)&mb->ptr, &pv, sizeof(pv), cudaMemcpyHostToDevice, ctl);
    cudaStreamSynchronize(ctl);
    __atomic_store_n(h, 1u, __ATOMIC_RELEASE);
    double t0 = now_s();
    const char *res = "timeout";
    while (now_s() - t0 < 3.0) {
        if (__atomic_load_n(h + 1, __ATOMIC_ACQUIRE) == 7) {
            static char buf[64];
            unsigned long long got = *(volatile unsigned long long *)(h + 2);
            snprintf(buf, sizeof(buf), "update lost: %llu, not 41", got);
            res = got == 41 ? "ok" : buf;
            break;
        }
        e = cudaStreamQuery(run);
        if (e != cudaErrorNotReady && e != cudaSuccess)
            break;
    }
    unsigned one = 1;
    cudaMemcpyAsync((void *)&mb->stop, &one, sizeof(one), cudaMemcpyHostToDevice, ctl);
    cudaError_t se = cudaStreamSynchronize(run);
    printf("%s %s %s %s: %s (kernel %s)\n", argv[1], argv[2], argv[3], argv[4], res,
           cudaGetErrorName(se));
    return strcmp(res, "ok") != 0;
}
