/*
 * Reductions: the element types and operations of MPI's predefined
 * reductions, without MPI, so that accumulates (mpi-ext), collectives
 * (apps/allreduce) and training (apps/cntk-shim) name them one way and
 * share one implementation per agent.
 *
 * Valid pairs follow the MPI standard (section 6.9.2): MAX and MIN on
 * integers and reals; SUM and PROD on integers, reals and complex; LAND,
 * LOR, LXOR on integers and bool; BAND, BOR, BXOR on integers and bytes;
 * MAXLOC and MINLOC on the value-index pair types; REPLACE and NO_OP (for
 * accumulates) on every type.
 */
#ifndef XTQ_REDUCE_H
#define XTQ_REDUCE_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/** Element types. Values are part of the wire format of the layers above. */
enum xtq_datatype {
    XTQ_DT_INT8 = 0,
    XTQ_DT_UINT8 = 1,
    XTQ_DT_INT16 = 2,
    XTQ_DT_UINT16 = 3,
    XTQ_DT_INT32 = 4,
    XTQ_DT_UINT32 = 5,
    XTQ_DT_INT64 = 6,
    XTQ_DT_UINT64 = 7,
    XTQ_DT_FLOAT16 = 8,  /**< IEEE binary16 */
    XTQ_DT_BFLOAT16 = 9, /**< bfloat16 */
    XTQ_DT_FLOAT = 10,
    XTQ_DT_DOUBLE = 11,
    XTQ_DT_LONG_DOUBLE = 12,
    XTQ_DT_C_FLOAT_COMPLEX = 13,
    XTQ_DT_C_DOUBLE_COMPLEX = 14,
    XTQ_DT_C_LONG_DOUBLE_COMPLEX = 15,
    XTQ_DT_BOOL = 16, /**< C _Bool, one byte */
    XTQ_DT_BYTE = 17, /**< uninterpreted byte: bitwise operations only */
    /* Value-index pairs for MAXLOC / MINLOC, laid out as the C structs
     * MPI_FLOAT_INT etc. describe ({float; int}, with its padding). */
    XTQ_DT_FLOAT_INT = 18,
    XTQ_DT_DOUBLE_INT = 19,
    XTQ_DT_LONG_INT = 20,
    XTQ_DT_2INT = 21,
    XTQ_DT_SHORT_INT = 22,
    XTQ_DT_LONG_DOUBLE_INT = 23,
    XTQ_DT_COUNT
};

/** Operations. Values are part of the wire format of the layers above. */
enum xtq_op {
    XTQ_OP_SUM = 0,
    XTQ_OP_PROD = 1,
    XTQ_OP_MAX = 2,
    XTQ_OP_MIN = 3,
    XTQ_OP_LAND = 4,
    XTQ_OP_LOR = 5,
    XTQ_OP_LXOR = 6,
    XTQ_OP_BAND = 7,
    XTQ_OP_BOR = 8,
    XTQ_OP_BXOR = 9,
    XTQ_OP_MAXLOC = 10, /**< larger value; the smaller index on a tie */
    XTQ_OP_MINLOC = 11, /**< smaller value; the smaller index on a tie */
    XTQ_OP_REPLACE = 12, /**< the result is the operand (MPI_REPLACE) */
    XTQ_OP_NO_OP = 13,   /**< the result is unchanged (MPI_NO_OP) */
    XTQ_OP_COUNT
};

/** Bytes per element (with a pair type's padding); 0 for an unknown type. */
XTQ_API size_t xtq_datatype_size(enum xtq_datatype type);

/** "int32", "double_int", ...; "?" for an unknown type. */
XTQ_API const char *xtq_datatype_name(enum xtq_datatype type);

/** "sum", "maxloc", ...; "?" for an unknown operation. */
XTQ_API const char *xtq_op_name(enum xtq_op op);

/** 1 when `op` applies to `type` (the MPI rules above), else 0. */
XTQ_API int xtq_reduce_supported(enum xtq_op op, enum xtq_datatype type);

/**
 * inout[i] = inout[i] op in[i] for i < count, on the calling CPU thread.
 * `in` and `inout` must not overlap. Integer arithmetic wraps; reals follow
 * the C operators (no reassociation: element i's result depends only on
 * the two element i operands).
 * @return 0, or -XTQ_EINVAL for an unsupported pair or NULL buffers with
 *         count > 0.
 */
XTQ_API int xtq_reduce_local(enum xtq_op op, enum xtq_datatype type, void *inout, const void *in,
                             size_t count);

XTQ_EXTERN_C_END

#endif /* XTQ_REDUCE_H */
