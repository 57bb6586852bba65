/*
 * Reductions on NVIDIA GPUs: the operations and types of <xtq/reduce.h>
 * as device code, one element at a time, written once for every module
 * that needs them (CUDA only). libxtq_coll's CUDA task module and
 * xtq_allreduce's HSA-mode kernel include it; mpi-ext's accumulate tasks
 * can too: one CUDA module is attached per agent at a time
 * (xtq_cuda_attach), so the tasks of both must be compiled into one
 * module, and a header of device functions is what lets them share it.
 *
 * Semantics follow xtq_reduce_local() (xtq/reduce.c): integers wrap
 * (computed in the unsigned type), MAX/MIN keep the first operand on a
 * tie, MAXLOC/MINLOC take the smaller index on a tie, 16-bit reals are
 * computed in float and rounded to nearest even. The long double types
 * have no device representation: xtq_cuda_reduce_supported() refuses them.
 */
#ifndef XTQ_COLL_CUDA_CUH
#define XTQ_COLL_CUDA_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuComplex.h>

#include <xtq/coll_cuda_task.h>
#include <xtq/cuda.h>
#include <xtq/reduce.h>

/** 1 when the GPU reduces `op` on `type` (host or device code). */
static inline __host__ __device__ int xtq_cuda_reduce_supported(int op, int type)
{
    if (type == XTQ_DT_LONG_DOUBLE || type == XTQ_DT_C_LONG_DOUBLE_COMPLEX ||
        type == XTQ_DT_LONG_DOUBLE_INT || type < 0 || type >= XTQ_DT_COUNT || op < 0 ||
        op >= XTQ_OP_COUNT)
        return 0;
    switch (type) {
    case XTQ_DT_INT8: case XTQ_DT_UINT8: case XTQ_DT_INT16: case XTQ_DT_UINT16:
    case XTQ_DT_INT32: case XTQ_DT_UINT32: case XTQ_DT_INT64: case XTQ_DT_UINT64:
        return op <= XTQ_OP_BXOR || op == XTQ_OP_REPLACE || op == XTQ_OP_NO_OP;
    case XTQ_DT_FLOAT16: case XTQ_DT_BFLOAT16: case XTQ_DT_FLOAT: case XTQ_DT_DOUBLE:
        return op <= XTQ_OP_MIN || op == XTQ_OP_REPLACE || op == XTQ_OP_NO_OP;
    case XTQ_DT_C_FLOAT_COMPLEX: case XTQ_DT_C_DOUBLE_COMPLEX:
        return op <= XTQ_OP_PROD || op == XTQ_OP_REPLACE || op == XTQ_OP_NO_OP;
    case XTQ_DT_BOOL:
        return (op >= XTQ_OP_LAND && op <= XTQ_OP_LXOR) || op == XTQ_OP_REPLACE ||
               op == XTQ_OP_NO_OP;
    case XTQ_DT_BYTE:
        return (op >= XTQ_OP_BAND && op <= XTQ_OP_BXOR) || op == XTQ_OP_REPLACE ||
               op == XTQ_OP_NO_OP;
    default: /* the value-index pairs */
        return op == XTQ_OP_MAXLOC || op == XTQ_OP_MINLOC || op == XTQ_OP_REPLACE ||
               op == XTQ_OP_NO_OP;
    }
}

