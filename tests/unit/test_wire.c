/*
 * The wire header: layout, and validation of every malformed case.
 */
#include "internal.h"

#include <sys/mman.h>
#include <unistd.h>

#include "wire.h"
#include "xtq_test.h"

#define KEY     0x0123456789abcdefull
#define NRANKS  4
#define MAX_MSG (1u << 20)

static _Alignas(64) unsigned char msgbuf[256 * 1024];

/* A PUT with `kernarg` bytes of arguments and `payload` bytes of payload;
 * returns the wire length. */
static size_t make_put(void *buf, uint32_t kernarg, uint64_t payload)
{
    struct xtq__wire_hdr h;
    size_t len = xtq__wire_put_len(64 + kernarg, payload);

    CHECK(len <= sizeof(msgbuf));
    memset(buf, 0x5a, len);
    xtq__wire_hdr_init(&h, XTQ__MSG_PUT, KEY, 2, 99);
    h.cmd_len = 64 + kernarg;
    h.payload_len = payload;
    memcpy(buf, &h, sizeof(h));
    return len;
}

static struct xtq__wire_hdr *hdr_of(void *buf)
{
    return (struct xtq__wire_hdr *)buf;
}

static int validate(const void *msg, size_t len)
{
    const struct xtq__wire_hdr *h = NULL;
    const void *cmd = (const void *)1, *payload = (const void *)1;
    return xtq__wire_validate(msg, len, KEY, NRANKS, MAX_MSG, &h, &cmd, &payload);
}

XTQ_TEST(header_layout)
{
    struct xtq__wire_hdr h;

    CHECK_EQ(sizeof(h), 64);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, magic), 0);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, version), 2);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, type), 3);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, flags), 4);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, job_key), 8);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, src_rank), 16);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, cmd_len), 20);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, payload_len), 24);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, seq), 32);
    CHECK_EQ(offsetof(struct xtq__wire_hdr, status), 40);

    memset(&h, 0xff, sizeof(h));
    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, KEY, 3, 12345);
    CHECK_EQ(h.magic, XTQ_WIRE_MAGIC);
    CHECK_EQ(h.version, XTQ_WIRE_VERSION);
    CHECK_EQ(h.type, XTQ__MSG_ACK);
    CHECK_EQ(h.flags, 0);
    CHECK(h.job_key == KEY);
    CHECK_EQ(h.src_rank, 3);
    CHECK_EQ(h.cmd_len, 0);
    CHECK_EQ(h.payload_len, 0);
    CHECK_EQ(h.seq, 12345);
    CHECK_EQ(h.status, 0);
    CHECK_EQ(h.result_len, 0);
    CHECK_EQ(h.reserved1[0], 0);
    CHECK_EQ(h.reserved1[1], 0);
}

XTQ_TEST(lengths)
{
    CHECK_EQ(xtq__wire_payload_offset(64), 128);
    CHECK_EQ(xtq__wire_payload_offset(64 + 1), 192);
    CHECK_EQ(xtq__wire_payload_offset(64 + 64), 192);
    CHECK_EQ(xtq__wire_put_len(64, 0), 128);
    CHECK_EQ(xtq__wire_put_len(64, 1), 192);
    CHECK_EQ(xtq__wire_put_len(64 + 17, 100), 192 + 128);
}

XTQ_TEST(valid_put)
{
    const struct xtq__wire_hdr *h = NULL;
    const void *cmd = NULL, *payload = NULL;
    size_t len = make_put(msgbuf, 17, 100);

    CHECK_OK(xtq__wire_validate(msgbuf, len, KEY, NRANKS, MAX_MSG, &h, &cmd, &payload));
    CHECK(h == (const void *)msgbuf);
    CHECK(cmd == msgbuf + 64);
    CHECK(payload == msgbuf + 192);
    /* More bytes than needed arrived (the transport padded): fine. */
    CHECK_OK(validate(msgbuf, len + 64));
    /* Output pointers are optional. */
    CHECK_OK(xtq__wire_validate(msgbuf, len, KEY, NRANKS, MAX_MSG, NULL, NULL, NULL));
    /* Largest kernel-argument block. */
    len = make_put(msgbuf, XTQ__WIRE_MAX_KERNARG, 0);
    CHECK_OK(validate(msgbuf, len));
}

