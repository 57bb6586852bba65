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
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuComplex.h>

#include <xtq/coll_cuda_task.h>
#include <xtq/cuda.h>
#include <xtq/error.h>
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

template <typename T, typename U> __host__ __device__ __forceinline__ void int_op(int op, T *d, T b)
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

template <typename T> __host__ __device__ __forceinline__ T real_op(int op, T a, T b)
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

template <typename V>
__host__ __device__ __forceinline__ void pair_op(int op, pair<V> *d, const pair<V> *s)
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
/* (#pragma unroll in device code only: the host compiler warns on it.) */
#if defined(__CUDA_ARCH__)
#define XTQ_COLL_CUDA_UNROLL _Pragma("unroll")
#else
#define XTQ_COLL_CUDA_UNROLL
#endif

namespace xtq_coll_cuda_detail
{

/* Elements of one work-item in flight at once: its loads of a round are
 * issued together (the piece is read across PCIe where it landed, about
 * 1-2 us a round trip), then reduced and stored. */
template <typename T> struct rounds {
    static constexpr unsigned n = sizeof(T) >= 8 ? 4u : 8u;
};

/* The ready word (peer reads): a system-scope acquire load on the device
 * (the word may be in a peer GPU's memory, read over NVLink); the host
 * build (tests) uses the compiler's atomics. */
__host__ __device__ __forceinline__ uint64_t ready_load(const uint64_t *w)
{
#if defined(__CUDA_ARCH__)
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
    return v;
#else
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
#endif
}

/* Elements this work-item wrote (to dst, and to the mirror if any), added
 * to the sender's ready word once they are visible everywhere (a peer GPU
 * included). */
__host__ __device__ __forceinline__ void mirror_written(const struct xtq_coll_cuda_args *a,
                                                       uint64_t n)
{
    if (!a->mirror_count || n == 0)
        return;
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    atomicAdd_system((unsigned long long *)(uintptr_t)a->mirror_count, (unsigned long long)n);
#else
    __atomic_fetch_add((uint64_t *)(uintptr_t)a->mirror_count, n, __ATOMIC_RELEASE);
#endif
}

__host__ __device__ __forceinline__ uint64_t ready_clock(void)
{
#if defined(__CUDA_ARCH__)
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return 0; /* the host build never waits (tests store the word first) */
#endif
}

/* Whether the host asked waits to end (a->cancel, this GPU's memory: the
 * team failed). */
__host__ __device__ __forceinline__ int ready_cancelled(const struct xtq_coll_cuda_args *a)
{
    if (!a->cancel)
        return 0;
#if defined(__CUDA_ARCH__)
    return *(const volatile uint32_t *)(uintptr_t)a->cancel != 0;
#else
    return __atomic_load_n((const uint32_t *)(uintptr_t)a->cancel, __ATOMIC_ACQUIRE) != 0;
#endif
}

/* Wait until a->ready holds a->ready_val or more: 1, or 0 once a->ready_ns
 * passed or the host cancelled waits (a->cancel, looked at every 64 polls:
 * a word in device memory). The dispatch then fails with -XTQ_ETIMEDOUT or
 * -XTQ_ECANCELED, also left at a->fail for the host, which does not see a
 * local packet's status. */
__host__ __device__ __forceinline__ int ready_wait(const xtq_cuda_dispatch_t *d,
                                                   const struct xtq_coll_cuda_args *a)
{
    const uint64_t *w = (const uint64_t *)(uintptr_t)a->ready;
    uint64_t start = 0;
    int err = -XTQ_ETIMEDOUT;
    for (unsigned spin = 0;; spin++) {
        if (ready_load(w) >= a->ready_val)
            return 1;
        if ((spin & 63) == 0 && ready_cancelled(a)) {
            err = -XTQ_ECANCELED;
            break;
        }
        const uint64_t now = ready_clock();
        if (spin == 0)
            start = now;
        else if (now - start > a->ready_ns || (now == 0 && spin > (1u << 20)))
            break;
    }
#if defined(__CUDA_ARCH__)
    xtq_cuda_task_fail(d, err);
    if (a->fail)
        atomicCAS_system((int *)(uintptr_t)a->fail, 0, err);
#else
    (void)d;
    if (a->fail)
        __atomic_store_n((int32_t *)(uintptr_t)a->fail, err, __ATOMIC_RELEASE);
#endif
    return 0;
}

/*
 * dst[i] = lhs[i] op rhs[i] (COPY: dst[i] = in[i]) for i = first,
 * first + stride, ... < count, `rounds<T>::n` elements per round; the
 * result also goes to the pinned host mirror. `f` is the operation on
 * values of T. Loads of a round go out before any store of it: nothing
 * that a store could change is read after it.
 */
template <typename T, typename F>
__host__ __device__ __forceinline__ void stride_loop(const struct xtq_coll_cuda_args *a,
                                                     uint64_t first, uint64_t stride, F f)
{
    constexpr unsigned U = rounds<T>::n;
    T *dst = (T *)(uintptr_t)a->dst;
    T *mirror = (T *)(uintptr_t)a->mirror;
    const T *in = (const T *)(uintptr_t)a->in;
    const T *av = (const T *)(uintptr_t)a->a;
    const uint64_t count = a->count;
    const uint32_t mode = a->mode;
    /* lhs op rhs: REDUCE dst op in, REDUCE_IN_A in op a, REDUCE_A_IN a op in. */
    const T *lhs = mode == XTQ_COLL_CUDA_REDUCE ? dst : mode == XTQ_COLL_CUDA_REDUCE_IN_A ? in : av;
    const T *rhs = mode == XTQ_COLL_CUDA_REDUCE_IN_A ? av : in;
    const bool copy = mode != XTQ_COLL_CUDA_REDUCE && mode != XTQ_COLL_CUDA_REDUCE_IN_A &&
                      mode != XTQ_COLL_CUDA_REDUCE_A_IN;
    uint64_t written = 0;
    for (uint64_t base = first; base < count; base += U * stride) {
        T x[U] = {}, y[U] = {}; /* (x unused by COPY) */
        XTQ_COLL_CUDA_UNROLL
        for (unsigned u = 0; u < U; u++) {
            const uint64_t i = base + u * stride;
            if (i < count) {
                y[u] = rhs[i];
                if (!copy)
                    x[u] = lhs[i];
            }
        }
        XTQ_COLL_CUDA_UNROLL
        for (unsigned u = 0; u < U; u++) {
            const uint64_t i = base + u * stride;
            if (i < count) {
                const T r = copy ? y[u] : f(x[u], y[u]);
                dst[i] = r;
                if (mirror)
                    mirror[i] = r;
                written++;
            }
        }
    }
    mirror_written(a, written);
}

template <typename T, typename U>
__host__ __device__ __forceinline__ void ints(const struct xtq_coll_cuda_args *a, uint64_t first,
                                              uint64_t stride)
{
    const int op = (int)a->op;
    stride_loop<T>(a, first, stride, [op](T x, T y) {
        if (op == XTQ_OP_REPLACE)
            return y;
        T r = x;
        xtq_cuda_reduce::int_op<T, U>(op, &r, y); /* NO_OP: r stays x */
        return r;
    });
}

template <typename T>
__host__ __device__ __forceinline__ void reals(const struct xtq_coll_cuda_args *a, uint64_t first,
                                               uint64_t stride)
{
    const int op = (int)a->op;
    stride_loop<T>(a, first, stride, [op](T x, T y) {
        return op == XTQ_OP_REPLACE ? y
               : op == XTQ_OP_NO_OP ? x
                                    : xtq_cuda_reduce::real_op<T>(op, x, y);
    });
}

/* A value-index pair as its bytes: loaded, stored and chosen whole, so
 * the mirror and the result carry the winner's bytes, padding included
 * (a struct copy may leave padding as it was). */
template <typename V> struct pair_bytes {
    alignas(alignof(xtq_cuda_reduce::pair<V>)) unsigned char b[sizeof(xtq_cuda_reduce::pair<V>)];
};

template <typename V>
__host__ __device__ __forceinline__ void pairs(const struct xtq_coll_cuda_args *a, uint64_t first,
                                               uint64_t stride)
{
    using P = xtq_cuda_reduce::pair<V>;
    using R = pair_bytes<V>;
    const int op = (int)a->op;
    stride_loop<R>(a, first, stride, [op](R x, R y) {
        if (op == XTQ_OP_REPLACE)
            return y;
        if (op != XTQ_OP_MAXLOC && op != XTQ_OP_MINLOC)
            return x; /* NO_OP */
        P p, q;
        memcpy(&p, x.b, sizeof(P));
        memcpy(&q, y.b, sizeof(P));
        /* pair_op's rule: the winning value; on a tie the smaller index. */
        const bool take = op == XTQ_OP_MAXLOC ? (q.v > p.v || (q.v == p.v && q.i < p.i))
                                              : (q.v < p.v || (q.v == p.v && q.i < p.i));
        return take ? y : x;
    });
}

/* Types the reductions do not cover (refused by the library before a
 * dispatch): a byte-wise copy, one element per step. */
__host__ __device__ __forceinline__ void bytes(const struct xtq_coll_cuda_args *a, uint64_t first,
                                               uint64_t stride)
{
    uint8_t *dst = (uint8_t *)(uintptr_t)a->dst;
    const uint8_t *in = (const uint8_t *)(uintptr_t)a->in;
    uint8_t *m = (uint8_t *)(uintptr_t)a->mirror;
    const uint32_t es = a->esize;
    uint64_t written = 0;
    for (uint64_t i = first; i < a->count; i += stride, written++)
        for (uint32_t b = 0; b < es; b++) {
            dst[i * es + b] = in[i * es + b];
            if (m)
                m[i * es + b] = in[i * es + b];
        }
    mirror_written(a, written);
}

} // namespace xtq_coll_cuda_detail

