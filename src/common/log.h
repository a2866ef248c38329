/* Logging: one line per record on stderr, either text for people or one JSON object (ELK).
 *
 * The macros test the level before evaluating their arguments, so debug logging in a hot path
 * costs one comparison when it is off. `fac` names the component ("relay", "sink.amqp"). */
#ifndef PB_COMMON_LOG_H
#define PB_COMMON_LOG_H

#include <stdbool.h>

#include "common/err.h"
#include "common/redact.h" /* every record is redacted; callers redact what they print */

typedef enum pb_log_level {
    PB_LOG_ERROR = 0,
    PB_LOG_WARN = 1,
    PB_LOG_INFO = 2,
    PB_LOG_DEBUG = 3,
} pb_log_level_t;

extern pb_log_level_t pb_log_threshold;

/* level names: error, warn, info, debug; format: text or json. Returns false on unknown names. */
bool pb_log_set_level(const char *name);
bool pb_log_set_format(const char *name);

void pb_log_write(pb_log_level_t level, const char *fac, const char *fmt, ...) PB_PRINTF(3, 4);

#define PB_LOG(level, fac, ...)                                                                    \
    do {                                                                                           \
        if ((level) <= pb_log_threshold)                                                           \
            pb_log_write((level), (fac), __VA_ARGS__);                                             \
    } while (0)
/* Structured fields of a record: extra members of the JSON object, or key=value pairs after
 * the message in text format. Build the list with PB_FIELDS(PB_LF_STR("event_id", id),
 * PB_LF_NUM("delay_ms", ms)); a NULL string value is written as null (JSON) or "-" (text). */
typedef struct pb_log_field {
    const char *key; /* NULL ends the list */
    const char *str;
    double num;
    int kind; /* 1 string, 2 number */
} pb_log_field_t;
#define PB_LF_STR(k, v) {.key = (k), .str = (v), .kind = 1}
#define PB_LF_NUM(k, v) {.key = (k), .num = (double)(v), .kind = 2}
#define PB_FIELDS(...) ((const pb_log_field_t[]){__VA_ARGS__, {0}})

void pb_log_write_fields(pb_log_level_t level, const char *fac, const pb_log_field_t *fields,
                         const char *fmt, ...) PB_PRINTF(4, 5);

#define PB_LOGF(level, fac, fields, ...)                                                           \
    do {                                                                                           \
        if ((level) <= pb_log_threshold)                                                           \
            pb_log_write_fields((level), (fac), fields, __VA_ARGS__);                              \
    } while (0)
#define log_warn_f(fac, fields, ...) PB_LOGF(PB_LOG_WARN, fac, fields, __VA_ARGS__)
#define log_info_f(fac, fields, ...) PB_LOGF(PB_LOG_INFO, fac, fields, __VA_ARGS__)
#define log_debug_f(fac, fields, ...) PB_LOGF(PB_LOG_DEBUG, fac, fields, __VA_ARGS__)

#define log_error(fac, ...) PB_LOG(PB_LOG_ERROR, fac, __VA_ARGS__)
#define log_warn(fac, ...) PB_LOG(PB_LOG_WARN, fac, __VA_ARGS__)
#define log_info(fac, ...) PB_LOG(PB_LOG_INFO, fac, __VA_ARGS__)
#define log_debug(fac, ...) PB_LOG(PB_LOG_DEBUG, fac, __VA_ARGS__)


#endif