XTQ_TEST(valid_put_no_payload)
{
    const void *cmd = NULL, *payload = (const void *)1;
    size_t len = make_put(msgbuf, 0, 0);

    CHECK_EQ(len, 128);
    CHECK_OK(xtq__wire_validate(msgbuf, len, KEY, NRANKS, MAX_MSG, NULL, &cmd, &payload));
    CHECK(cmd == msgbuf + 64);
    CHECK(payload == NULL);
}

XTQ_TEST(valid_ack)
{
    struct xtq__wire_hdr h;
    const void *cmd = (const void *)1, *payload = (const void *)1;

    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, KEY, 0, 7);
    h.status = -XTQ_ENOKERNEL;
    /* An ACK's lengths mean nothing; garbage there is not read. */
    h.cmd_len = 3;
    h.payload_len = UINT64_MAX;
    memcpy(msgbuf, &h, sizeof(h));
    CHECK_OK(xtq__wire_validate(msgbuf, 64, KEY, NRANKS, MAX_MSG, NULL, &cmd, &payload));
    CHECK(cmd == NULL);
    CHECK(payload == NULL);
    CHECK_ERR(validate(msgbuf, 63), -XTQ_EBADMSG);
}

XTQ_TEST(truncated)
{
    size_t len = make_put(msgbuf, 32, 100);

    CHECK_ERR(validate(msgbuf, 0), -XTQ_EBADMSG);
    CHECK_ERR(validate(msgbuf, 1), -XTQ_EBADMSG);
    CHECK_ERR(validate(msgbuf, 63), -XTQ_EBADMSG);
    CHECK_ERR(validate(msgbuf, 64), -XTQ_EBADMSG);
    CHECK_ERR(validate(msgbuf, len - 1), -XTQ_EBADMSG);
    CHECK_ERR(validate(msgbuf, len - 64), -XTQ_EBADMSG);
    CHECK_ERR(validate(NULL, len), -XTQ_EBADMSG);
    CHECK_OK(validate(msgbuf, len));
}

XTQ_TEST(bad_magic)
{
    size_t len = make_put(msgbuf, 16, 0);
    hdr_of(msgbuf)->magic = 0x5155;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
    hdr_of(msgbuf)->magic = 0;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
}

XTQ_TEST(bad_version)
{
    size_t len = make_put(msgbuf, 16, 0);
    hdr_of(msgbuf)->version = XTQ_WIRE_VERSION + 1;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EVERSION);
    hdr_of(msgbuf)->version = 0;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EVERSION);
}

XTQ_TEST(bad_type)
{
    static const uint8_t types[] = {0, 3, 0x81, 0xff};
    size_t len = make_put(msgbuf, 16, 0);
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        hdr_of(msgbuf)->type = types[i];
        CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
    }
}

/* Flag bits the type does not define, and reserved fields, are refused
 * (issue 10, bug 9). */
XTQ_TEST(unknown_flags)
{
    size_t len = make_put(msgbuf, 16, 0);
    const uint32_t put_ok =
        XTQ__WIRE_REMOTE_COMPLETION | XTQ__WIRE_RESEND | XTQ__WIRE_LONG_TASK | XTQ__WIRE_NOTIFY;
    hdr_of(msgbuf)->flags = put_ok;
    CHECK_OK(validate(msgbuf, len));
    for (unsigned b = 0; b < 32; b++) {
        if (put_ok & (1u << b))
            continue;
        hdr_of(msgbuf)->flags = XTQ__WIRE_REMOTE_COMPLETION | (1u << b);
        CHECK_ERR(validate(msgbuf, len), -XTQ_EPROTO);
    }
    /* An ACK defines MISSING alone, an ASK defines ASK_AGAIN alone. */
    static const struct {
        enum xtq__msg_type type;
        uint32_t ok;
    } only[] = {{XTQ__MSG_ACK, XTQ__WIRE_MISSING}, {XTQ__MSG_ASK, XTQ__WIRE_ASK_AGAIN}};
    for (size_t k = 0; k < ARRAY_SIZE(only); k++) {
        struct xtq__wire_hdr h;
        xtq__wire_hdr_init(&h, only[k].type, KEY, 0, 7);
        for (unsigned b = 0; b < 32; b++) {
            h.flags = 1u << b;
            memcpy(msgbuf, &h, sizeof(h));
            if (h.flags == only[k].ok)
                CHECK_OK(validate(msgbuf, 64));
            else
                CHECK_ERR(validate(msgbuf, 64), -XTQ_EPROTO);
        }
    }
}

