#include "internal.h"

const char *xtq_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
#define X(name, value, desc)                                                                 \
    case value:                                                                              \
        return desc;
        XTQ_ERROR_LIST(X)
#undef X
    default:
        return "Unknown error";
    }
}

const char *xtq_errname(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
#define X(name, value, desc)                                                                 \
    case value:                                                                              \
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
