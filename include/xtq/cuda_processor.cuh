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
 * compilation (-rdc) the module is everything device-linked together, so
 * tasks may live in several .cu files; without it, in this one.
 *
 * How it runs: one launch of `blocks` x 256 threads for as long as the
 * module is attached. Thread 0 of block 0 polls the slot header at each
 * queue's read index in pinned host memory (one PCIe read per queue per
 * poll; naps with __nanosleep once idle), takes the packet, and publishes
 * kernel dispatches to every block through device memory. Blocks claim
 * work-groups and call the task once per work-item. The last block to
 * finish decrements the completion signal and writes a completion-ring
 * entry that a host thread turns into the retire callback.
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
struct queue_indices {
    uint64_t write_index;
    uint8_t pad0_[56];
    uint64_t read_index;
    uint8_t pad1_[56];
};

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

__device__ __forceinline__ void st_release_gpu_u64(void *p, uint64_t v)
{
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t gpu_clock_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

enum { PROF_HEADER, PROF_BODY, PROF_KARG, PROF_PUBLISHED, PROF_START, PROF_END, PROF_FENCED };

__device__ __forceinline__ void nap(uint32_t *ns, uint32_t *idle, uint32_t max_ns)
{
    /* Spin hot for a while after the last packet (latency under load),
     * then back off to at most max_ns per poll (power when idle). */
    if (*idle < 4096) {
        ++*idle;
        return;
    }
    *ns = *ns ? min(*ns * 2, max_ns) : 32;
    __nanosleep(*ns);
}

/*
 * Complete packet `index` of queue `q` (taken, run or refused): one system
 * fence per packet, and no read of host memory on the way (each costs a
 * PCIe round trip; the fences drain the writes before them). Before the
 * fence: the completion entry's fields and the slot's release (cookie
 * cleared, header INVALID; the slot was kept while the packet ran). After
 * it: the entry's seq and the published read index. The task's own writes
 * were ordered before by the caller. Without native host atomics the GPU
 * cannot decrement a host signal without losing updates, so the entry
 * names the signal and the host's retire thread decrements it.
 */
__device__ void complete(xtq__cuda_dev *dev, uint32_t q, uint64_t index, uint64_t cookie,
                         uint64_t signal, int32_t status)
{
    xtq__cuda_qdesc *qd = &dev->q[q];
    xtq__cuda_done *ring = (xtq__cuda_done *)qd->done;
    const xtq__cuda_qhost *qh = (const xtq__cuda_qhost *)qd->qhost;
    uint64_t size = (uint64_t)qd->mask + 1;
    uint32_t ns = 0;
    /* Flow control: the host must have consumed entry index - size. Reads
     * host memory only when the cached count says the ring may be full. */
    while (index - qd->retired_cache >= size) {
        qd->retired_cache = ld_acquire_sys_u64((const void *)&qh->retired);
        if (index - qd->retired_cache < size || dev->stop)
            break;
        ns = ns ? min(ns * 2, 4096u) : 64;
        __nanosleep(ns);
    }
    xtq__cuda_done *e = &ring[index & qd->mask];
    xtq_aql_packet_t *slot = (xtq_aql_packet_t *)qd->ring + (index & qd->mask);
    *(volatile uint64_t *)&e->cookie = cookie;
    *(volatile int32_t *)&e->status = status;
    *(volatile uint64_t *)&e->signal = dev->host_atomics ? 0 : signal;
    if (qd->cookies)
        *((volatile uint64_t *)qd->cookies + (index & qd->mask)) = 0;
    *(volatile uint16_t *)&slot->header = XTQ_PACKET_TYPE_INVALID;
    __threadfence_system();
    if (signal && dev->host_atomics)
        atomicAdd_system((unsigned long long *)signal, ~0ull); /* value -= 1 */
    *(volatile uint64_t *)&((queue_indices *)qd->idx)->read_index = index + 1;
    *(volatile uint64_t *)&e->seq = index + 1;
    dev->packets++;
    if (status && !dev->error_seen) {
        dev->error_seen = 1;
        ((xtq__cuda_ctl *)dev->ctl)->error = status;
    }
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

/* Validate a kernel dispatch; 0 or a negative XTQ code. Fills cur_fn,
 * cur_kernarg_size and cur_total, and *fn / *ks / *total for block 0. */
__device__ int check_dispatch(xtq__cuda_dev *dev, const xtq_kernel_dispatch_packet_t *k,
                              uint32_t tag, uint64_t *fn, uint32_t *ks, uint32_t *ngroups)
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
    uint64_t base = dev->kdesc, obj = k->kernel_object;
    if (obj < base || obj >= base + XTQ__CUDA_MAX_KERNELS * sizeof(xtq__cuda_kdesc) ||
        (obj - base) % sizeof(xtq__cuda_kdesc))
        return -XTQ_ENOKERNEL;
    /* The descriptor in one load (one trip to device memory). */
    uint4 w = ld_volatile_v4((const void *)obj);
    xtq__cuda_kdesc kd;
    memcpy(&kd, &w, sizeof(kd));
    /* A task of another module: calling it would fault the whole GPU
     * context. Its packet completes with the error instead. */
    if (!kd.live || !kd.fn || kd.module != tag)
        return -XTQ_ENOKERNEL;
    if (kd.kernarg_size && !k->kernarg_address)
        return -XTQ_EKERNARG;
    dev->cur_fn = kd.fn;
    dev->cur_kernarg_size = kd.kernarg_size;
    dev->cur_total = (uint32_t)total;
    *fn = kd.fn;
    *ks = kd.kernarg_size;
    *ngroups = (uint32_t)total;
    return 0;
}

/* Block 0, thread 0: wait for a packet on any queue and take it. Barriers
 * and refused packets are completed here (0); a kernel dispatch is left
 * in *out (shared memory) for block 0 to check and run (1); -1: stop. */
__device__ int take_packet(xtq__cuda_dev *dev, uint32_t *qnext, uint32_t *version,
                           xtq_kernel_dispatch_packet_t *out)
{
    uint32_t ns = 0, idle = 0;
    xtq__cuda_ctl *ctl = (xtq__cuda_ctl *)dev->ctl;
    for (;;) {
        if (dev->stop)
            return -1;
        uint32_t v = dev->version;
        if (v != *version) {
            /* The host waits for this before freeing a removed queue. */
            __threadfence();
            *version = v;
            ctl->version_seen = v;
        }
        uint32_t nq = dev->nq;
        for (uint32_t k = 0; k < nq; k++) {
            uint32_t qi = (*qnext + k) % nq;
            xtq__cuda_qdesc *qd = &dev->q[qi];
            if (!*(volatile uint32_t *)&qd->active)
                continue;
            uint64_t rd = qd->rd;
            const xtq_aql_packet_t *slot = (const xtq_aql_packet_t *)qd->ring + (rd & qd->mask);
            uint32_t hw = ld_acquire_sys_u32(slot);
            if ((hw & 0xffu) == XTQ_PACKET_TYPE_INVALID)
                continue;
            dev->prof[PROF_HEADER] = gpu_clock_ns();
            /* Body and cookie: independent loads, in flight together. */
            const uint4 *src = (const uint4 *)slot;
            uint4 w0 = ld_volatile_v4(src), w1 = ld_volatile_v4(src + 1);
            uint4 w2 = ld_volatile_v4(src + 2), w3 = ld_volatile_v4(src + 3);
            uint64_t cookie = 0;
            if (qd->cookies)
                cookie = *((const volatile uint64_t *)qd->cookies + (rd & qd->mask));
            xtq_aql_packet_t pkt;
            uint4 *dst = (uint4 *)&pkt;
            dst[0] = w0;
            dst[1] = w1;
            dst[2] = w2;
            dst[3] = w3;
            pkt.header = (uint16_t)hw;
            dev->prof[PROF_BODY] = gpu_clock_ns();
            /* The slot stays ours until complete() frees it with the
             * completion: one fence for both. */
            qd->rd = rd + 1;
            *qnext = qi + 1;

            uint32_t type = pkt.header & 0xffu;
            uint64_t sig = pkt.kernel.completion_signal.handle; /* same offset in all */
            if (type == XTQ_PACKET_TYPE_KERNEL_DISPATCH) {
                *out = pkt.kernel;
                dev->cur_cookie = cookie;
                dev->cur_index = rd;
                dev->cur_queue = qi;
                return 1;
            }
            if (type == XTQ_PACKET_TYPE_BARRIER_AND || type == XTQ_PACKET_TYPE_BARRIER_OR) {
                uint32_t bns = 0;
                while (!barrier_ready(&pkt.barrier, type == XTQ_PACKET_TYPE_BARRIER_OR)) {
                    if (dev->stop)
                        return -1;
                    bns = bns ? min(bns * 2, dev->poll_ns_max) : 32;
                    __nanosleep(bns);
                }
                complete(dev, qi, rd, cookie, sig, 0);
                return 0;
            }
            complete(dev, qi, rd, cookie, sig,
                     type == XTQ_PACKET_TYPE_AGENT_DISPATCH ? -XTQ_EAGENTKIND : -XTQ_EPACKET);
            return 0;
        }
        nap(&ns, &idle, dev->poll_ns_max);
    }
}

/* Fill the work-item coordinates a task sees (group coordinates aside). */
__device__ void dispatch_init(xtq_cuda_dispatch_t *d, const xtq_kernel_dispatch_packet_t *k)
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

/* A dispatch of one work-group, run by block 0 alone. */
__device__ void run_one_group(const xtq_kernel_dispatch_packet_t *k, uint64_t fn_addr,
                              void *kernarg)
{
    xtq_cuda_dispatch_t d;
    dispatch_init(&d, k);
    run_group(&d, 0, fn_addr, kernarg);
}

/* Every block: claim work-groups of dispatch `tag` (of `total` groups)
 * and run them. */
__device__ void run_groups(xtq__cuda_dev *dev, uint32_t tag, const xtq_kernel_dispatch_packet_t *k,
                           uint64_t fn_addr, void *kernarg, uint32_t total)
{
    __shared__ uint32_t s_group;
    const uint32_t tid = threadIdx.x;
    xtq_cuda_dispatch_t d;
    dispatch_init(&d, k);
    uint32_t ran = 0;
    for (;;) {
        if (tid == 0) {
            unsigned long long c = *(volatile unsigned long long *)&dev->claim;
            uint32_t g = ~0u;
            for (;;) {
                if ((uint32_t)(c >> 32) != tag || (uint32_t)c >= total)
                    break;
                unsigned long long prev = atomicCAS(&dev->claim, c, c + 1);
                if (prev == c) {
                    g = (uint32_t)c;
                    break;
                }
                c = prev;
            }
            s_group = g;
        }
        __syncthreads();
        uint32_t g = s_group;
        __syncthreads();
        if (g == ~0u)
            break;
        if (g == 0 && tid == 0)
            dev->prof[PROF_START] = gpu_clock_ns();
        run_group(&d, g, fn_addr, kernarg);
        ran++;
    }
    __syncthreads();
    if (tid == 0 && ran) {
        /* The block's task writes, before the count the last block reads;
         * its system fence in complete() carries them further. */
        __threadfence();
        uint32_t prev = atomicAdd(&dev->groups_done, ran);
        if (prev + ran == total) {
            dev->prof[PROF_END] = gpu_clock_ns();
            complete(dev, dev->cur_queue, dev->cur_index, dev->cur_cookie,
                     k->completion_signal.handle, 0);
            dev->prof[PROF_FENCED] = gpu_clock_ns();
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
    if (!(((uintptr_t)src | size) & 3)) {
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
__device__ void stage_payload(xtq__cuda_dev *dev, const xtq_kernel_dispatch_packet_t *k,
                              uint8_t *karg, uint32_t ks)
{
    uint64_t len = k->reserved2;
    if (!dev->copy_min || len < dev->copy_min || len > dev->stage_len || ks < 16)
        return;
    const uint8_t *src = *(const uint8_t *const *)(karg + 8);
    uint8_t *dst = (uint8_t *)dev->stage;
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

__device__ __forceinline__ void processor(xtq__cuda_dev *dev, uint32_t tag)
{
    __shared__ xtq_kernel_dispatch_packet_t s_pkt;
    __shared__ __align__(16) uint8_t s_karg[XTQ_CUDA_MAX_KERNARG];
    __shared__ int s_cmd;
    __shared__ uint64_t s_gen, s_disp, s_fn;
    __shared__ uint32_t s_ks, s_total;
    __shared__ int s_rc;
    const uint32_t tid = threadIdx.x;
    uint32_t qnext = 0, version = ~0u;
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
        ctl->running = tag;
    }
    uint64_t gen = ld_acquire_gpu_u64((const void *)&dev->gen);

    for (;;) {
        if (blockIdx.x == 0) {
            if (tid == 0)
                s_cmd = take_packet(dev, &qnext, &version, &s_pkt);
            __syncthreads();
            int cmd = s_cmd;
            if (cmd < 0)
                break;
            if (cmd == 0) {
                __syncthreads();
                continue;
            }
            /* The last thread checks the dispatch (a trip to device memory)
             * while the others fetch the arguments from host memory (a
             * trip over PCIe), when the engine said how long they are
             * (reserved0; XTQ packets always, checked against the kernel). */
            const uint32_t hint = s_pkt.reserved0;
            const void *karg_src = s_pkt.kernarg_address;
            const bool early = hint && hint <= XTQ_CUDA_MAX_KERNARG && karg_src;
            if (tid == XTQ__CUDA_THREADS - 1) {
                s_rc = check_dispatch(dev, &s_pkt, tag, &s_fn, &s_ks, &s_total);
                if (s_rc == 0 && early && hint != s_ks)
                    s_rc = -XTQ_EKERNARG;
            } else if (early) {
                copy_kernarg(s_karg, karg_src, hint, KARG_HOST, XTQ__CUDA_THREADS - 1);
            }
            __syncthreads();
            if (s_rc) {
                if (tid == 0)
                    complete(dev, dev->cur_queue, dev->cur_index, dev->cur_cookie,
                             s_pkt.completion_signal.handle, s_rc);
                __syncthreads();
                continue;
            }
            const uint32_t ks = s_ks, total = s_total;
            const uint64_t fn = s_fn;
            if (!early) {
                copy_kernarg(s_karg, karg_src, ks, KARG_HOST);
                __syncthreads();
            }
            if (tid == 0)
                dev->prof[PROF_KARG] = gpu_clock_ns();
            stage_payload(dev, &s_pkt, s_karg, ks);
            __syncthreads();
            if (total == 1) {
                /* One work-group: this block runs it alone, nothing to
                 * publish to the others. */
                if (tid == 0)
                    dev->prof[PROF_PUBLISHED] = dev->prof[PROF_START] = gpu_clock_ns();
                run_one_group(&s_pkt, fn, s_karg);
                __syncthreads();
                if (tid == 0) {
                    dev->prof[PROF_END] = gpu_clock_ns();
                    complete(dev, dev->cur_queue, dev->cur_index, dev->cur_cookie,
                             s_pkt.completion_signal.handle, 0);
                    dev->prof[PROF_FENCED] = gpu_clock_ns();
                }
                __syncthreads();
                continue;
            }
            copy_kernarg(dev->kernarg, s_karg, ks, KARG_SHARED);
            if (tid < sizeof(s_pkt) / 4)
                ((uint32_t *)&dev->cur)[tid] = ((const uint32_t *)&s_pkt)[tid];
            /* Written by many threads, released by thread 0 with gen: each
             * writer fences, or another block may read an old word. */
            __threadfence();
            __syncthreads();
            gen++;
            const uint32_t tag_now = (uint32_t)gen;
            if (tid == 0) {
                dev->groups_done = 0;
                dev->claim = (unsigned long long)tag_now << 32;
                dev->dispatch = ((uint64_t)tag_now << 32) | total;
                st_release_gpu_u64((void *)&dev->gen, gen);
                dev->prof[PROF_PUBLISHED] = gpu_clock_ns();
            }
            __syncthreads();
            run_groups(dev, tag_now, &s_pkt, fn, s_karg, total);
            if (tid == 0) {
                /* In order: the next packet waits for this one. */
                while ((uint32_t)ld_acquire_gpu_u64((const void *)&dev->completed) != tag_now)
                    __nanosleep(64);
            }
            __syncthreads();
        } else {
            if (tid == 0) {
                uint32_t ns = 0, idle = 0;
                uint64_t g;
                int cmd = 1;
                while ((g = ld_acquire_gpu_u64((const void *)&dev->gen)) == gen) {
                    if (dev->stop) {
                        cmd = -1;
                        break;
                    }
                    nap(&ns, &idle, dev->poll_ns_max);
                }
                s_cmd = cmd;
                s_gen = g;
                if (cmd > 0)
                    s_disp = ld_acquire_gpu_u64((const void *)&dev->dispatch);
            }
            __syncthreads();
            if (s_cmd < 0)
                break;
            gen = s_gen;
            /* Tag and group count from one word; the packet, function and
             * arguments read after it belong to that dispatch or a later
             * one. A stale view claims nothing: the claim word's tag has
             * moved on, or every group of the tag is taken. */
            const uint32_t tag_seen = (uint32_t)(s_disp >> 32), total = (uint32_t)s_disp;
            if (tid < sizeof(s_pkt) / 4)
                ((uint32_t *)&s_pkt)[tid] = __ldcg((const unsigned int *)&dev->cur + tid);
            __syncthreads();
            uint32_t ks = *(volatile uint32_t *)&dev->cur_kernarg_size;
            uint64_t fn = *(volatile uint64_t *)&dev->cur_fn;
            copy_kernarg(s_karg, dev->kernarg, ks, KARG_DEVICE);
            __syncthreads();
            run_groups(dev, tag_seen, &s_pkt, fn, s_karg, total);
            __syncthreads();
        }
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
