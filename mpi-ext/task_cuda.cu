/*
 * The layer's CUDA task module: accumulates and puts into windows whose
 * memory is on a GPU, run by the CUDA agent's persistent processor (this
 * module instantiates it: <xtq/cuda_processor.cuh>, one module per agent
 * at a time; see docs/mpi.md for sharing it with apps/allreduce).
 *
 * One dispatch per command; its work-items stride over the target blocks
 * (task.h), one element each step. Elements are updated with the GPU's
 * atomics where one exists (add, and/or/xor) and with a compare-and-swap
 * loop on the aligned 32- or 64-bit word otherwise, so an element of up
 * to 8 bytes is never half updated. Complex SUM adds each part
 * atomically; the other 16-byte updates (complex double PROD and
 * REPLACE, double_int, long_int) are plain loads and stores: each element
 * has one work-item and the processor runs one dispatch at a time, so no
 * other command interleaves with them. The payload is read where it
 * landed, byte-wise when it is not aligned.
 *
 * Fetching kinds (get_accumulate, fetch_and_op, compare_and_swap, get)
 * need a result buffer on the CUDA agent that the API contract does not
 * give yet: the origin refuses them on GPU windows (docs/mpi.md).
 */
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <xtq/coll_cuda.cuh>
#include <xtq/cuda_processor.cuh>
#include <xtq/reduce.h>

#include "task.h"