XTQ_TEST(reserved_fields)
{
    size_t len = make_put(msgbuf, 16, 0);
    hdr_of(msgbuf)->reserved1[0] = 1ull << 63;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EPROTO);
    hdr_of(msgbuf)->reserved1[0] = 0;
    hdr_of(msgbuf)->reserved1[1] = 2;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EPROTO);
    hdr_of(msgbuf)->reserved1[1] = 0;
    /* A PUT carries no status. */
    hdr_of(msgbuf)->status = -XTQ_ENOKERNEL;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EPROTO);
    hdr_of(msgbuf)->status = 0;
    CHECK_OK(validate(msgbuf, len));
    /* Nor does an ASK, which is a bare header. */
    struct xtq__wire_hdr ask;
    xtq__wire_hdr_init(&ask, XTQ__MSG_ASK, KEY, 0, 7);
    memcpy(msgbuf, &ask, sizeof(ask));
    CHECK_OK(validate(msgbuf, 64));
    hdr_of(msgbuf)->status = -XTQ_EIO;
    CHECK_ERR(validate(msgbuf, 64), -XTQ_EPROTO);
    hdr_of(msgbuf)->status = 0;
    hdr_of(msgbuf)->payload_len = 64;
    CHECK_ERR(validate(msgbuf, 64), -XTQ_EBADMSG);
    /* Nor may an ACK use them. */
    struct xtq__wire_hdr h;
    xtq__wire_hdr_init(&h, XTQ__MSG_ACK, KEY, 0, 7);
    h.reserved1[1] = 1;
    memcpy(msgbuf, &h, sizeof(h));
    CHECK_ERR(validate(msgbuf, 64), -XTQ_EPROTO);
}

XTQ_TEST(wrong_job_key)
{
    size_t len = make_put(msgbuf, 16, 0);
    hdr_of(msgbuf)->job_key = KEY ^ 1;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EJOBKEY);
    hdr_of(msgbuf)->job_key = 0;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EJOBKEY);
}

XTQ_TEST(rank_out_of_range)
{
    size_t len = make_put(msgbuf, 16, 0);
    hdr_of(msgbuf)->src_rank = NRANKS - 1;
    CHECK_OK(validate(msgbuf, len));
    hdr_of(msgbuf)->src_rank = NRANKS;
    CHECK_ERR(validate(msgbuf, len), -XTQ_ESRCRANK);
    hdr_of(msgbuf)->src_rank = UINT32_MAX;
    CHECK_ERR(validate(msgbuf, len), -XTQ_ESRCRANK);
    hdr_of(msgbuf)->src_rank = 0;
    CHECK_ERR(xtq__wire_validate(msgbuf, len, KEY, 0, MAX_MSG, NULL, NULL, NULL), -XTQ_ESRCRANK);
}

XTQ_TEST(cmd_len_too_small)
{
    static const uint32_t bad[] = {0, 1, 16, 63};
    size_t len = make_put(msgbuf, 0, 0);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        hdr_of(msgbuf)->cmd_len = bad[i];
        CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
    }
}

XTQ_TEST(cmd_len_too_large)
{
    size_t len = make_put(msgbuf, XTQ__WIRE_MAX_KERNARG, 0);
    /* Over the kernel-argument cap, even with enough bytes and room. */
    hdr_of(msgbuf)->cmd_len = 64 + XTQ__WIRE_MAX_KERNARG + 1;
    CHECK_ERR(xtq__wire_validate(msgbuf, sizeof(msgbuf), KEY, NRANKS, SIZE_MAX, NULL, NULL, NULL),
              -XTQ_EMSGSIZE);
    hdr_of(msgbuf)->cmd_len = UINT32_MAX;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EMSGSIZE);
}