#ifdef __CUDACC__
namespace xtq_cuda_reduce {

template <typename T, typename U> __device__ __forceinline__ void int_op(int op, T *d, T b)
{
    T a = *d;
    switch (op) {
    case XTQ_OP_SUM: *d = (T)(U)((U)a + (U)b); break;
    case XTQ_OP_PROD: *d = (T)(U)((U)a * (U)b); break;
    case XTQ_OP_MAX: *d = b > a ? b : a; break;
    case XTQ_OP_MIN: *d = b < a ? b : a; break;
    case XTQ_OP_LAND: *d = (T)(a && b); break;
    case XTQ_OP_LOR: *d = (T)(a || b); break;
    case XTQ_OP_LXOR: *d = (T)(!a != !b); break;
    case XTQ_OP_BAND: *d = (T)(a & b); break;
    case XTQ_OP_BOR: *d = (T)(a | b); break;
    case XTQ_OP_BXOR: *d = (T)(a ^ b); break;
    default: break;
    }
}

template <typename T> __device__ __forceinline__ T real_op(int op, T a, T b)
{
    switch (op) {
    case XTQ_OP_SUM: return a + b;
    case XTQ_OP_PROD: return a * b;
    case XTQ_OP_MAX: return b > a ? b : a;
    case XTQ_OP_MIN: return b < a ? b : a;
    default: return a;
    }
}

template <typename V> struct pair {
    V v;
    int i;
};

template <typename V> __device__ __forceinline__ void pair_op(int op, pair<V> *d, const pair<V> *s)
{
    pair<V> a = *d, b = *s;
    bool take = op == XTQ_OP_MAXLOC ? (b.v > a.v || (b.v == a.v && b.i < a.i))
                                    : (b.v < a.v || (b.v == a.v && b.i < a.i));
    if (take)
        *d = b;
}

} // namespace xtq_cuda_reduce

/**
 * dst[i] = dst[i] op src[i] for one element (CUDA only). `type` and `op`
 * must be a pair xtq_cuda_reduce_supported() accepts.
 */
static __device__ __forceinline__ void xtq_cuda_reduce_elem(int op, int type, void *dst,
                                                            const void *src, uint64_t i)
{
    using namespace xtq_cuda_reduce;
    if (op == XTQ_OP_NO_OP)
        return;
    switch (type) {
#define XTQ_INT_CASE(DT, T, U)                                                              \
    case DT:                                                                                \
        if (op == XTQ_OP_REPLACE)                                                           \
            ((T *)dst)[i] = ((const T *)src)[i];                                            \
        else                                                                                \
            int_op<T, U>(op, (T *)dst + i, ((const T *)src)[i]);                            \
        return;
        XTQ_INT_CASE(XTQ_DT_INT8, int8_t, uint8_t)
        XTQ_INT_CASE(XTQ_DT_UINT8, uint8_t, uint8_t)
        XTQ_INT_CASE(XTQ_DT_BYTE, uint8_t, uint8_t)
        XTQ_INT_CASE(XTQ_DT_INT16, int16_t, uint16_t)
        XTQ_INT_CASE(XTQ_DT_UINT16, uint16_t, uint16_t)
        XTQ_INT_CASE(XTQ_DT_INT32, int32_t, uint32_t)
        XTQ_INT_CASE(XTQ_DT_UINT32, uint32_t, uint32_t)
        XTQ_INT_CASE(XTQ_DT_INT64, int64_t, uint64_t)
        XTQ_INT_CASE(XTQ_DT_UINT64, uint64_t, uint64_t)
#undef XTQ_INT_CASE
    case XTQ_DT_BOOL: {
        bool *d = (bool *)dst + i, b = ((const bool *)src)[i], a = *d;
        if (op == XTQ_OP_REPLACE)
            *d = b;
        else
            *d = op == XTQ_OP_LAND ? (a && b) : op == XTQ_OP_LOR ? (a || b) : (a != b);
        return;
    }
    case XTQ_DT_FLOAT16: {
        __half *d = (__half *)dst + i, b = ((const __half *)src)[i];
        *d = op == XTQ_OP_REPLACE ? b
                                  : __float2half_rn(real_op<float>(op, __half2float(*d),
                                                                   __half2float(b)));
        return;
    }
    case XTQ_DT_BFLOAT16: {
        __nv_bfloat16 *d = (__nv_bfloat16 *)dst + i, b = ((const __nv_bfloat16 *)src)[i];
        *d = op == XTQ_OP_REPLACE
                 ? b
                 : __float2bfloat16_rn(
                       real_op<float>(op, __bfloat162float(*d), __bfloat162float(b)));
        return;
    }
    case XTQ_DT_FLOAT: {
        float *d = (float *)dst + i, b = ((const float *)src)[i];
        *d = op == XTQ_OP_REPLACE ? b : real_op<float>(op, *d, b);
        return;
    }
    case XTQ_DT_DOUBLE: {
        double *d = (double *)dst + i, b = ((const double *)src)[i];
        *d = op == XTQ_OP_REPLACE ? b : real_op<double>(op, *d, b);
        return;
    }
    case XTQ_DT_C_FLOAT_COMPLEX: {
        cuFloatComplex *d = (cuFloatComplex *)dst + i, b = ((const cuFloatComplex *)src)[i];
        *d = op == XTQ_OP_REPLACE ? b : op == XTQ_OP_SUM ? cuCaddf(*d, b) : cuCmulf(*d, b);
        return;
    }
    case XTQ_DT_C_DOUBLE_COMPLEX: {
        cuDoubleComplex *d = (cuDoubleComplex *)dst + i, b = ((const cuDoubleComplex *)src)[i];
        *d = op == XTQ_OP_REPLACE ? b : op == XTQ_OP_SUM ? cuCadd(*d, b) : cuCmul(*d, b);
        return;
    }
#define XTQ_PAIR_CASE(DT, V)                                                                \
    case DT:                                                                                \
        if (op == XTQ_OP_REPLACE)                                                           \
            ((pair<V> *)dst)[i] = ((const pair<V> *)src)[i];                                \
        else                                                                                \
            pair_op<V>(op, (pair<V> *)dst + i, (const pair<V> *)src + i);                   \
        return;
        XTQ_PAIR_CASE(XTQ_DT_FLOAT_INT, float)
        XTQ_PAIR_CASE(XTQ_DT_DOUBLE_INT, double)
        XTQ_PAIR_CASE(XTQ_DT_LONG_INT, long)
        XTQ_PAIR_CASE(XTQ_DT_2INT, int)
        XTQ_PAIR_CASE(XTQ_DT_SHORT_INT, short)
#undef XTQ_PAIR_CASE
    default:
        return;
    }
}
/**
 * libxtq_coll's CUDA task: one work-item per element of a piece, doing
 * what its arguments (struct xtq_coll_cuda_args, <xtq/coll_cuda_task.h>)
 * say, then pushing the result to the pinned host mirror if there is one.
 * A module that is attached in place of libxtq_coll's own exports it
 * (XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task)) and passes its address as
 * xtq_coll_team_attr_t.cuda_task.
 */
