/* Retention per event type: "PATTERN=AGE, PATTERN=AGE, ..." as in
 * relay.dead_letter_retention_types, where PATTERN is an event type, a prefix ending in '*'
 * ("payment.*") or "*", and AGE a duration ("90d"; 0 keeps those rows for ever). The first rule
 * whose pattern matches a row's type gives its age; rows no rule matches take the default.
 *
 * The rules go to PostgreSQL as two arrays: LIKE patterns (the prefix's %, _ and \ escaped)
 * and ages in milliseconds (store/purge.c). Pure: no I/O. */
#ifndef PB_STORE_RETENTION_RULES_H
#define PB_STORE_RETENTION_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/str.h"

#define PB_RETENTION_RULES_MAX 64

typedef struct pb_retention_rules {
    size_t n;
    pb_buf_t like;  /* PostgreSQL text[] literal of the LIKE patterns, in rule order */
    pb_buf_t ages;  /* PostgreSQL bigint[] literal of the ages in ms, in rule order */
} pb_retention_rules_t;

/* Parses spec (option names the option in errors). An empty spec gives no rules. On failure
 * rules holds nothing to free. */
pb_status_t pb_retention_rules_parse(const char *option, const char *spec,
                                     pb_retention_rules_t *rules, pb_error_t *err) PB_MUSTCHECK;

void pb_retention_rules_free(pb_retention_rules_t *rules);

#endif
