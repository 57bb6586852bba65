/*
 * Parameters: every XTQ_* environment variable is declared once, with its
 * type, default and help text. xtq_info lists them; so does the README.
 */
#ifndef XTQ_PARAM_H
#define XTQ_PARAM_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

enum xtq_param_type { XTQ_PARAM_INT, XTQ_PARAM_SIZE, XTQ_PARAM_BOOL, XTQ_PARAM_STRING };

typedef struct xtq_param_info {
    const char *name;          /**< "XTQ_PROVIDER" */
    enum xtq_param_type type;
    const char *default_value; /**< as text */
    const char *help;
    const char *value;         /**< the environment's value, or NULL when unset */
} xtq_param_info_t;

/** Number of parameters. */
XTQ_API unsigned xtq_param_count(void);

/** Describe parameter `index` (< xtq_param_count()). */
XTQ_API int xtq_param_get_info(unsigned index, xtq_param_info_t *info);

/** "int", "size", "bool" or "string". */
XTQ_API const char *xtq_param_type_name(enum xtq_param_type type);

XTQ_EXTERN_C_END

#endif /* XTQ_PARAM_H */
