/*
 * libxtq error codes. Every function returns 0 or a negative XTQ_E* code.
 * Codes that match an errno value use that value; runtime-specific codes
 * start at 256. The enum and xtq_strerror() come from the one list below.
 */
#ifndef XTQ_ERROR_H
#define XTQ_ERROR_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/* X(name, value, description) */
#define XTQ_ERROR_LIST(X)                                                                    \
    X(SUCCESS, 0, "Success")                                                                \
    X(EPERM, 1, "Operation not permitted")                                                  \
    X(ENOENT, 2, "No such entry")                                                           \
    X(EINTR, 4, "Interrupted")                                                              \
    X(EIO, 5, "I/O error")                                                                  \
    X(E2BIG, 7, "Argument list too long")                                                   \
    X(EAGAIN, 11, "Resource temporarily unavailable, try again")                            \
    X(ENOMEM, 12, "Out of memory")                                                          \
    X(EBUSY, 16, "Resource busy")                                                           \
    X(EEXIST, 17, "Entry already exists")                                                   \
    X(ENODEV, 19, "No such device")                                                         \
    X(EINVAL, 22, "Invalid argument")                                                       \
    X(ENOSPC, 28, "No space left")                                                          \
    X(ERANGE, 34, "Index or value out of range")                                            \
    X(ENOSYS, 38, "Operation not supported by this back-end")                               \
    X(EPROTO, 71, "Protocol error")                                                         \
    X(EBADMSG, 74, "Malformed message")                                                     \
    X(EOVERFLOW, 75, "Value too large")                                                     \
    X(EMSGSIZE, 90, "Message too long")                                                     \
    X(ETIMEDOUT, 110, "Timed out")                                                          \
    X(EHOSTDOWN, 112, "Peer is down")                                                       \
    X(EALREADY, 114, "Operation already in progress")                                       \
    X(ECANCELED, 125, "Operation canceled")                                                 \
    X(ENOKERNEL, 256, "Kernel index not registered on the target")                          \
    X(ENOFUNC, 257, "Function index not registered on the target")                          \
    X(ENOQUEUE, 258, "Queue index not registered on the target")                            \
    X(EKERNARG, 259, "Kernel-argument size does not match the registration")                \
    X(EVERSION, 260, "Wire protocol version mismatch")                                      \
    X(EJOBKEY, 261, "Message carries another job's key")                                    \
    X(EPACKET, 262, "Invalid AQL packet (type or header bits)")                             \
    X(EFABRIC, 263, "Transport (libfabric) error")                                          \
    X(ENOAGENT, 264, "Agent unavailable")                                                   \
    X(EBOOTSTRAP, 265, "Bootstrap (PMIx) error")                                            \
    X(EQUEUEFULL, 266, "Target queue full")                                                 \
    X(ESRCRANK, 267, "Source rank invalid")                                                 \
    X(EAGENTKIND, 268, "Packet or object not valid for this agent kind")                    \
    X(EFINALIZED, 269, "Context finalizing; operation not executed")

#define XTQ_ERROR_ENUM_(name, value, desc) XTQ_##name = (value),
/** Error codes; functions return their negation. */
enum xtq_error { XTQ_ERROR_LIST(XTQ_ERROR_ENUM_) };
#undef XTQ_ERROR_ENUM_

/** Describe an error code; accepts either sign. Never returns NULL. */
XTQ_API const char *xtq_strerror(int err);

/** Symbolic name of an error code ("XTQ_ENOKERNEL"); accepts either sign. */
XTQ_API const char *xtq_errname(int err);

XTQ_EXTERN_C_END

#endif /* XTQ_ERROR_H */
