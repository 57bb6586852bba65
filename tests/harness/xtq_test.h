/*
 * Minimal test harness: one runner per area, cases registered with
 * XTQ_TEST(name). `runner NAME` runs one case (CTest runs each as its own
 * entry); `runner --list` lists them. A case that cannot run here calls
 * XTQ_SKIP("reason"): exit code 77, reported by CTest as SKIPPED.
 */
#ifndef XTQ_TEST_H
#define XTQ_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XTQ_TEST_SKIP_CODE 77

typedef void (*xtq_test_fn)(void);
struct xtq_test_case {
    const char *name;
    xtq_test_fn fn;
    struct xtq_test_case *next;
};
extern struct xtq_test_case *xtq_test_cases;
extern const char *xtq_test_current;
extern int xtq_test_argc;
extern char **xtq_test_argv;

#define XTQ_TEST(name)                                                                     \
    static void xtq_test_##name(void);                                                     \
    static struct xtq_test_case xtq_test_case_##name = {#name, xtq_test_##name, NULL};     \
    __attribute__((constructor)) static void xtq_test_register_##name(void)                \
    {                                                                                      \
        xtq_test_case_##name.next = xtq_test_cases;                                        \
        xtq_test_cases = &xtq_test_case_##name;                                            \
    }                                                                                      \
    static void xtq_test_##name(void)

#define XTQ_FAIL(...)                                                                      \
    do {                                                                                   \
        fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, xtq_test_current);        \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        fflush(stderr);                                                                    \
        exit(1);                                                                           \
    } while (0)

#define XTQ_SKIP(...)                                                                      \
    do {                                                                                   \
        printf("SKIP [%s]: ", xtq_test_current);                                           \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
        exit(XTQ_TEST_SKIP_CODE);                                                          \
    } while (0)

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond))                                                                       \
            XTQ_FAIL("CHECK(%s)", #cond);                                                  \
    } while (0)

#define CHECK_EQ(a, b)                                                                     \
    do {                                                                                   \
        long long xa_ = (long long)(a), xb_ = (long long)(b);                              \
        if (xa_ != xb_)                                                                    \
            XTQ_FAIL("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, xa_, xb_);                  \
    } while (0)

/* A call returning 0 or -XTQ_E*: print the error name on failure. */
#define CHECK_OK(call)                                                                     \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != 0)                                                                      \
            XTQ_FAIL("%s = %d (%s)", #call, rc_, xtq_errname(rc_));                        \
    } while (0)

#define CHECK_ERR(call, err)                                                               \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != (err))                                                                  \
            XTQ_FAIL("%s = %d (%s), expected %s", #call, rc_, xtq_errname(rc_), #err);     \
    } while (0)

#endif /* XTQ_TEST_H */
