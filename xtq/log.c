/* Per-subsystem, per-level logging configured by XTQ_LOG_LEVEL and
 * XTQ_LOG_SUBSYS. Thresholds start at WARN so messages before the first
 * xtq__log_init() still show warnings and errors. */
#include "internal.h"

#include <stdarg.h>
#include <strings.h>
#include <unistd.h>

_Atomic int xtq__log_threshold[XTQ__SUBSYS_COUNT] = {
#define X(id, name) [XTQ__SUBSYS_##id] = XTQ__LOG_WARN,
    XTQ__SUBSYS_LIST(X)
#undef X
};

static const char *const subsys_names[] = {
#define X(id, name) name,
    XTQ__SUBSYS_LIST(X)
#undef X
};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static int parse_level(const char *s)
{
    for (unsigned i = 0; i < ARRAY_SIZE(level_names); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return (int)i;
    return XTQ__LOG_WARN;
}

static bool subsys_selected(const char *list, const char *name)
{
    if (list == NULL || *list == '\0' || strcasecmp(list, "all") == 0)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if ((len == n && strncasecmp(p, name, n) == 0) || (len == 3 && strncasecmp(p, "all", 3) == 0))
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* Every xtq_init: a second context's init runs while the first one's
 * threads log, so the thresholds are atomics (loads are plain moves). */
void xtq__log_init(void)
{
    int level = parse_level(xtq__param_string(XTQ__PARAM_XTQ_LOG_LEVEL));
    const char *list = xtq__param_string(XTQ__PARAM_XTQ_LOG_SUBSYS);
    for (int i = 0; i < XTQ__SUBSYS_COUNT; i++) {
        /* Unselected subsystems keep errors: they must never be silent. */
        xtq__log_threshold[i] = subsys_selected(list, subsys_names[i]) ? level : XTQ__LOG_ERROR;
    }
}

void xtq__log_emit(enum xtq__subsys subsys, enum xtq__log_level level, const char *file,
                   int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    fprintf(stderr, "xtq[%d] %s:%s %s:%d: %s\n", (int)getpid(), subsys_names[subsys],
            level_names[level], base ? base + 1 : file, line, msg);
}
