/*
 * The wire header: build it, and validate an arrived message before
 * anything else reads it. Validation reads nothing beyond `len`.
 */
#include "internal.h"

#include "wire.h"

void xtq__wire_hdr_init(struct xtq__wire_hdr *hdr, enum xtq__msg_type type, uint64_t job_key,
                        uint32_t src_rank, uint64_t seq)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->magic = XTQ_WIRE_MAGIC;
    hdr->version = XTQ_WIRE_VERSION;
    hdr->type = (uint8_t)type;
    hdr->job_key = job_key;
    hdr->src_rank = src_rank;
    hdr->seq = seq;
}

/* Lengths of a PUT: the command fits the kernarg cap, the whole message
 * fits both what arrived and the configured maximum, nothing overflows. */
static int check_put(const struct xtq__wire_hdr *h, size_t len, size_t max_msg, size_t *payload_off)
{
    uint64_t off, total;

    if (h->cmd_len < XTQ_AQL_PACKET_SIZE)
        return -XTQ_EBADMSG;
    if (h->cmd_len - XTQ_AQL_PACKET_SIZE > XTQ__WIRE_MAX_KERNARG)
        return -XTQ_EMSGSIZE;
    off = xtq__wire_payload_offset(h->cmd_len); /* small: bounded by the cap above */
    /* off + payload_len rounded up to 64 must not wrap (a hostile
     * payload_len near 2^64 would otherwise look short). */
    if (h->payload_len > UINT64_MAX - off - 63)
        return -XTQ_EMSGSIZE;
    /* Same bound as the initiator's xtq_put(): command + payload. */
    if (h->cmd_len + h->payload_len > (uint64_t)max_msg)
        return -XTQ_EMSGSIZE;
    total = XTQ_ALIGN_UP(off + h->payload_len, (uint64_t)64);
    if (total > (uint64_t)len)
        return -XTQ_EBADMSG; /* claims more than arrived */
    *payload_off = (size_t)off;
    return 0;
}

int xtq__wire_validate(const void *msg, size_t len, uint64_t job_key, uint32_t nranks,
                       size_t max_msg, const struct xtq__wire_hdr **hdr, const void **cmd,
                       const void **payload)
{
    struct xtq__wire_hdr h;
    size_t payload_off = 0;
    int rc;

    if (!msg || len < sizeof(h))
        return -XTQ_EBADMSG;
    memcpy(&h, msg, sizeof(h));
    if (h.magic != XTQ_WIRE_MAGIC)
        return -XTQ_EBADMSG;
    if (h.version != XTQ_WIRE_VERSION)
        return -XTQ_EVERSION;
    if (h.type != XTQ__MSG_PUT && h.type != XTQ__MSG_ACK && h.type != XTQ__MSG_ASK)
        return -XTQ_EBADMSG;
    /* Bits and fields this version does not define must be zero: a sender
     * that sets them expects a meaning we would silently ignore. */
    if (h.flags & ~XTQ__WIRE_FLAGS_OF(h.type))
        return -XTQ_EPROTO;
    if (h.reserved1[0] || h.reserved1[1] || (h.type != XTQ__MSG_ACK && h.status))
        return -XTQ_EPROTO;
    if (h.job_key != job_key)
        return -XTQ_EJOBKEY;
    if (h.src_rank >= nranks)
        return -XTQ_ESRCRANK;
    if (h.type == XTQ__MSG_PUT) {
        rc = check_put(&h, len, max_msg, &payload_off);
        if (rc)
            return rc;
        /* A result comes back with the ack of a finished task only. */
        if (h.result_len > max_msg)
            return -XTQ_EMSGSIZE;
        if (h.result_len && !(h.flags & XTQ__WIRE_REMOTE_COMPLETION))
            return -XTQ_EBADMSG;
    } else if (h.type == XTQ__MSG_ASK) {
        if (h.result_len || h.cmd_len || h.payload_len)
            return -XTQ_EBADMSG;
    } else if (h.result_len) {
        if (h.result_len > max_msg)
            return -XTQ_EMSGSIZE;
        if (XTQ_ALIGN_UP((uint64_t)sizeof(h) + h.result_len, (uint64_t)64) > (uint64_t)len)
            return -XTQ_EBADMSG;
        payload_off = sizeof(h);
    }

    if (hdr)
        *hdr = msg;
    if (cmd)
        *cmd = h.type == XTQ__MSG_PUT ? (const char *)msg + sizeof(h) : NULL;
    if (payload) {
        bool any = h.type == XTQ__MSG_PUT   ? h.payload_len != 0
                   : h.type == XTQ__MSG_ACK ? h.result_len != 0
                                            : false;
        *payload = any ? (const char *)msg + payload_off : NULL;
    }
    return 0;
}
