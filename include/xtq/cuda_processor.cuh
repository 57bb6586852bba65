/*
 * The CUDA agent's persistent command processor, compiled into the module
 * that holds the tasks (CUDA only).
 *
 * A device function pointer can only be called from code of its own
 * module (each module has its own constant banks, register and shared
 * memory plan: a call into another module faults with "invalid program
 * counter"). So the processor is not in libxtq's module: every task module
 * instantiates it once, beside its tasks, and attaches it to the agent:
 *
 *     #include <xtq/cuda_processor.cuh>
 *     __device__ void scale(const xtq_cuda_dispatch_t *d, void *kernarg) { ... }
 *     XTQ_CUDA_TASK_EXPORT(scale);
 *     XTQ_CUDA_MODULE(my_tasks);   // the processor of this module
 *
 *     // host, in this .cu file (or any file that sees XTQ_CUDA_MODULE_DECLARE):
 *     xtq_cuda_module_attach(agent, my_tasks);
 *
 * One module per agent at a time (xtq_cuda_attach()). With separate
 * compilation (-rdc, and the device runtime cudadevrt linked) the module is
 * everything device-linked together, so tasks may live in several .cu
 * files, and the processor can start large dispatches on a grid of their
 * own (XTQ_CUDA_GRID_MIN); without it, tasks live in this file and every
 * dispatch runs in the processor's blocks.
 *
 * How it runs: one launch of `blocks` x 256 threads for as long as the
 * module is attached (or, with XTQ_CUDA_IDLE_EXIT_US, until it has found
 * no packet for that long: it exits so the device can idle, and the host
 * launches it again for the next packet; idle_exit below). Block 0 polls
 * one queue slot at a time: thread t reads line t of the slot's inline
 * area (cuda_abi.h), which the agent's enqueue filled with the packet, the
 * kernel arguments and a small payload, each 8-byte word flagged with the
 * packet's index; meanwhile other threads read the ring slot's header
 * (packets of producers that wrote no inline copy), the kernel descriptor
 * the queue used last, and the stop flag. When every line the packet
 * needs carries the current flag, the task is in shared memory after one
 * PCIe round trip. A dispatch of one work-group runs in block 0; a larger
 * one is published to every block through device memory, or launched on
 * a grid of its own. The completion is one release store of a word into
 * host memory.
 *
 * Packets run one at a time, in queue order: the barrier bit is always
 * honoured. Tasks must not use __syncthreads() (threads beyond the
 * work-group size do not call them).
 */
#ifndef XTQ_CUDA_PROCESSOR_CUH
#define XTQ_CUDA_PROCESSOR_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include <xtq/cuda.h>
#include <xtq/cuda_abi.h>
#include <xtq/error.h>

