/* Public-API checks that need no context: error table, parameters and the
 * README's parameter table. */
#include <xtq/xtq.h>

#include "xtq_test.h"

/* Every code has a unique name and a description; both signs work. */
XTQ_TEST(error_table)
{
    static const int codes[] = {
#define X(name, value, desc) value,
        XTQ_ERROR_LIST(X)
#undef X
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        CHECK(strcmp(xtq_strerror(codes[i]), "Unknown error") != 0);
        CHECK(strcmp(xtq_strerror(-codes[i]), xtq_strerror(codes[i])) == 0);
        CHECK(strncmp(xtq_errname(-codes[i]), "XTQ_", 4) == 0);
        for (size_t j = 0; j < i; j++)
            CHECK(codes[i] != codes[j]);
    }
    CHECK(strcmp(xtq_errname(-XTQ_ENOKERNEL), "XTQ_ENOKERNEL") == 0);
    CHECK(strcmp(xtq_strerror(-99999), "Unknown error") == 0);
    CHECK(strcmp(xtq_version(), XTQ_VERSION_STRING) == 0);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

/* README's table lists exactly the library's parameters, with their type,
 * default and help text. */
XTQ_TEST(readme_param_table)
{
    char *readme = read_file(XTQ_SOURCE_DIR "/README.md");
    CHECK(readme != NULL);
    unsigned n = xtq_param_count();
    CHECK(n > 0);
    for (unsigned i = 0; i < n; i++) {
        xtq_param_info_t p;
        CHECK_OK(xtq_param_get_info(i, &p));
        char row[1024];
        snprintf(row, sizeof(row), "| %s | %s | %s | %s |", p.name, xtq_param_type_name(p.type),
                 p.default_value, p.help);
        if (!strstr(readme, row))
            XTQ_FAIL("README.md lacks the row: %s", row);
    }
    /* ... and no row for a parameter the library does not have. */
    unsigned rows = 0;
    for (const char *s = readme; (s = strstr(s, "\n| XTQ_")); s++)
        rows++;
    CHECK_EQ(rows, n);
    CHECK_ERR(xtq_param_get_info(n, &(xtq_param_info_t){0}), -XTQ_EINVAL);
    free(readme);
}

XTQ_TEST(param_env_value)
{
    setenv("XTQ_TABLE_SIZE", "128", 1);
    for (unsigned i = 0; i < xtq_param_count(); i++) {
        xtq_param_info_t p;
        CHECK_OK(xtq_param_get_info(i, &p));
        if (strcmp(p.name, "XTQ_TABLE_SIZE") == 0) {
            CHECK(p.value && strcmp(p.value, "128") == 0);
            CHECK(strcmp(p.default_value, "64") == 0);
            return;
        }
    }
    XTQ_FAIL("XTQ_TABLE_SIZE not listed");
}

/* Extreme values must not overflow when negated (UBSan checks it). */
XTQ_TEST(error_extremes)
{
    CHECK(strcmp(xtq_strerror(-2147483647 - 1), "Unknown error") == 0);
    CHECK(strcmp(xtq_errname(-2147483647 - 1), "XTQ_E?") == 0);
    CHECK(strcmp(xtq_strerror(2147483647), "Unknown error") == 0);
}

/* xtq_completion_state: the caller's bits only, never the library's. */
XTQ_TEST(completion_state_bits)
{
    xtq_completion_t c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(xtq_completion_state(NULL), 0);
    CHECK_EQ(xtq_completion_state(&c), 0);
    c.state = XTQ_COMPLETION_LOCAL;
    CHECK_EQ(xtq_completion_state(&c), XTQ_COMPLETION_LOCAL);
    CHECK_EQ(xtq_completion_test(&c), 0);
    /* A sleeper's bit (bit 31) and any other library bit are masked off. */
    c.state = XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE | (1u << 31) |
              (1u << 20);
    CHECK_EQ(xtq_completion_state(&c),
             XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
    CHECK_EQ(xtq_completion_test(&c), 1);
}

/* Every code a target may reject with has a slot; runtime codes keep
 * (code - XTQ_ENOKERNEL); no two codes of the table share a named slot. */
XTQ_TEST(stats_reject_slots)
{
    static const int codes[] = {
#define X(name, value, desc) value,
        XTQ_ERROR_LIST(X)
#undef X
    };
    unsigned owner[XTQ_STATS_REJECT_SLOTS];
    xtq_stats_t st;

    CHECK_EQ(sizeof(st.rejected_by_reason) / sizeof(st.rejected_by_reason[0]),
             XTQ_STATS_REJECT_SLOTS);
    memset(owner, 0, sizeof(owner));
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        unsigned slot = xtq_stats_reject_slot(-codes[i]);
        CHECK(slot < XTQ_STATS_REJECT_SLOTS);
        CHECK_EQ(slot, xtq_stats_reject_slot(codes[i]));
        if (codes[i] >= XTQ_ENOKERNEL)
            CHECK_EQ(slot, codes[i] - XTQ_ENOKERNEL);
        if (slot == XTQ_STATS_REJECT_OTHER)
            continue;
        if (owner[slot])
            XTQ_FAIL("%s and %s share slot %u", xtq_errname(codes[i]),
                     xtq_errname((int)owner[slot]), slot);
        owner[slot] = (unsigned)codes[i];
    }
    /* Wire-level and rewrite rejections have slots of their own. */
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_ERANGE), XTQ_STATS_REJECT_RANGE);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_EBADMSG), XTQ_STATS_REJECT_BADMSG);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_EMSGSIZE), XTQ_STATS_REJECT_MSGSIZE);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_ENOMEM), XTQ_STATS_REJECT_NOMEM);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_EPROTO), XTQ_STATS_REJECT_PROTO);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_EJOBKEY), XTQ_EJOBKEY - XTQ_ENOKERNEL);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_EVERSION), XTQ_EVERSION - XTQ_ENOKERNEL);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_ESRCRANK), XTQ_ESRCRANK - XTQ_ENOKERNEL);
    CHECK_EQ(xtq_stats_reject_slot(-99999), XTQ_STATS_REJECT_OTHER);
    CHECK_EQ(xtq_stats_reject_slot(-XTQ_ETIMEDOUT), XTQ_STATS_REJECT_OTHER);
}