namespace
{

template <typename T> __device__ T load(const uint8_t *p)
{
    T v;
    if (((uintptr_t)p % sizeof(T)) == 0) {
        v = *(const T *)p;
    } else {
        uint8_t *d = (uint8_t *)&v;
        for (unsigned i = 0; i < sizeof(T); i++)
            d[i] = p[i];
    }
    return v;
}

/* Integer operations (wrapping arithmetic in the unsigned type). */
template <typename T, typename U> __device__ T int_op(int op, T a, T b)
{
    switch (op) {
    case XTQ_OP_SUM:
        return (T)(U)((U)a + (U)b);
    case XTQ_OP_PROD:
        return (T)(U)((U)a * (U)b);
    case XTQ_OP_MAX:
        return b > a ? b : a;
    case XTQ_OP_MIN:
        return b < a ? b : a;
    case XTQ_OP_LAND:
        return (T)(a && b);
    case XTQ_OP_LOR:
        return (T)(a || b);
    case XTQ_OP_LXOR:
        return (T)(!a != !b);
    case XTQ_OP_BAND:
        return (T)(a & b);
    case XTQ_OP_BOR:
        return (T)(a | b);
    case XTQ_OP_BXOR:
        return (T)(a ^ b);
    case XTQ_OP_REPLACE:
        return b;
    default:
        return a;
    }
}

template <typename T> __device__ T real_op(int op, T a, T b)
{
    switch (op) {
    case XTQ_OP_SUM:
        return a + b;
    case XTQ_OP_PROD:
        return a * b;
    case XTQ_OP_MAX:
        return b > a ? b : a;
    case XTQ_OP_MIN:
        return b < a ? b : a;
    case XTQ_OP_REPLACE:
        return b;
    default:
        return a;
    }
}

/* Compare-and-swap loop on the aligned word holding `size` bytes at p
 * (1, 2 or 4 bytes in a 32-bit word; 8 bytes in a 64-bit word). F maps
 * the old element bits to the new ones. */
template <typename F> __device__ void rmw_bits(uint8_t *p, unsigned size, F f)
{
    if (size == 8) {
        unsigned long long *w = (unsigned long long *)p;
        unsigned long long old = *(volatile unsigned long long *)w, seen;
        for (;;) {
            seen = atomicCAS(w, old, f(old));
            if (seen == old)
                break;
            old = seen;
        }
        return;
    }
    uintptr_t addr = (uintptr_t)p;
    unsigned int *w = (unsigned int *)(addr & ~(uintptr_t)3);
    unsigned shift = (unsigned)(addr & 3) * 8;
    unsigned int mask = size == 4 ? 0xffffffffu : ((1u << (size * 8)) - 1) << shift;
    unsigned int old = *(volatile unsigned int *)w, seen;
    for (;;) {
        unsigned long long cur = (old & mask) >> shift;
        unsigned int next = (old & ~mask) | (((unsigned int)f(cur) << shift) & mask);
        seen = atomicCAS(w, old, next);
        if (seen == old)
            break;
        old = seen;
    }
}

template <typename T> __device__ unsigned long long bits_of(T v)
{
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}

template <typename T> __device__ T from_bits(unsigned long long b)
{
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

template <typename T, typename U> __device__ void int_elem(int op, uint8_t *t, const uint8_t *o)
{
    T b = load<T>(o);
    if (op == XTQ_OP_NO_OP)
        return;
    if (sizeof(T) == 4 && op == XTQ_OP_SUM)
        atomicAdd((unsigned int *)t, (unsigned int)b);
    else if (sizeof(T) == 8 && op == XTQ_OP_SUM)
        atomicAdd((unsigned long long *)t, (unsigned long long)b);
    else if (sizeof(T) == 4 && op == XTQ_OP_BAND)
        atomicAnd((unsigned int *)t, (unsigned int)b);
    else if (sizeof(T) == 4 && op == XTQ_OP_BOR)
        atomicOr((unsigned int *)t, (unsigned int)b);
    else if (sizeof(T) == 4 && op == XTQ_OP_BXOR)
        atomicXor((unsigned int *)t, (unsigned int)b);
    else
        rmw_bits(t, sizeof(T), [=](unsigned long long cur) {
            return bits_of(int_op<T, U>(op, from_bits<T>(cur), b));
        });
}

template <typename T> __device__ void real_elem(int op, uint8_t *t, const uint8_t *o)
{
    T b = load<T>(o);
    if (op == XTQ_OP_NO_OP)
        return;
    if (op == XTQ_OP_SUM)
        atomicAdd((T *)t, b);
    else
        rmw_bits(t, sizeof(T), [=](unsigned long long cur) {
            return bits_of(real_op<T>(op, from_bits<T>(cur), b));
        });
}

/* 16-bit reals, computed in float. */
__device__ void half_elem(int op, bool bf16, uint8_t *t, const uint8_t *o)
{
    uint16_t b = load<uint16_t>(o);
    if (op == XTQ_OP_NO_OP)
        return;
    rmw_bits(t, 2, [=](unsigned long long cur) {
        float x, y, r;
        if (bf16) {
            x = __bfloat162float(__ushort_as_bfloat16((unsigned short)cur));
            y = __bfloat162float(__ushort_as_bfloat16(b));
        } else {
            x = __half2float(__ushort_as_half((unsigned short)cur));
            y = __half2float(__ushort_as_half(b));
        }
        r = real_op<float>(op, x, y);
        return (unsigned long long)(bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(r))
                                         : __half_as_ushort(__float2half_rn(r)));
    });
}

template <typename T> struct pair {
    T v;
    int i;
};

template <typename P> __device__ P loc_op(int op, P a, P b)
{
    if (op == XTQ_OP_REPLACE)
        return b;
    if (op == XTQ_OP_MAXLOC)
        return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
    if (op == XTQ_OP_MINLOC)
        return (b.v < a.v || (b.v == a.v && b.i < a.i)) ? b : a;
    return a;
}

/* 8-byte pairs ({float; int}, {int; int}, {short; int}): one CAS. */
template <typename P> __device__ void pair8_elem(int op, uint8_t *t, const uint8_t *o)
{
    P b = load<P>(o);
    if (op == XTQ_OP_NO_OP)
        return;
    rmw_bits(t, 8,
             [=](unsigned long long cur) { return bits_of(loc_op(op, from_bits<P>(cur), b)); });
}

/* 16-byte pairs: the processor runs one dispatch at a time and each
 * element has one work-item, so a plain update is not interleaved with
 * another command's. */
template <typename P> __device__ void pair16_elem(int op, uint8_t *t, const uint8_t *o)
{
    P b = load<P>(o);
    if (op == XTQ_OP_NO_OP)
        return;
    P a = load<P>(t);
    P r = loc_op(op, a, b);
    memcpy(t, &r, sizeof(P));
}

template <typename T> __device__ void complex_elem(int op, uint8_t *t, const uint8_t *o)
{
    T br = load<T>(o), bi = load<T>(o + sizeof(T));
    if (op == XTQ_OP_NO_OP)
        return;
    if (op == XTQ_OP_SUM) {
        atomicAdd((T *)t, br);
        atomicAdd((T *)t + 1, bi);
    } else if (sizeof(T) == 4) {
        rmw_bits(t, 8, [=](unsigned long long cur) {
            T ar = from_bits<T>(cur & 0xffffffffull), ai = from_bits<T>(cur >> 32);
            T rr = op == XTQ_OP_PROD ? ar * br - ai * bi : br;
            T ri = op == XTQ_OP_PROD ? ar * bi + ai * br : bi;
            return bits_of(rr) | (bits_of(ri) << 32);
        });
    } else {
        T ar = load<T>(t), ai = load<T>(t + sizeof(T));
        T rr = op == XTQ_OP_PROD ? ar * br - ai * bi : br;
        T ri = op == XTQ_OP_PROD ? ar * bi + ai * br : bi;
        memcpy(t, &rr, sizeof(T));
        memcpy(t + sizeof(T), &ri, sizeof(T));
    }
}

__device__ void apply(int op, int dt, uint8_t *t, const uint8_t *o)
{
    switch (dt) {
    case XTQ_DT_INT8:
        int_elem<int8_t, uint8_t>(op, t, o);
        break;
    case XTQ_DT_UINT8:
    case XTQ_DT_BYTE:
        int_elem<uint8_t, uint8_t>(op, t, o);
        break;
    case XTQ_DT_BOOL:
        int_elem<uint8_t, uint8_t>(op, t, o);
        break;
    case XTQ_DT_INT16:
        int_elem<int16_t, uint16_t>(op, t, o);
        break;
    case XTQ_DT_UINT16:
        int_elem<uint16_t, uint16_t>(op, t, o);
        break;
    case XTQ_DT_INT32:
        int_elem<int32_t, uint32_t>(op, t, o);
        break;
    case XTQ_DT_UINT32:
        int_elem<uint32_t, uint32_t>(op, t, o);
        break;
    case XTQ_DT_INT64:
        int_elem<long long, unsigned long long>(op, t, o);
        break;
    case XTQ_DT_UINT64:
        int_elem<unsigned long long, unsigned long long>(op, t, o);
        break;
    case XTQ_DT_FLOAT16:
        half_elem(op, false, t, o);
        break;
    case XTQ_DT_BFLOAT16:
        half_elem(op, true, t, o);
        break;
    case XTQ_DT_FLOAT:
        real_elem<float>(op, t, o);
        break;
    case XTQ_DT_DOUBLE:
        real_elem<double>(op, t, o);
        break;
    case XTQ_DT_C_FLOAT_COMPLEX:
        complex_elem<float>(op, t, o);
        break;
    case XTQ_DT_C_DOUBLE_COMPLEX:
        complex_elem<double>(op, t, o);
        break;
    case XTQ_DT_FLOAT_INT:
        pair8_elem<pair<float>>(op, t, o);
        break;
    case XTQ_DT_2INT:
        pair8_elem<pair<int>>(op, t, o);
        break;
    case XTQ_DT_SHORT_INT:
        pair8_elem<pair<short>>(op, t, o);
        break;
    case XTQ_DT_DOUBLE_INT:
        pair16_elem<pair<double>>(op, t, o);
        break;
    case XTQ_DT_LONG_INT:
        pair16_elem<pair<long>>(op, t, o);
        break;
    default:
        break; /* refused by the origin (long double has no GPU type) */
    }
}

__device__ size_t dt_size(int dt)
{
    switch (dt) {
    case XTQ_DT_INT8:
    case XTQ_DT_UINT8:
    case XTQ_DT_BOOL:
    case XTQ_DT_BYTE:
        return 1;
    case XTQ_DT_INT16:
    case XTQ_DT_UINT16:
    case XTQ_DT_FLOAT16:
    case XTQ_DT_BFLOAT16:
        return 2;
    case XTQ_DT_INT32:
    case XTQ_DT_UINT32:
    case XTQ_DT_FLOAT:
        return 4;
    case XTQ_DT_INT64:
    case XTQ_DT_UINT64:
    case XTQ_DT_DOUBLE:
    case XTQ_DT_C_FLOAT_COMPLEX:
    case XTQ_DT_FLOAT_INT:
    case XTQ_DT_2INT:
    case XTQ_DT_SHORT_INT:
        return 8;
    case XTQ_DT_C_DOUBLE_COMPLEX:
    case XTQ_DT_DOUBLE_INT:
    case XTQ_DT_LONG_INT:
        return 16;
    default:
        return 0;
    }
}

} // namespace

