#include "internal.h"


const char *xtq_strerror(int err)
{
    /* Negate in unsigned arithmetic: INT_MIN has no int counterpart. */
    unsigned code = err < 0 ? 0u - (unsigned)err : (unsigned)err;
    switch (code) {
#define X(name, value, desc)                                                                 \
    case (unsigned)(value):                                                                              \
        return desc;
        XTQ_ERROR_LIST(X)
#undef X
    default:
        return "Unknown error";
    }
}

const char *xtq_errname(int err)
{
    /* Negate in unsigned arithmetic: INT_MIN has no int counterpart. */
    unsigned code = err < 0 ? 0u - (unsigned)err : (unsigned)err;
    switch (code) {
#define X(name, value, desc)                                                                 \
    case (unsigned)(value):                                                                              \
        return "XTQ_" #name;
        XTQ_ERROR_LIST(X)
#undef X
    default:
        return "XTQ_E?";
    }
}

const char *xtq_version(void)
{
    return XTQ_VERSION_STRING;
}