static __device__ void xtq_coll_cuda_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct xtq_coll_cuda_args *a = (const struct xtq_coll_cuda_args *)kernarg;
    uint64_t i = (uint64_t)d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    uint8_t *dst = (uint8_t *)(uintptr_t)a->dst;
    const uint8_t *in = (const uint8_t *)(uintptr_t)a->in;
    const uint8_t *av = (const uint8_t *)(uintptr_t)a->a;
    uint32_t es = a->esize;

    if (i >= a->count)
        return;
    switch (a->mode) {
    case XTQ_COLL_CUDA_REDUCE:
        xtq_cuda_reduce_elem((int)a->op, (int)a->type, dst, in, i);
        break;
    case XTQ_COLL_CUDA_REDUCE_IN_A:
        for (uint32_t b = 0; b < es; b++)
            dst[i * es + b] = in[i * es + b];
        xtq_cuda_reduce_elem((int)a->op, (int)a->type, dst, av, i);
        break;
    case XTQ_COLL_CUDA_REDUCE_A_IN:
        for (uint32_t b = 0; b < es; b++)
            dst[i * es + b] = av[i * es + b];
        xtq_cuda_reduce_elem((int)a->op, (int)a->type, dst, in, i);
        break;
    default:
        for (uint32_t b = 0; b < es; b++)
            dst[i * es + b] = in[i * es + b];
        break;
    }
    if (a->mirror) {
        volatile uint8_t *m = (volatile uint8_t *)(uintptr_t)a->mirror;
        for (uint32_t b = 0; b < es; b++)
            m[i * es + b] = dst[i * es + b];
    }
}
#endif /* __CUDACC__ */

#endif /* XTQ_COLL_CUDA_CUH */
