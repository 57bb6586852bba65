/*
 * The wire format. Every message starts with a versioned header carrying
 * the job key, source rank, sequence number and lengths; the target checks
 * every length and index before use. The job key guards against cross-talk
 * between jobs, not against a hostile sender (it is no secret); the source
 * rank is checked against the transport's source address (target.c,
 * docs/design.md).
 *
 * PUT message:  [hdr 64 B][AQL packet 64 B][kernel arguments][pad to 64][payload][pad to 64]
 *   hdr.cmd_len = 64 + kernarg bytes; hdr.payload_len = payload bytes;
 *   the payload starts at XTQ_ALIGN_UP(64 + cmd_len, 64) from the message
 *   start; the whole message is padded to a multiple of 64 so consecutive
 *   messages in a multi-receive region stay 64-byte aligned.
 * ASK message:  [hdr 64 B]: send the ack of `seq` again (it was lost).
 *   With ASK_AGAIN (asked before): a put that never arrived is refused
 *   for good and answered MISSING (acks.c).
 * ACK message:  [hdr 64 B] with type ACK, status, and the acked seq;
 *   a fetching put's ACK carries the task's result after the header:
 *   [hdr 64 B][result][pad to 64], hdr.result_len = result bytes.
 *   With MISSING: put `seq` never arrived, and will not run unless it is
 *   sent again with RESEND (a copy lost in a replaced connection).
 *
 * Version 2: result_len (was reserved0), the result after an ACK; ASK.
 */
#ifndef XTQ_WIRE_H
#define XTQ_WIRE_H

#include "internal.h"

#define XTQ_WIRE_MAGIC 0x5154u /* "TQ" */
#define XTQ_WIRE_VERSION 2u

/* Largest kernel-argument block a PUT may carry (cmd_len - 64). */
#define XTQ__WIRE_MAX_KERNARG 65536u

enum xtq__msg_type {
    XTQ__MSG_PUT = 1,
    XTQ__MSG_ACK = 2,
    XTQ__MSG_ASK = 3, /* the initiator asks again for the ack of `seq` */
};

enum xtq__wire_flags {
    XTQ__WIRE_REMOTE_COMPLETION = 1u << 0, /* ack when the task finished (else when enqueued) */
    XTQ__WIRE_RESEND = 1u << 1,            /* PUT: sent again after a MISSING answer */
    XTQ__WIRE_MISSING = 1u << 2,           /* ACK: the put never arrived (refused for good) */
    XTQ__WIRE_ASK_AGAIN = 1u << 3,         /* ASK: asked before; refuse it if not here */
    XTQ__WIRE_LONG_TASK = 1u << 4,         /* PUT: never run inline (XTQ_PUT_LONG_TASK) */
    XTQ__WIRE_NOTIFY = 1u << 5, /* PUT: also set the completion word on one host (notify.c) */
};
/* The flag bits each message type may carry; any other bit is rejected
 * (a later version that adds one bumps XTQ_WIRE_VERSION or this mask). */
#define XTQ__WIRE_PUT_FLAGS                                                                        \
    ((uint32_t)(XTQ__WIRE_REMOTE_COMPLETION | XTQ__WIRE_RESEND | XTQ__WIRE_LONG_TASK |           \
                XTQ__WIRE_NOTIFY))
#define XTQ__WIRE_ACK_FLAGS ((uint32_t)XTQ__WIRE_MISSING)
#define XTQ__WIRE_ASK_FLAGS ((uint32_t)XTQ__WIRE_ASK_AGAIN)
#define XTQ__WIRE_FLAGS_OF(type)                                                                   \
    ((type) == XTQ__MSG_PUT   ? XTQ__WIRE_PUT_FLAGS                                                \
     : (type) == XTQ__MSG_ACK ? XTQ__WIRE_ACK_FLAGS                                                \
                              : XTQ__WIRE_ASK_FLAGS)

struct xtq__wire_hdr {
    uint16_t magic;
    uint8_t version;
    uint8_t type;
    uint32_t flags;
    uint64_t job_key;
    uint32_t src_rank;
    uint32_t cmd_len;     /* PUT: packet + kernel arguments */
    uint64_t payload_len; /* PUT */
    uint64_t seq;         /* PUT: initiator's per-target sequence; ACK: the acked seq */
    int32_t status;       /* ACK: 0 or -XTQ_E* */
    /* PUT: bytes of result the initiator takes back (0: none; needs
     * REMOTE_COMPLETION). ACK: result bytes after the header. */
    uint32_t result_len;
    uint64_t reserved1[2];
};
XTQ_STATIC_ASSERT(sizeof(struct xtq__wire_hdr) == 64, "wire header is 64 bytes");

/* Offsets and total length of a PUT message. */
static inline size_t xtq__wire_payload_offset(uint32_t cmd_len)
{
    return XTQ_ALIGN_UP((size_t)sizeof(struct xtq__wire_hdr) + cmd_len, (size_t)64);
}
static inline size_t xtq__wire_put_len(uint32_t cmd_len, uint64_t payload_len)
{
    return XTQ_ALIGN_UP(xtq__wire_payload_offset(cmd_len) + (size_t)payload_len, (size_t)64);
}

/* Fill a header. */
void xtq__wire_hdr_init(struct xtq__wire_hdr *hdr, enum xtq__msg_type type, uint64_t job_key,
                        uint32_t src_rank, uint64_t seq);

/*
 * Validate an arrived message of `len` bytes (as reported by the
 * transport) before anything else reads it: magic, version, type, job key,
 * source rank < nranks, flag bits known for the type, reserved fields
 * zero (and the status of a PUT or ASK), and for PUT cmd_len >= 64, cmd_len <= max,
 * lengths consistent with `len`, no overflow. Returns 0 or -XTQ_EBADMSG,
 * -XTQ_EVERSION, -XTQ_EJOBKEY, -XTQ_ESRCRANK, -XTQ_EMSGSIZE, -XTQ_EPROTO
 * (a flag bit or reserved field this version does not define). On success
 * for PUT, *cmd and *payload point into `msg` (payload NULL when empty);
 * for ACK *cmd is NULL and *payload the result (NULL when result_len is
 * 0); for ASK both are NULL. Any of the output pointers may be NULL. A PUT's result_len is
 * bounded by max_msg and needs remote completion; an ACK's result must
 * fit `len`.
 * `max_msg` bounds cmd_len + payload_len, the quantity xtq_put() checks
 * against XTQ_MAX_MSG_SIZE; cmd_len - 64 is also bounded by
 * XTQ__WIRE_MAX_KERNARG, and the padded wire length by `len`.
 * `msg` needs no alignment; the header is read with memcpy.
 */
int xtq__wire_validate(const void *msg, size_t len, uint64_t job_key, uint32_t nranks,
                       size_t max_msg, const struct xtq__wire_hdr **hdr, const void **cmd,
                       const void **payload);

#endif /* XTQ_WIRE_H */