XTQ_TEST(oversize)
{
    size_t len = make_put(msgbuf, 16, 100);
    /* Command + payload must fit max_msg (what xtq_put checks). */
    CHECK_OK(xtq__wire_validate(msgbuf, len, KEY, NRANKS, 80 + 100, NULL, NULL, NULL));
    CHECK_ERR(xtq__wire_validate(msgbuf, len, KEY, NRANKS, 80 + 99, NULL, NULL, NULL),
              -XTQ_EMSGSIZE);
    CHECK_ERR(xtq__wire_validate(msgbuf, len, KEY, NRANKS, 0, NULL, NULL, NULL), -XTQ_EMSGSIZE);
    hdr_of(msgbuf)->payload_len = MAX_MSG;
    CHECK_ERR(validate(msgbuf, len), -XTQ_EMSGSIZE);
}

XTQ_TEST(length_mismatch)
{
    size_t len = make_put(msgbuf, 0, 100); /* 128 + 128 */
    CHECK_EQ(len, 256);
    hdr_of(msgbuf)->payload_len = 128; /* same padded length: fine */
    CHECK_OK(validate(msgbuf, len));
    hdr_of(msgbuf)->payload_len = 129; /* needs 320 bytes */
    CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
    hdr_of(msgbuf)->payload_len = 100;
    hdr_of(msgbuf)->cmd_len = 64 + 1; /* payload would start at 192 */
    CHECK_ERR(validate(msgbuf, len), -XTQ_EBADMSG);
}

/* A hostile payload_len must not wrap the length sum into something small. */
XTQ_TEST(overflow_payload_len)
{
    static const uint64_t bad[] = {UINT64_MAX, UINT64_MAX - 63, UINT64_MAX - 128,
                                   UINT64_MAX - 128 - 62, 1ull << 63};
    size_t len = make_put(msgbuf, 0, 0);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        hdr_of(msgbuf)->payload_len = bad[i];
        CHECK_ERR(validate(msgbuf, len), -XTQ_EMSGSIZE);
        /* Even with no configured maximum. */
        int rc = xtq__wire_validate(msgbuf, len, KEY, NRANKS, SIZE_MAX, NULL, NULL, NULL);
        if (bad[i] == (1ull << 63))
            CHECK_EQ(rc, -XTQ_EBADMSG);
        else
            CHECK_EQ(rc, -XTQ_EMSGSIZE);
    }
    /* The largest value that does not wrap is simply too long for what arrived. */
    hdr_of(msgbuf)->payload_len = UINT64_MAX - 128 - 63;
    CHECK_ERR(xtq__wire_validate(msgbuf, len, KEY, NRANKS, SIZE_MAX, NULL, NULL, NULL),
              -XTQ_EBADMSG);
}

/* Validation never reads past `len`: the message ends at a guard page. */
XTQ_TEST(never_reads_beyond_len)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *map =
        mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *end, *msg;
    struct xtq__wire_hdr h;

    CHECK(map != MAP_FAILED);
    CHECK_OK(mprotect(map + page, (size_t)page, PROT_NONE) == 0 ? 0 : -XTQ_EIO);
    end = map + page;

    /* A truncated header right before the guard. */
    for (size_t n = 0; n < 64; n++)
        CHECK_ERR(validate(end - n, n), -XTQ_EBADMSG);

    /* A header claiming a command and payload that did not arrive. */
    msg = end - 64;
    xtq__wire_hdr_init(&h, XTQ__MSG_PUT, KEY, 0, 1);
    h.cmd_len = 64 + 32;
    h.payload_len = 4096;
    memcpy(msg, &h, sizeof(h));
    CHECK_ERR(validate(msg, 64), -XTQ_EBADMSG);
    /* Unaligned start. */
    msg = end - 64 - 128 - 1;
    h.cmd_len = 64;
    h.payload_len = 0;
    memcpy(msg, &h, sizeof(h));
    CHECK_OK(validate(msg, 129));
    munmap(map, (size_t)page * 2);
}