/**
 * libxtq_coll's CUDA task: the work-items of the dispatch stride over the
 * `count` elements of a piece (element i + k * grid_size[0] for k = 0, 1,
 * ...), with the reductions of this header, writing the result to device
 * memory and, for the next step's put, to the pinned host mirror (a push
 * across PCIe: the GPU writes, nobody reads back). Any 1-D grid is right:
 * one work-item per element, or (libxtq_coll's dispatch) a grid capped to
 * the work-groups that run at once, xtq_cuda_stride_geometry(). A module
 * that is attached in place of libxtq_coll's own exports it
 * (XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task)) and passes its address as
 * xtq_coll_team_attr_t.cuda_task. Host-callable too: a test runs it on the
 * CPU against xtq_reduce_local(), work-item by work-item.
 */
static __host__ __device__ void xtq_coll_cuda_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    using namespace xtq_coll_cuda_detail;
    const struct xtq_coll_cuda_args *a = (const struct xtq_coll_cuda_args *)kernarg;
    const uint64_t first = (uint64_t)d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    const uint64_t stride = d->grid_size[0] ? d->grid_size[0] : 1;

    /* The ready word of peer reads: the sender's copies advance it as they
     * fill what its sends read (mirror_count); a receiving task waits for
     * it before it reads the piece (then the message went out with the
     * call, not after the sender's copy: docs/allreduce.md, "Ready words"). */
    if (a->mode == XTQ_COLL_CUDA_WAIT) {
        if (first == 0 && a->ready)
            (void)ready_wait(d, a);
        return;
    }
    if (first >= a->count)
        return;
    if (a->ready && !ready_wait(d, a))
        return;
    switch (a->type) {
    case XTQ_DT_INT8:
        ints<int8_t, uint8_t>(a, first, stride);
        return;
    case XTQ_DT_UINT8:
    case XTQ_DT_BYTE:
        ints<uint8_t, uint8_t>(a, first, stride);
        return;
    case XTQ_DT_INT16:
        ints<int16_t, uint16_t>(a, first, stride);
        return;
    case XTQ_DT_UINT16:
        ints<uint16_t, uint16_t>(a, first, stride);
        return;
    case XTQ_DT_INT32:
        ints<int32_t, uint32_t>(a, first, stride);
        return;
    case XTQ_DT_UINT32:
        ints<uint32_t, uint32_t>(a, first, stride);
        return;
    case XTQ_DT_INT64:
        ints<int64_t, uint64_t>(a, first, stride);
        return;
    case XTQ_DT_UINT64:
        ints<uint64_t, uint64_t>(a, first, stride);
        return;
    case XTQ_DT_BOOL: {
        const int op = (int)a->op;
        stride_loop<bool>(a, first, stride, [op](bool x, bool y) {
            return op == XTQ_OP_REPLACE ? y
                   : op == XTQ_OP_LAND  ? (x && y)
                   : op == XTQ_OP_LOR   ? (x || y)
                   : op == XTQ_OP_LXOR  ? (x != y)
                                        : x;
        });
        return;
    }
    case XTQ_DT_FLOAT16: {
        const int op = (int)a->op;
        stride_loop<__half>(a, first, stride, [op](__half x, __half y) {
            return op == XTQ_OP_REPLACE ? y
                   : op == XTQ_OP_NO_OP ? x
                                        : __float2half_rn(xtq_cuda_reduce::real_op<float>(
                                              op, __half2float(x), __half2float(y)));
        });
        return;
    }
    case XTQ_DT_BFLOAT16: {
        const int op = (int)a->op;
        stride_loop<__nv_bfloat16>(a, first, stride, [op](__nv_bfloat16 x, __nv_bfloat16 y) {
            return op == XTQ_OP_REPLACE ? y
                   : op == XTQ_OP_NO_OP ? x
                                        : __float2bfloat16_rn(xtq_cuda_reduce::real_op<float>(
                                              op, __bfloat162float(x), __bfloat162float(y)));
        });
        return;
    }
    case XTQ_DT_FLOAT:
        reals<float>(a, first, stride);
        return;
    case XTQ_DT_DOUBLE:
        reals<double>(a, first, stride);
        return;
    case XTQ_DT_C_FLOAT_COMPLEX: {
        const int op = (int)a->op;
        stride_loop<cuFloatComplex>(a, first, stride, [op](cuFloatComplex x, cuFloatComplex y) {
            return op == XTQ_OP_REPLACE ? y
                   : op == XTQ_OP_SUM   ? cuCaddf(x, y)
                   : op == XTQ_OP_PROD  ? cuCmulf(x, y)
                                        : x;
        });
        return;
    }
    case XTQ_DT_C_DOUBLE_COMPLEX: {
        const int op = (int)a->op;
        stride_loop<cuDoubleComplex>(a, first, stride, [op](cuDoubleComplex x, cuDoubleComplex y) {
            return op == XTQ_OP_REPLACE ? y
                   : op == XTQ_OP_SUM   ? cuCadd(x, y)
                   : op == XTQ_OP_PROD  ? cuCmul(x, y)
                                        : x;
        });
        return;
    }
    case XTQ_DT_FLOAT_INT:
        pairs<float>(a, first, stride);
        return;
    case XTQ_DT_DOUBLE_INT:
        pairs<double>(a, first, stride);
        return;
    case XTQ_DT_LONG_INT:
        pairs<long>(a, first, stride);
        return;
    case XTQ_DT_2INT:
        pairs<int>(a, first, stride);
        return;
    case XTQ_DT_SHORT_INT:
        pairs<short>(a, first, stride);
        return;
    default:
        if (a->mode == XTQ_COLL_CUDA_COPY)
            bytes(a, first, stride);
        return;
    }
}
#endif /* __CUDACC__ */

#endif /* XTQ_COLL_CUDA_CUH */