namespace xtq_cuda_detail {
namespace { /* internal linkage: one copy per module that includes this */

/* Loads and stores of mapped host memory use generic addresses. (On the
 * H100, .global-qualified loads of it work too: tests/gpu/hostmem_probe.) */

__device__ __forceinline__ uint32_t ld_acquire_sys_u32(const void *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t ld_acquire_sys_u64(const void *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t ld_acquire_gpu_u64(const void *p)
{
    uint64_t v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint4 ld_volatile_v4(const void *p)
{
    uint4 v;
    asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* One inline line: two 64-bit elements, each single-copy atomic (a flag
 * read with its data), the two in one 16-byte load. Thread 0 reads line
 * 0, which the host stores last with release semantics, with acquire
 * semantics: the task's later loads (after the block's barrier) see what
 * the host wrote before it, a payload read in place included, and the
 * SM's L1 holds no line from before (the completion's st.release.sys,
 * unlike __threadfence_system(), does not invalidate L1: a task read a
 * payload at a reused address from L1, seen on the H100). */
__device__ __forceinline__ ulonglong2 ld_line(const void *p)
{
    ulonglong2 v;
    if (threadIdx.x == 0)
        asm volatile("ld.acquire.sys.v2.u64 {%0, %1}, [%2];"
                     : "=l"(v.x), "=l"(v.y)
                     : "l"(p)
                     : "memory");
    else
        asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];"
                     : "=l"(v.x), "=l"(v.y)
                     : "l"(p)
                     : "memory");
    return v;
}

__device__ __forceinline__ void st_release_gpu_u64(void *p, uint64_t v)
{
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_release_sys_u64(void *p, uint64_t v)
{
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_sys_u64(void *p, uint64_t v)
{
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void fence_acq_rel_sys(void)
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

__device__ __forceinline__ uint64_t gpu_clock_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* prof[]: the processor's stage clock (PROF_ENTRY: a grid's first
 * instruction, before its prologue; 0 where no grid ran). */
enum {
    PROF_SEEN,
    PROF_UNPACKED,
    PROF_ARGS,
    PROF_PUBLISHED,
    PROF_START,
    PROF_END,
    PROF_DONE,
    PROF_ENTRY
};

/* Block 0's copy of the queue table and of the settings the host changes
 * only with a table version (shared memory: no device-memory read on the
 * way to a packet). */
struct qcache {
    uint64_t ring[XTQ__CUDA_MAX_QUEUES];
    uint64_t ridx[XTQ__CUDA_MAX_QUEUES];
    uint64_t inl[XTQ__CUDA_MAX_QUEUES];
    uint64_t done[XTQ__CUDA_MAX_QUEUES];
    uint64_t rd[XTQ__CUDA_MAX_QUEUES];
    uint64_t last_kobj[XTQ__CUDA_MAX_QUEUES];
    /* The shape (geometry words, shape_key) of that dispatch and its
     * work-group count: a packet of the same kernel and shape skips the
     * geometry check. 0 groups: none. */
    uint64_t shape[XTQ__CUDA_MAX_QUEUES][3];
    uint32_t shape_groups[XTQ__CUDA_MAX_QUEUES];
    uint32_t mask[XTQ__CUDA_MAX_QUEUES];
    uint32_t lines[XTQ__CUDA_MAX_QUEUES];
    uint32_t poll[XTQ__CUDA_MAX_QUEUES];
    uint32_t list[XTQ__CUDA_MAX_QUEUES]; /* active queues */
    uint32_t nlist;
    uint32_t complete_mode;
    uint32_t host_atomics;
    uint32_t grid_min;
    uint32_t grid_blocks_max;
    uint32_t poll_ns_max;
    uint64_t kdesc;
    uint64_t copy_min;
    uint64_t stage;
    uint64_t stage_len;
    uint64_t idle_exit_ns; /* 0: never exit when idle */
};

/* Per-block shared state. `buf` holds the inline data: header, packet at
 * XTQ__CUDA_INLINE_PACKET, arguments at XTQ__CUDA_INLINE_KERNARG, then an
 * inline payload; packets without an inline copy are laid out the same. */
struct pshared {
    int cmd;
    int rc;
    uint32_t need;    /* lines the packet needs; 0: no inline packet */
    uint32_t hdr;     /* the ring slot's first word, as polled */
    uint32_t stopv[2]; /* stop flag and table version, as polled */
    uint32_t kd_ok;
    xtq__cuda_kdesc kd; /* prefetched descriptor of the queue's last kernel */
    uint64_t fn;
    uint32_t ks, total;
    int32_t status;   /* a one-group dispatch's status word */
    int exit_idle;    /* the idle check's verdict, for every thread */
    uint64_t gen, disp;
    __align__(16) uint8_t buf[XTQ__CUDA_INLINE_KERNARG + XTQ_CUDA_MAX_KERNARG];
};

__device__ __forceinline__ const xtq__cuda_inline *inl_hdr(const pshared &S)
{
    return (const xtq__cuda_inline *)S.buf;
}

__device__ __forceinline__ xtq_aql_packet_t *buf_packet(pshared &S)
{
    return (xtq_aql_packet_t *)(S.buf + XTQ__CUDA_INLINE_PACKET);
}

__device__ __forceinline__ uint8_t *buf_kernarg(pshared &S)
{
    return S.buf + XTQ__CUDA_INLINE_KERNARG;
}

/*
 * The completion: one word into host memory, ordered after the task's
 * writes (the caller made the other threads' writes visible to this one
 * with a barrier or a fence). st.release.sys or, for comparison,
 * fence.sc.sys then a plain store (cuda_abi.h, XTQ__CUDA_COMPLETE_*).
 * Where the GPU has native host atomics it decrements the signal itself;
 * otherwise the host's retire thread does.
 */
__device__ void complete_word(uint64_t *word, uint64_t index, int32_t status, uint64_t signal,
                              uint32_t mode, uint32_t host_atomics, uint64_t notify, uint32_t tag)
{
    const uint64_t w = XTQ__CUDA_DONE_WORD(index, status);
    /* The initiator's word on one host (the inline header's notify), the
     * same release as the queue's word, stored first: the waiter that
     * polls it is the one that pays for every nanosecond. */
    const uint64_t nw = ((uint64_t)(uint32_t)status << 32) | tag;
    if (signal && host_atomics) {
        __threadfence_system();
        atomicAdd_system((unsigned long long *)signal, ~0ull); /* value -= 1 */
        *(volatile uint64_t *)word = w;
        if (notify) {
            /* After the signal's decrement (the engine gives no notify
             * with a signal; kept correct all the same). */
            __threadfence_system();
            *(volatile uint64_t *)notify = nw;
        }
    } else if (mode == XTQ__CUDA_COMPLETE_FENCE) {
        __threadfence_system();
        if (notify)
            *(volatile uint64_t *)notify = nw;
        *(volatile uint64_t *)word = w;
    } else if (notify) {
        /* One fence, two strong stores: each is a release (PTX: a fence
         * then a strong write in program order). */
        fence_acq_rel_sys();
        st_relaxed_sys_u64((void *)notify, nw);
        st_relaxed_sys_u64(word, w);
    } else {
        st_release_sys_u64(word, w);
    }
}

/* After the completion: the first error reaches the host's log. */
__device__ void report_error(xtq__cuda_dev *dev, int32_t status)
{
    if (status && !dev->error_seen) {
        dev->error_seen = 1;
        ((xtq__cuda_ctl *)dev->ctl)->error = status;
    }
}

/* Block 0, thread 0: complete packet `index` of cached queue `li`. */
__device__ void complete_local(xtq__cuda_dev *dev, const qcache &C, uint32_t li, uint64_t index,
                               int32_t status, uint64_t signal, const xtq__cuda_inline *h)
{
    uint64_t *word = (uint64_t *)C.done[li] + (index & C.mask[li]);
    complete_word(word, index, status, signal, C.complete_mode, C.host_atomics, h->notify,
                  h->notify_tag);
    report_error(dev, status);
}

/* The dispatch published in dev->cur (other blocks, or a launched grid). */
__device__ void complete_published(xtq__cuda_dev *dev)
{
    const xtq__cuda_qdesc *qd = &dev->q[dev->cur_queue];
    uint64_t *word = (uint64_t *)qd->done + (dev->cur_index & qd->mask);
    int32_t status = dev->cur_status;
    complete_word(word, dev->cur_index, status, dev->cur.completion_signal.handle,
                  dev->complete_mode, dev->host_atomics, dev->cur_notify, dev->cur_notify_tag);
    report_error(dev, status);
}

__device__ bool barrier_ready(const xtq_barrier_packet_t *b, bool is_or)
{
    bool any = false, all = true, none = true;
    for (int i = 0; i < 5; i++) {
        uint64_t h = b->dep_signal[i].handle;
        if (!h)
            continue;
        none = false;
        bool zero = (int64_t)ld_acquire_sys_u64((const void *)h) == 0;
        any |= zero;
        all &= zero;
    }
    return none || (is_or ? any : all);
}

/* The descriptor half of the check: a live task of this module, and
 * arguments where it takes some. */
__device__ __forceinline__ int check_kdesc(const xtq__cuda_kdesc &kd,
                                           const xtq_kernel_dispatch_packet_t *k, uint32_t tag,
                                           uint64_t *fn, uint32_t *ks)
{
    /* A task of another module: calling it would fault the whole GPU
     * context. Its packet completes with the error instead. (Bitwise: the
     * loads go out together, no branch between them.) */
    const bool live = (kd.live != 0) & (kd.fn != 0) & (kd.module == tag);
    const bool args = (kd.kernarg_size == 0) | (k->kernarg_address != NULL);
    *fn = kd.fn;
    *ks = kd.kernarg_size;
    return !live ? -XTQ_ENOKERNEL : !args ? -XTQ_EKERNARG : 0;
}

/* Validate a kernel dispatch; 0 or a negative XTQ code. `pre`: the
 * descriptor read during the poll, when it is this packet's. Geometry
 * (three divisions), the object's range, the descriptor: about 250
 * dependent instructions of one thread, 0.8 us on the H100 (the
 * "check+args" stage of 22e275d); a repeated shape skips the first two
 * (shape_key). */
__device__ int check_dispatch(uint64_t kdesc_base, const xtq_kernel_dispatch_packet_t *k,
                              uint32_t tag, const xtq__cuda_kdesc *pre, uint64_t *fn,
                              uint32_t *ks, uint32_t *ngroups)
{
    uint32_t dims = (k->setup >> XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3u;
    if (dims < 1 || dims > 3)
        return -XTQ_EPACKET;
    uint32_t wg[3] = {k->workgroup_size_x, k->workgroup_size_y, k->workgroup_size_z};
    uint32_t gr[3] = {k->grid_size_x, k->grid_size_y, k->grid_size_z};
    uint64_t total = 1, items = 1;
    for (uint32_t d = 0; d < 3; d++) {
        if (d >= dims) {
            wg[d] = 1;
            gr[d] = 1;
        }
        if (!wg[d] || !gr[d])
            return -XTQ_EPACKET;
        items *= wg[d];
        total *= (gr[d] + wg[d] - 1) / wg[d];
    }
    if (items > XTQ__CUDA_THREADS || total > 0xffffffffull)
        return -XTQ_EPACKET;
    uint64_t base = kdesc_base, obj = k->kernel_object;
    if (obj < base || obj >= base + XTQ__CUDA_MAX_KERNELS * sizeof(xtq__cuda_kdesc) ||
        (obj - base) % sizeof(xtq__cuda_kdesc))
        return -XTQ_ENOKERNEL;
    xtq__cuda_kdesc kd;
    if (pre) {
        kd = *pre;
    } else {
        /* The descriptor in one load (one trip to device memory). */
        uint4 w = ld_volatile_v4((const void *)obj);
        memcpy(&kd, &w, sizeof(kd));
    }
    int rc = check_kdesc(kd, k, tag, fn, ks);
    if (rc == 0)
        *ngroups = (uint32_t)total;
    return rc;
}

/* What the geometry check reads of a kernel dispatch (bytes 0..23 of the
 * packet: setup, work-group and grid sizes), header and reserved0 masked
 * out: equal keys and kernel objects give equal work-group counts. */
__device__ __forceinline__ void shape_key(const xtq_kernel_dispatch_packet_t *k, uint64_t key[3])
{
    const uint64_t *w = (const uint64_t *)k;
    key[0] = w[0] & ~0xffffull;
    key[1] = w[1] & ~0xffff0000ull;
    key[2] = w[2];
}

/* Fill the work-item coordinates a task sees (group coordinates aside). */
__device__ void dispatch_init(xtq_cuda_dispatch_t *d, const xtq_kernel_dispatch_packet_t *k,
                              int32_t *status, uint64_t result, uint32_t result_len,
                              uint64_t payload_len)
{
    const uint32_t tid = threadIdx.x;
    d->packet = k;
    d->dimensions = (k->setup >> XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3u;
    d->grid_size[0] = k->grid_size_x;
    d->grid_size[1] = d->dimensions > 1 ? k->grid_size_y : 1;
    d->grid_size[2] = d->dimensions > 2 ? k->grid_size_z : 1;
    d->workgroup_size[0] = k->workgroup_size_x;
    d->workgroup_size[1] = d->dimensions > 1 ? k->workgroup_size_y : 1;
    d->workgroup_size[2] = d->dimensions > 2 ? k->workgroup_size_z : 1;
    for (int i = 0; i < 3; i++)
        d->workgroup_count[i] = (d->grid_size[i] + d->workgroup_size[i] - 1) / d->workgroup_size[i];
    d->flat_local_id = tid;
    d->local_id[0] = tid % d->workgroup_size[0];
    d->local_id[1] = (tid / d->workgroup_size[0]) % d->workgroup_size[1];
    d->local_id[2] = tid / (d->workgroup_size[0] * d->workgroup_size[1]);
    d->status = status;
    d->result = (void *)(uintptr_t)result;
    d->result_len = result_len;
    d->payload_len = payload_len;
}

/* Run work-group `g` of the dispatch in this block. */
__device__ __forceinline__ void run_group(xtq_cuda_dispatch_t *d, uint32_t g, uint64_t fn_addr,
                                          void *kernarg)
{
    const uint32_t items = d->workgroup_size[0] * d->workgroup_size[1] * d->workgroup_size[2];
    d->workgroup_id[0] = g % d->workgroup_count[0];
    d->workgroup_id[1] = (g / d->workgroup_count[0]) % d->workgroup_count[1];
    d->workgroup_id[2] = g / (d->workgroup_count[0] * d->workgroup_count[1]);
    bool in = threadIdx.x < items;
    for (int i = 0; i < 3 && in; i++)
        in = d->workgroup_id[i] * d->workgroup_size[i] + d->local_id[i] < d->grid_size[i];
    if (in)
        ((xtq_cuda_task_fn)fn_addr)(d, kernarg);
}

/* Every processor block: claim work-groups of dispatch `tag` (of `total`
 * groups) and run them; the last block to finish completes it. A claim
 * takes a share of what is left (guided, as OpenMP's schedule): half of it
 * spread over the blocks, one group at least, so that a dispatch of many
 * groups costs a block a few trips to the claim word, not one per group
 * (each about a microsecond: a load and a compare-and-swap in L2). */
__device__ void run_groups(xtq__cuda_dev *dev, uint32_t tag, const xtq_kernel_dispatch_packet_t *k,
                           uint64_t fn_addr, void *kernarg, uint32_t total)
{
    __shared__ uint32_t s_group, s_count;
    const uint32_t tid = threadIdx.x;
    xtq_cuda_dispatch_t d;
    dispatch_init(&d, k, (int32_t *)&dev->cur_status, dev->cur_result, dev->cur_result_len,
                  dev->cur_payload_len);
    uint32_t ran = 0;
    for (;;) {
        if (tid == 0) {
            unsigned long long c = *(volatile unsigned long long *)&dev->claim;
            uint32_t g = ~0u, n = 0;
            for (;;) {
                if ((uint32_t)(c >> 32) != tag || (uint32_t)c >= total)
                    break;
                const uint32_t left = total - (uint32_t)c;
                const uint32_t take = max(1u, left / (2u * gridDim.x));
                unsigned long long prev = atomicCAS(&dev->claim, c, c + take);
                if (prev == c) {
                    g = (uint32_t)c;
                    n = take;
                    break;
                }
                c = prev;
            }
            s_group = g;
            s_count = n;
        }
        __syncthreads();
        const uint32_t g = s_group, n = s_count;
        __syncthreads();
        if (g == ~0u)
            break;
        if (g == 0 && tid == 0)
            dev->prof[PROF_START] = gpu_clock_ns();
        for (uint32_t i = 0; i < n; i++) {
            /* A task may use shared memory: each group starts afresh. */
            if (i)
                __syncthreads();
            run_group(&d, g + i, fn_addr, kernarg);
        }
        ran += n;
    }
    __syncthreads();
    if (tid == 0 && ran) {
        /* The block's task writes, before the count the last block reads;
         * the completion's release carries them further. */
        __threadfence();
        uint32_t prev = atomicAdd(&dev->groups_done, ran);
        if (prev + ran == total) {
            __threadfence();
            dev->prof[PROF_END] = gpu_clock_ns();
            complete_published(dev);
            dev->prof[PROF_DONE] = gpu_clock_ns();
            st_release_gpu_u64((void *)&dev->completed, tag);
        }
    }
}

enum karg_src { KARG_HOST, KARG_DEVICE, KARG_SHARED };

/* Threads 0 .. nthreads-1 copy (the others may be busy elsewhere). */
__device__ void copy_kernarg(void *dst, const void *src, uint32_t size, karg_src from,
                             uint32_t nthreads = XTQ__CUDA_THREADS)
{
    /* Words when aligned, else bytes; one round of loads for <= 1 KiB.
     * __ldcg (ld.global.cg) only on device memory: on shared memory it
     * faults with cudaErrorInvalidAddressSpace. */
    if (threadIdx.x >= nthreads)
        return;
    if (!(((uintptr_t)src | (uintptr_t)dst | size) & 3)) {
        for (uint32_t i = threadIdx.x; i < size / 4; i += nthreads)
            ((uint32_t *)dst)[i] = from == KARG_DEVICE ? __ldcg((const unsigned int *)src + i)
                                                       : ((const volatile uint32_t *)src)[i];
    } else {
        for (uint32_t i = threadIdx.x; i < size; i += nthreads)
            ((uint8_t *)dst)[i] = ((const volatile uint8_t *)src)[i];
    }
}

/* Payload placement (block 0, every thread): copy argument 1's payload
 * into device memory when the dispatch asks for it, and point argument 1
 * there. 16-byte loads, four in flight per thread, where aligned. */
__device__ void stage_payload(const qcache &C, uint64_t len, uint8_t *karg, uint32_t ks)
{
    if (!C.copy_min || len < C.copy_min || len > C.stage_len || ks < 16)
        return;
    const uint8_t *src = *(const uint8_t *const *)(karg + 8);
    uint8_t *dst = (uint8_t *)C.stage;
    if (!src)
        return;
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    uint64_t done = 0;
    if (!((uintptr_t)src & 15)) {
        const uint4 *s4 = (const uint4 *)src;
        uint4 *d4 = (uint4 *)dst;
        uint64_t n4 = len / 16, i = tid;
        for (; i + 3 * nt < n4; i += 4 * nt) {
            uint4 a = ld_volatile_v4(s4 + i), b = ld_volatile_v4(s4 + i + nt);
            uint4 c = ld_volatile_v4(s4 + i + 2 * nt), d = ld_volatile_v4(s4 + i + 3 * nt);
            d4[i] = a;
            d4[i + nt] = b;
            d4[i + 2 * nt] = c;
            d4[i + 3 * nt] = d;
        }
        for (; i < n4; i += nt)
            d4[i] = ld_volatile_v4(s4 + i);
        done = n4 * 16;
    }
    for (uint64_t i = done + tid; i < len; i += nt)
        dst[i] = ((const volatile uint8_t *)src)[i];
    /* Every block reads the copy after it acquires this dispatch. */
    __threadfence();
    __syncthreads();
    if (tid == 0)
        *(uint64_t *)(karg + 8) = (uint64_t)(uintptr_t)dst;
}

/* Block 0, every thread: load the queue table and settings into shared
 * memory (at start, and when the host bumps the table version). */
__device__ void load_table(xtq__cuda_dev *dev, qcache &C, uint32_t version)
{
    const uint32_t tid = threadIdx.x;
    const uint32_t nq = dev->nq;
    if (tid < XTQ__CUDA_MAX_QUEUES) {
        const xtq__cuda_qdesc *qd = &dev->q[tid];
        C.ring[tid] = qd->ring;
        C.ridx[tid] = qd->read_index;
        C.inl[tid] = qd->inl;
        C.done[tid] = qd->done;
        C.rd[tid] = *(volatile uint64_t *)&qd->rd;
        C.last_kobj[tid] = 0;
        C.shape_groups[tid] = 0;
        C.mask[tid] = qd->mask;
        uint32_t lines = qd->inl_lines;
        C.lines[tid] = lines;
        uint32_t usable = min(lines, XTQ__CUDA_INLINE_LINES_MAX);
        C.poll[tid] = min(usable, 32u);
    }
    __syncthreads();
    if (tid == 0) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < nq && i < XTQ__CUDA_MAX_QUEUES; i++)
            if (*(volatile uint32_t *)&dev->q[i].active && C.inl[i] && C.lines[i])
                C.list[n++] = i;
        C.nlist = n;
        C.complete_mode = dev->complete_mode;
        C.host_atomics = dev->host_atomics;
        C.grid_min = dev->grid_min;
        C.grid_blocks_max = dev->grid_blocks_max;
        C.poll_ns_max = dev->poll_ns_max;
        C.kdesc = dev->kdesc;
        C.copy_min = dev->copy_min;
        C.stage = dev->stage;
        C.stage_len = dev->stage_len;
        C.idle_exit_ns = (uint64_t)dev->idle_exit_us * 1000u;
        /* The host waits for this before it frees a removed queue. */
        __threadfence();
        ((xtq__cuda_ctl *)dev->ctl)->version_seen = version;
    }
    __syncthreads();
}

__device__ __forceinline__ bool line_ok(ulonglong2 v, uint32_t expect)
{
    return (uint32_t)(v.x >> 32) == expect && (uint32_t)(v.y >> 32) == expect;
}

/* Each thread's copy: every thread updates it the same way. */
struct pollstate {
    uint32_t next;    /* round-robin position in C.list */
    uint32_t idle;    /* empty polls since the last packet */
    uint32_t ns;      /* current nap */
    uint32_t version; /* table version in C */
    uint64_t seen_ns; /* PROF_SEEN of the packet taken */
    uint64_t unpacked_ns;
    uint64_t idle_since; /* GPU clock of the first backed-off empty poll; 0: none */
};

/* Lines an inline packet needs, from line 0 as read; 0: no current
 * inline packet (or a line 0 no enqueue of ours wrote). */
__device__ __forceinline__ uint32_t inline_need(ulonglong2 v, uint32_t expect, uint32_t lines)
{
    if (!line_ok(v, expect))
        return 0;
    uint32_t need = (uint32_t)v.x & 0xffffu;
    /* Header and packet at least; never beyond the slot. */
    if (need < XTQ__CUDA_INLINE_KERNARG / XTQ__CUDA_LINE_DATA ||
        need > min(lines, XTQ__CUDA_INLINE_LINES_MAX))
        return 0;
    return need;
}

/*
 * Block 0, thread 0: the idle exit's last look (hsa-glue/cuda_idle.h has
 * the whole protocol). Dekker's handshake with the host's enqueue: the
 * host stores the packet, fences (seq_cst) and reads ctl->state; this
 * thread stores EXITING, fences (fence.sc.sys, __threadfence_system) and
 * reads every queue's next slot. Both fences are full and at system
 * scope, so the two cannot both read the other's old value: either the
 * host sees EXITING or STOPPED, and relaunches after this processor has
 * gone, or this look sees the packet (or its reservation's inline line or
 * header) and the processor goes on. A header still there from the slot's
 * previous packet (the host frees slots after their completion) or a
 * table version it has not loaded (a queue created meanwhile) also keeps
 * it: wrong only in being cautious, it tries again after another idle
 * period. Returns true when it may exit (state still EXITING).
 */
__device__ bool idle_last_look(xtq__cuda_dev *dev, const qcache &C, uint32_t version)
{
    xtq__cuda_ctl *ctl = (xtq__cuda_ctl *)dev->ctl;
    ctl->state = XTQ__CUDA_PROC_EXITING;
    __threadfence_system();
    bool found = *(volatile uint32_t *)&dev->version != version;
    for (uint32_t i = 0; i < C.nlist && !found; i++) {
        const uint32_t li = C.list[i];
        const uint64_t rd = C.rd[li];
        const uint8_t *area = (const uint8_t *)C.inl[li] +
                              (rd & C.mask[li]) * (uint64_t)C.lines[li] * XTQ__CUDA_LINE_BYTES;
        const void *slot = (const xtq_aql_packet_t *)C.ring[li] + (rd & C.mask[li]);
        const uint64_t line0 = ld_acquire_sys_u64(area);
        const uint32_t hdr = ld_acquire_sys_u32(slot);
        found = (uint32_t)(line0 >> 32) == (uint32_t)(rd + 1) ||
                (hdr & 0xffu) != XTQ_PACKET_TYPE_INVALID;
    }
    if (found) {
        ctl->state = XTQ__CUDA_PROC_RUNNING;
        __threadfence_system();
    }
    return !found;
}

/*
 * Block 0, every thread, after a backed-off empty poll: true when the
 * processor has found no packet for C.idle_exit_ns (GPU clock) and its
 * last look found none either. Then the other blocks are told through
 * the stop flag (the host clears it before every launch) and ctl->state
 * becomes STOPPED: the device can idle, so an application's
 * cudaDeviceSynchronize, cudaFree or lazy module load returns.
 */
__device__ bool idle_exit(xtq__cuda_dev *dev, const qcache &C, pshared &S, pollstate &ps)
{
    if (threadIdx.x == 0) {
        const uint64_t now = gpu_clock_ns();
        int out = 0;
        if (ps.idle_since == 0) {
            ps.idle_since = now;
        } else if (now - ps.idle_since >= C.idle_exit_ns) {
            if (idle_last_look(dev, C, ps.version)) {
                dev->stop = 1;
                __threadfence();
                ((xtq__cuda_ctl *)dev->ctl)->state = XTQ__CUDA_PROC_STOPPED;
                __threadfence_system();
                out = 1;
            } else {
                ps.idle_since = now; /* a whole idle period again */
            }
        }
        S.exit_idle = out;
    }
    __syncthreads();
    const bool out = S.exit_idle != 0;
    __syncthreads();
    return out;
}

/*
 * Block 0, every thread: wait for a packet and take it. Returns -1 (stop)
 * or the cached queue index `li` with the packet in S.buf (from its inline
 * copy, or from the ring with an inline header made up from the
 * producer's hints). Every shared word is written before one barrier and
 * read between it and the next.
 */
__device__ int take_packet(xtq__cuda_dev *dev, qcache &C, pshared &S, pollstate &ps)
{
    const uint32_t tid = threadIdx.x;
    for (;;) {
        const uint32_t li = C.nlist ? C.list[ps.next % C.nlist] : ~0u;
        uint32_t nl = 0, expect = 0, lines = 0;
        ulonglong2 v = make_ulonglong2(0, 0);
        const uint8_t *area = NULL;
        const uint32_t *slot = NULL;
        uint64_t rd = 0;
        /* One round: every load below is in flight at once. */
        if (li != ~0u) {
            rd = C.rd[li];
            nl = C.poll[li];
            lines = C.lines[li];
            expect = (uint32_t)(rd + 1);
            area = (const uint8_t *)C.inl[li] +
                   (rd & C.mask[li]) * (uint64_t)lines * XTQ__CUDA_LINE_BYTES;
            slot = (const uint32_t *)((const xtq_aql_packet_t *)C.ring[li] + (rd & C.mask[li]));
            if (tid < nl) {
                v = ld_line(area + tid * XTQ__CUDA_LINE_BYTES);
            } else if (tid == XTQ__CUDA_THREADS - 1) {
                S.hdr = *(const volatile uint32_t *)slot;
            } else if (tid == XTQ__CUDA_THREADS - 2) {
                uint64_t obj = C.last_kobj[li];
                S.kd_ok = 0;
                if (obj) {
                    uint4 w = ld_volatile_v4((const void *)obj);
                    memcpy(&S.kd, &w, sizeof(S.kd));
                    S.kd_ok = 1;
                }
            }
        }
        if (tid == XTQ__CUDA_THREADS - 3) {
            /* stop and version, adjacent: one load */
            uint64_t sv = *(const volatile uint64_t *)&dev->stop;
            S.stopv[0] = (uint32_t)sv;
            S.stopv[1] = (uint32_t)(sv >> 32);
        }
        if (tid == 0)
            S.need = li != ~0u ? inline_need(v, expect, lines) : 0;
        __syncthreads();
        const uint32_t stop = S.stopv[0], version = S.stopv[1], hdr = S.hdr;
        uint32_t need = S.need;
        __syncthreads();
        if (stop)
            return -1;
        if (version != ps.version) {
            ps.version = version;
            load_table(dev, C, version);
            continue;
        }
        if (li == ~0u) {
            /* No queue: nap at the longest. */
            __nanosleep(C.poll_ns_max ? C.poll_ns_max : 1000);
            if (C.idle_exit_ns && idle_exit(dev, C, S, ps))
                return -1;
            continue;
        }
        if (need == 0) {
            if ((hdr & 0xffu) == XTQ_PACKET_TYPE_INVALID) {
                /* Nothing in this queue: the next one, and after a while
                 * of nothing, back off (power when idle). */
                ps.next++;
                if (ps.idle < 4096) {
                    ps.idle++;
                } else {
                    ps.ns = ps.ns ? min(ps.ns * 2, C.poll_ns_max) : 32;
                    __nanosleep(ps.ns);
                    /* Off the packet path: only once the poll backs off. */
                    if (C.idle_exit_ns && idle_exit(dev, C, S, ps))
                        return -1;
                }
                continue;
            }
            /* A header with no current inline copy: a producer that
             * writes none, a poll that read the header after the
             * producer's last store but a line before it, or the header
             * of this slot's previous packet, which the host has not
             * freed yet (it frees slots after the completion, so the
             * processor can be a whole queue ahead of it). Only a header
             * read after read_index says the slot was freed is this
             * packet's: the host stores INVALID, then read_index. Then
             * read the lines and the body. */
            if (tid == 0) {
                uint32_t hw = XTQ_PACKET_TYPE_INVALID;
                const uint64_t size = (uint64_t)C.mask[li] + 1;
                if (ld_acquire_sys_u64((const void *)C.ridx[li]) + size > rd)
                    hw = ld_acquire_sys_u32(slot);
                S.hdr = hw;
            }
            __syncthreads();
            const uint32_t hw = S.hdr;
            if ((hw & 0xffu) == XTQ_PACKET_TYPE_INVALID) {
                ps.next++;
                __syncthreads(); /* everyone has read S.hdr */
                continue;
            }
            if (tid < nl)
                v = ld_line(area + tid * XTQ__CUDA_LINE_BYTES);
            else if (tid >= XTQ__CUDA_THREADS - 4)
                ((uint4 *)buf_packet(S))[tid - (XTQ__CUDA_THREADS - 4)] =
                    ld_volatile_v4((const uint4 *)slot + (tid - (XTQ__CUDA_THREADS - 4)));
            if (tid == 0)
                S.need = inline_need(v, expect, lines);
            __syncthreads();
            need = S.need;
            if (need == 0) {
                if (tid == 0) {
                    ps.seen_ns = ps.unpacked_ns = gpu_clock_ns();
                    xtq_aql_packet_t *p = buf_packet(S);
                    p->header = (uint16_t)hw;
                    p->kernel.setup = (uint16_t)(hw >> 16);
                    /* A plain packet says nothing beyond AQL: its
                     * arguments are fetched after the check, its payload
                     * read in place, and it has no result buffer. */
                    xtq__cuda_inline *h = (xtq__cuda_inline *)S.buf;
                    h->nlines = 0;
                    h->kernarg_len = 0;
                    h->flags = 0;
                    h->payload_len = 0;
                    h->result = 0;
                    h->result_len = 0;
                    h->kernarg_ext = 0;
                    h->notify = 0;
                    h->notify_tag = 0;
                    C.rd[li] = rd + 1;
                    *(volatile uint64_t *)&dev->q[li].rd = rd + 1;
                }
                /* Every thread: the poll state is per thread. */
                ps.next++;
                ps.idle = 0;
                ps.ns = 0;
                ps.idle_since = 0;
                __syncthreads();
                return (int)li;
            }
        }
        /* Inline: every line up to `need` must carry the current flag;
         * lines read before the producer wrote them are read again. */
        if (tid == 0)
            ps.seen_ns = gpu_clock_ns();
        for (;;) {
            const bool ok = tid >= need || line_ok(v, expect);
            if (__syncthreads_and(ok))
                break;
            if (!ok)
                v = ld_line(area + tid * XTQ__CUDA_LINE_BYTES);
            if (tid == 0)
                S.stopv[0] = *(volatile uint32_t *)&dev->stop;
            __syncthreads();
            if (S.stopv[0])
                return -1;
        }
        if (tid < need) {
            uint2 d = make_uint2((uint32_t)v.x, (uint32_t)v.y);
            *(uint2 *)(S.buf + tid * XTQ__CUDA_LINE_DATA) = d;
        }
        if (tid == 0) {
            C.rd[li] = rd + 1;
            *(volatile uint64_t *)&dev->q[li].rd = rd + 1;
            /* The next poll of this queue reads as many lines as this
             * packet had (a warp at least): same-sized tasks in one read. */
            uint32_t usable = min(lines, XTQ__CUDA_INLINE_LINES_MAX);
            C.poll[li] = min(usable, max(32u, (need + 31u) & ~31u));
        }
        ps.next++;
        ps.idle = 0;
        ps.ns = 0;
        ps.idle_since = 0;
        __syncthreads();
        if (tid == 0)
            ps.unpacked_ns = gpu_clock_ns();
        return (int)li;
    }
}

#if defined(__CUDACC_RDC__)
/*
 * A large dispatch on a grid of its own (launched by block 0 with dynamic
 * parallelism, fire and forget): each block loops over work-groups; the
 * last block to finish completes the packet and releases block 0.
 */
__global__ void __launch_bounds__(XTQ_CUDA_MAX_WORKGROUP)
    grid_kernel(xtq__cuda_dev *dev, uint32_t tag)
{
    __shared__ xtq_kernel_dispatch_packet_t s_pkt;
    __shared__ __align__(16) uint8_t s_karg[XTQ_CUDA_MAX_KERNARG];
    const uint32_t tid = threadIdx.x;
    if (blockIdx.x == 0 && tid == 0)
        dev->prof[PROF_ENTRY] = gpu_clock_ns();
    if (tid < sizeof(s_pkt) / 4)
        ((uint32_t *)&s_pkt)[tid] = __ldcg((const unsigned int *)&dev->cur + tid);
    const uint32_t ks = dev->cur_kernarg_size, total = dev->cur_total;
    const uint64_t fn = dev->cur_fn;
    copy_kernarg(s_karg, dev->kernarg, ks, KARG_DEVICE);
    __syncthreads();
    if (blockIdx.x == 0 && tid == 0)
        dev->prof[PROF_START] = gpu_clock_ns();
    xtq_cuda_dispatch_t d;
    dispatch_init(&d, &s_pkt, (int32_t *)&dev->cur_status, dev->cur_result, dev->cur_result_len,
                  dev->cur_payload_len);
    for (uint32_t g = blockIdx.x; g < total; g += gridDim.x)
        run_group(&d, g, fn, s_karg);
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(&dev->grid_done, 1u) == gridDim.x - 1) {
            __threadfence();
            dev->prof[PROF_END] = gpu_clock_ns();
            complete_published(dev);
            dev->prof[PROF_DONE] = gpu_clock_ns();
            st_release_gpu_u64((void *)&dev->completed, tag);
        }
    }
}
#endif

/* Block 0: write the dispatch for other blocks or a grid (every thread). */
__device__ void publish_dispatch(xtq__cuda_dev *dev, pshared &S, uint32_t li, uint64_t index,
                                 uint32_t ks)
{
    const uint32_t tid = threadIdx.x;
    const xtq__cuda_inline *h = inl_hdr(S);
    copy_kernarg(dev->kernarg, buf_kernarg(S), ks, KARG_SHARED);
    if (tid < sizeof(xtq_kernel_dispatch_packet_t) / 4)
        ((uint32_t *)&dev->cur)[tid] = ((const uint32_t *)buf_packet(S))[tid];
    if (tid == 0) {
        dev->cur_index = index;
        dev->cur_queue = li;
        dev->cur_fn = S.fn;
        dev->cur_kernarg_size = ks;
        dev->cur_total = S.total;
        dev->cur_status = 0;
        dev->cur_result = h->result;
        dev->cur_result_len = h->result_len;
        dev->cur_payload_len = h->payload_len;
        dev->cur_notify = h->notify;
        dev->cur_notify_tag = h->notify_tag;
    }
    /* Written by many threads, released by thread 0: each writer fences,
     * or another block may read an old word. */
    __threadfence();
    __syncthreads();
}

__device__ __forceinline__ void processor(xtq__cuda_dev *dev, uint32_t tag)
{
    __shared__ pshared S;
    __shared__ qcache C;
    const uint32_t tid = threadIdx.x;
    xtq__cuda_ctl *ctl = (xtq__cuda_ctl *)dev->ctl;
    if (dev->abi != XTQ_CUDA_ABI_VERSION) {
        /* Built against other headers: touch nothing but the report. */
        if (blockIdx.x == 0 && tid == 0) {
            ctl->abi_seen = XTQ_CUDA_ABI_VERSION;
            ctl->error = -XTQ_EVERSION;
            __threadfence_system();
        }
        return;
    }
    if (blockIdx.x == 0 && tid == 0) {
        ctl->abi_seen = XTQ_CUDA_ABI_VERSION;
#if defined(__CUDACC_RDC__)
        ctl->caps = XTQ__CUDA_CAP_GRID;
#else
        ctl->caps = 0;
#endif
        ctl->running = tag;
    }
    uint64_t gen = ld_acquire_gpu_u64((const void *)&dev->gen);
#if defined(__CUDACC_RDC__)
    /* Grid tags go on from the last processor's (they persist in dev, as
     * dev->completed does): restarting at 0 after a relaunch (idle exit,
     * quiesce) gave the first grid the tag the last one before the exit
     * may have completed with, and block 0 then went on without waiting
     * for it (libxtq_coll on 4 H100s hung: session 10). Every attempt
     * counts one of the two. */
    uint32_t grid_seq = (uint32_t)(dev->grid_launches + dev->grid_failures);
#endif

    if (blockIdx.x == 0) {
        pollstate ps = {0, 0, 0, 0, 0, 0, 0};
        ps.version = *(volatile uint32_t *)&dev->version;
        load_table(dev, C, ps.version);
        for (;;) {
            int li = take_packet(dev, C, S, ps);
            if (li < 0)
                break;
            const uint64_t index = C.rd[li] - 1;
            const xtq__cuda_inline *h = inl_hdr(S);
            xtq_aql_packet_t *pkt = buf_packet(S);
            const uint32_t type = pkt->header & 0xffu;
            const uint64_t sig = pkt->kernel.completion_signal.handle; /* same offset in all */
            if (type != XTQ_PACKET_TYPE_KERNEL_DISPATCH) {
                if (tid == 0) {
                    int32_t st = type == XTQ_PACKET_TYPE_AGENT_DISPATCH ? -XTQ_EAGENTKIND
                                                                        : -XTQ_EPACKET;
                    if (type == XTQ_PACKET_TYPE_BARRIER_AND || type == XTQ_PACKET_TYPE_BARRIER_OR) {
                        uint32_t bns = 0;
                        st = 0;
                        while (!barrier_ready(&pkt->barrier, type == XTQ_PACKET_TYPE_BARRIER_OR)) {
                            if (dev->stop) {
                                st = 1;
                                break;
                            }
                            bns = bns ? min(bns * 2, C.poll_ns_max) : 32;
                            __nanosleep(bns);
                        }
                    }
                    S.cmd = st;
                    if (st <= 0)
                        complete_local(dev, C, li, index, st, sig, h);
                    else
                        C.rd[li] = index; /* stopping: the next processor waits again */
                    if (st > 0)
                        *(volatile uint64_t *)&dev->q[li].rd = index;
                }
                __syncthreads();
                if (S.cmd > 0)
                    break;
                continue;
            }
            /* The last thread checks the dispatch (device memory, unless
             * the poll prefetched this kernel's descriptor) while the
             * others fetch arguments that are not inline, when the
             * inline header says how long they are (checked). */
            const uint32_t inl_ks = h->kernarg_len;
            const uint32_t hint = inl_ks ? 0 : h->kernarg_ext;
            const void *karg_src = pkt->kernel.kernarg_address;
            const bool early = !inl_ks && hint && hint <= XTQ_CUDA_MAX_KERNARG && karg_src;
            if (tid == XTQ__CUDA_THREADS - 1) {
                const bool pre =
                    (S.kd_ok != 0) & (C.last_kobj[li] == pkt->kernel.kernel_object);
                uint64_t key[3];
                shape_key(&pkt->kernel, key);
                const bool same = (C.shape_groups[li] != 0) & (key[0] == C.shape[li][0]) &
                                  (key[1] == C.shape[li][1]) & (key[2] == C.shape[li][2]);
                if (pre & same) {
                    /* This queue's last kernel and shape: the geometry and
                     * the object's range were checked then; the
                     * descriptor, read in this poll, is checked again. */
                    S.rc = check_kdesc(S.kd, &pkt->kernel, tag, &S.fn, &S.ks);
                    S.total = C.shape_groups[li];
                } else {
                    S.rc = check_dispatch(C.kdesc, &pkt->kernel, tag, pre ? &S.kd : NULL,
                                          &S.fn, &S.ks, &S.total);
                    if (S.rc == 0) {
                        C.last_kobj[li] = pkt->kernel.kernel_object;
                        C.shape[li][0] = key[0];
                        C.shape[li][1] = key[1];
                        C.shape[li][2] = key[2];
                        C.shape_groups[li] = S.total;
                    }
                }
                if (S.rc == 0 && ((inl_ks && inl_ks != S.ks) || (early && hint != S.ks)))
                    S.rc = -XTQ_EKERNARG;
                /* The inline copy holds what its header says it holds. */
                const uint64_t have = (uint64_t)h->nlines * XTQ__CUDA_LINE_DATA;
                const uint64_t k16 = XTQ__CUDA_INLINE_KERNARG + ((inl_ks + 15u) & ~15u);
                if (S.rc == 0 && inl_ks && k16 > have)
                    S.rc = -XTQ_EKERNARG;
                if (S.rc == 0 && (h->flags & XTQ__CUDA_INLINE_PAYLOAD) &&
                    (!inl_ks || inl_ks < 16 || k16 + h->payload_len > have))
                    S.rc = -XTQ_EPACKET;
                S.status = 0;
            } else if (early) {
                copy_kernarg(buf_kernarg(S), karg_src, hint, KARG_HOST, XTQ__CUDA_THREADS - 1);
            }
            __syncthreads();
            if (S.rc) {
                if (tid == 0)
                    complete_local(dev, C, li, index, S.rc, sig, h);
                __syncthreads();
                continue;
            }
            const uint32_t ks = S.ks, total = S.total;
            const uint64_t fn = S.fn;
            if (!inl_ks && !early) {
                copy_kernarg(buf_kernarg(S), karg_src, ks, KARG_HOST);
                __syncthreads();
            }
            uint64_t args_ns = 0;
            if (tid == 0)
                args_ns = gpu_clock_ns();
            uint8_t *karg = buf_kernarg(S);
            const bool grid = C.grid_min && total >= C.grid_min;
            if (h->flags & XTQ__CUDA_INLINE_PAYLOAD) {
                /* Argument 1 points at the processor's copy. */
                uint8_t *inl = karg + ((ks + 15u) & ~15u);
                if (total > 1) {
                    copy_kernarg(dev->inl_payload, inl, (uint32_t)((h->payload_len + 3) & ~3ull),
                                 KARG_SHARED);
                    inl = dev->inl_payload;
                }
                __syncthreads();
                if (tid == 0)
                    *(uint64_t *)(karg + 8) = (uint64_t)(uintptr_t)inl;
            } else if (!grid) {
                /* A grid reads the payload in place, every SM at once. */
                stage_payload(C, h->payload_len, karg, ks);
            }
            __syncthreads();
            if (total == 1) {
                /* One work-group: this block runs it alone, nothing to
                 * publish to the others. */
                uint64_t start_ns = 0, end_ns = 0;
                if (tid == 0)
                    start_ns = gpu_clock_ns();
                xtq_cuda_dispatch_t d;
                dispatch_init(&d, &pkt->kernel, &S.status, h->result, h->result_len, h->payload_len);
                run_group(&d, 0, fn, karg);
                __syncthreads();
                if (tid == 0) {
                    end_ns = gpu_clock_ns();
                    complete_local(dev, C, li, index, S.status, sig, h);
                    uint64_t done_ns = gpu_clock_ns();
                    /* After the completion: these stores cost it nothing. */
                    dev->prof[PROF_SEEN] = ps.seen_ns;
                    dev->prof[PROF_UNPACKED] = ps.unpacked_ns;
                    dev->prof[PROF_ARGS] = args_ns;
                    dev->prof[PROF_PUBLISHED] = start_ns;
                    dev->prof[PROF_START] = start_ns;
                    dev->prof[PROF_END] = end_ns;
                    dev->prof[PROF_DONE] = done_ns;
                }
                __syncthreads();
                continue;
            }
            publish_dispatch(dev, S, (uint32_t)li, index, ks);
            if (tid == 0) {
                dev->prof[PROF_SEEN] = ps.seen_ns;
                dev->prof[PROF_UNPACKED] = ps.unpacked_ns;
                dev->prof[PROF_ARGS] = args_ns;
            }
#if defined(__CUDACC_RDC__)
            if (grid) {
                /* The whole GPU: a grid of its own, started from here. */
                if (tid == 0) {
                    const uint32_t tag_now = 0x80000000u | (++grid_seq & 0x7fffffffu);
                    dev->grid_done = 0;
                    uint32_t nb = min(total, max(C.grid_blocks_max, 1u));
                    __threadfence();
                    dev->prof[PROF_PUBLISHED] = gpu_clock_ns();
                    grid_kernel<<<nb, XTQ__CUDA_THREADS, 0, cudaStreamFireAndForget>>>(dev, tag_now);
                    S.rc = (int)cudaGetLastError();
                    if (S.rc == 0) {
                        dev->grid_launches++;
                        /* In order: the next packet waits for this one. */
                        while ((uint32_t)ld_acquire_gpu_u64((const void *)&dev->completed) !=
                               tag_now)
                            __nanosleep(64);
                    } else {
                        dev->grid_failures++;
                    }
                }
                __syncthreads();
                if (S.rc == 0)
                    continue;
                /* Refused (launch limits): the processor's blocks run it. */
            }
#endif
            gen++;
            const uint32_t tag_now = (uint32_t)gen & 0x7fffffffu;
            if (tid == 0) {
                dev->groups_done = 0;
                dev->claim = (unsigned long long)tag_now << 32;
                dev->dispatch = ((uint64_t)tag_now << 32) | total;
                st_release_gpu_u64((void *)&dev->gen, gen);
                dev->prof[PROF_PUBLISHED] = gpu_clock_ns();
            }
            __syncthreads();
            run_groups(dev, tag_now, &pkt->kernel, fn, karg, total);
            if (tid == 0) {
                /* In order: the next packet waits for this one. */
                while ((uint32_t)ld_acquire_gpu_u64((const void *)&dev->completed) != tag_now)
                    __nanosleep(64);
            }
            __syncthreads();
        }
        return;
    }

    /* Blocks 1..: run work-groups of dispatches block 0 publishes. */
    xtq_kernel_dispatch_packet_t *pkt = &buf_packet(S)->kernel;
    for (;;) {
        if (tid == 0) {
            uint32_t ns = 0, idle = 0;
            uint64_t g;
            int cmd = 1;
            while ((g = ld_acquire_gpu_u64((const void *)&dev->gen)) == gen) {
                if (dev->stop) {
                    cmd = -1;
                    break;
                }
                if (idle < 4096) {
                    ++idle;
                } else {
                    ns = ns ? min(ns * 2, dev->poll_ns_max) : 32;
                    __nanosleep(ns);
                }
            }
            S.cmd = cmd;
            S.gen = g;
            if (cmd > 0)
                S.disp = ld_acquire_gpu_u64((const void *)&dev->dispatch);
        }
        __syncthreads();
        if (S.cmd < 0)
            break;
        gen = S.gen;
        /* Tag and group count from one word; the packet, function and
         * arguments read after it belong to that dispatch or a later
         * one. A stale view claims nothing: the claim word's tag has
         * moved on, or every group of the tag is taken. */
        const uint32_t tag_seen = (uint32_t)(S.disp >> 32), total = (uint32_t)S.disp;
        if (tid < sizeof(*pkt) / 4)
            ((uint32_t *)pkt)[tid] = __ldcg((const unsigned int *)&dev->cur + tid);
        __syncthreads();
        uint32_t ks = *(volatile uint32_t *)&dev->cur_kernarg_size;
        uint64_t fn = *(volatile uint64_t *)&dev->cur_fn;
        copy_kernarg(buf_kernarg(S), dev->kernarg, ks, KARG_DEVICE);
        __syncthreads();
        run_groups(dev, tag_seen, pkt, fn, buf_kernarg(S), total);
        __syncthreads();
    }
}

} // namespace
} // namespace xtq_cuda_detail

/**
 * Instantiate the processor in this module, as `<name>_xtq_processor`, and
 * its launcher `<name>_xtq_launch` (an xtq_cuda_launch_fn) for
 * xtq_cuda_attach() / xtq_cuda_module_attach(). Once per module.
 */
#define XTQ_CUDA_MODULE(name)                                                                  \
    extern "C" __global__ void __launch_bounds__(XTQ_CUDA_MAX_WORKGROUP, 1)                    \
        name##_xtq_processor(struct xtq__cuda_dev *dev, uint32_t tag)                          \
    {                                                                                          \
        xtq_cuda_detail::processor(dev, tag);                                                  \
    }                                                                                          \
    extern "C" int name##_xtq_launch(void *state, uint32_t tag, unsigned blocks, void *stream) \
    {                                                                                          \
        name##_xtq_processor<<<blocks, XTQ_CUDA_MAX_WORKGROUP, 0, (cudaStream_t)stream>>>(     \
            (struct xtq__cuda_dev *)state, tag);                                               \
        return (int)cudaGetLastError();                                                        \
    }

#endif /* XTQ_CUDA_PROCESSOR_CUH */
