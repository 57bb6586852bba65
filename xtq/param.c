/* The parameter registry: every XTQ_* variable comes from params.def. */
#include "internal.h"

#include <errno.h>
#include <strings.h>

struct param_def {
    const char *name;
    enum xtq_param_type type;
    const char *def;
    const char *help;
};

static const struct param_def params[] = {
#define X(name, type, def, help) {#name, XTQ_PARAM_##type, def, help},
#include "params.def"
#undef X
};
XTQ_STATIC_ASSERT(ARRAY_SIZE(params) == XTQ__PARAM_COUNT, "one entry per parameter");

static const char *raw(enum xtq__param_id id)
{
    const char *v = getenv(params[id].name);
    return (v && *v) ? v : params[id].def;
}

static bool parse_int(const char *s, int64_t *out, bool size_suffix)
{
    char *end;
    unsigned shift = 0;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s)
        return false;
    if (size_suffix && *end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; end++; break;
        case 'm': case 'M': shift = 20; end++; break;
        case 'g': case 'G': shift = 30; end++; break;
        default: break;
        }
    }
    if (*end)
        return false;
    /* A scaled value that does not fit is not a size (it would wrap). */
    if (shift && (v < 0 || v > (INT64_MAX >> shift)))
        return false;
    *out = v * ((int64_t)1 << shift);
    return true;
}

int64_t xtq__param_int(enum xtq__param_id id)
{
    int64_t v = 0;
    if (!parse_int(raw(id), &v, false)) {
        xtq_warn(CORE, "%s=%s is not an integer; using %s", params[id].name, raw(id),
                 params[id].def);
        parse_int(params[id].def, &v, false);
    }
    return v;
}

uint64_t xtq__param_size(enum xtq__param_id id)
{
    int64_t v = 0;
    if (!parse_int(raw(id), &v, true) || v < 0) {
        xtq_warn(CORE, "%s=%s is not a size; using %s", params[id].name, raw(id), params[id].def);
        parse_int(params[id].def, &v, true);
    }
    return (uint64_t)v;
}

uint64_t xtq__param_ns(enum xtq__param_id id, uint64_t unit_ns)
{
    int64_t v = xtq__param_int(id);
    return v <= 0 ? 0 : xtq__mul_sat((uint64_t)v, unit_ns);
}

bool xtq__param_bool(enum xtq__param_id id)
{
    const char *s = raw(id);
    return strcasecmp(s, "1") == 0 || strcasecmp(s, "yes") == 0 || strcasecmp(s, "true") == 0 ||
           strcasecmp(s, "on") == 0;
}

const char *xtq__param_string(enum xtq__param_id id)
{
    return raw(id);
}

unsigned xtq_param_count(void)
{
    return XTQ__PARAM_COUNT;
}

int xtq_param_get_info(unsigned index, xtq_param_info_t *info)
{
    if (index >= XTQ__PARAM_COUNT || info == NULL)
        return -XTQ_EINVAL;
    info->name = params[index].name;
    info->type = params[index].type;
    info->default_value = params[index].def;
    info->help = params[index].help;
    const char *v = getenv(params[index].name);
    info->value = (v && *v) ? v : NULL;
    return 0;
}

const char *xtq_param_type_name(enum xtq_param_type type)
{
    switch (type) {
    case XTQ_PARAM_INT: return "int";
    case XTQ_PARAM_SIZE: return "size";
    case XTQ_PARAM_BOOL: return "bool";
    case XTQ_PARAM_STRING: return "string";
    }
    return "?";
}