/* Accumulate (and put) into a window in device memory. */
__device__ void xtq_mpi_gpu_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct xtq__mpi_args *a = (const struct xtq__mpi_args *)kernarg;
    uint32_t me = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    uint32_t n = d->grid_size[0];
    uint8_t *target = (uint8_t *)(uintptr_t)a->target;
    const uint8_t *payload = (const uint8_t *)(uintptr_t)a->payload;
    size_t es = dt_size(a->dtype);
    struct xtq__mpi_block whole = {0, a->count};
    const uint8_t *blocks = a->nblocks ? payload : (const uint8_t *)&whole;
    const uint8_t *operand = payload + (size_t)a->nblocks * sizeof(struct xtq__mpi_block);
    uint32_t nb = a->nblocks ? a->nblocks : 1;
    uint64_t done = 0;

    /* The origin sends only what this task runs; anything else (a wrong
     * or hostile peer) is dropped. The contract gives CUDA tasks no way
     * to fail yet (docs/mpi.md). */
    if (a->magic != XTQ__MPI_MAGIC || es == 0 ||
        (a->kind != XTQ__MPI_ACC && a->kind != XTQ__MPI_PUT))
        return;
    for (uint32_t k = 0; k < nb; k++) {
        struct xtq__mpi_block b = load<struct xtq__mpi_block>(blocks + k * sizeof(b));
        if (b.count > a->count || b.offset > a->extent || b.count * es > a->extent - b.offset)
            return; /* outside the checked bound */
        for (uint64_t i = me; i < b.count; i += n) {
            uint8_t *t = target + b.offset + i * es;
            const uint8_t *o = operand + (done + i) * es;
            if (a->kind == XTQ__MPI_PUT) {
                for (size_t j = 0; j < es; j++)
                    t[j] = o[j];
            } else {
                apply(a->op, a->dtype, t, o);
            }
        }
        done += b.count;
    }
}
XTQ_CUDA_TASK_EXPORT(xtq_mpi_gpu_task);
/* libxtq_coll's task, in this module too: the layer's module is the one
 * attached to the agent, so CUDA teams (MPI_Allreduce on device memory)
 * run it from here (xtq_coll_team_attr_t.cuda_task). */
XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task);
XTQ_CUDA_MODULE(xtq_mpi_tasks);

/* ---- host side ------------------------------------------------------------------------- */

extern "C" {

int xtq__mpi_cuda_attach(xtq_agent_t *agent);
void xtq__mpi_cuda_detach(xtq_agent_t *agent);
int xtq__mpi_cuda_kernel(xtq_agent_t *agent, xtq_kernel_t **kernel);
int xtq__mpi_cuda_coll_task(uint64_t *fn);

int xtq__mpi_cuda_attach(xtq_agent_t *agent)
{
    return xtq_cuda_module_attach(agent, xtq_mpi_tasks);
}

void xtq__mpi_cuda_detach(xtq_agent_t *agent)
{
    xtq_cuda_module_detach(agent, xtq_mpi_tasks);
}

int xtq__mpi_cuda_kernel(xtq_agent_t *agent, xtq_kernel_t **kernel)
{
    uint64_t fn = 0;
    if (xtq_cuda_task_address(xtq_mpi_gpu_task_xtq_task, &fn) != 0)
        return -XTQ_EIO;
    return xtq_kernel_create_cuda(agent, fn, XTQ__MPI_KERNARG_SIZE, kernel);
}

int xtq__mpi_cuda_coll_task(uint64_t *fn)
{
    return xtq_cuda_task_address(xtq_coll_cuda_task_xtq_task, fn) != 0 ? -XTQ_EIO : 0;
}

} // extern "C"
