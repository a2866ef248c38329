/* `postbox shadow compare`: the matching and the diff of two message sets, a legacy publisher's
 * and postbox's shadow copies (relay.shadow), read from their queues or streams by
 * shadow/read.h. Pure functions: no broker, no logging (tests/unit/test_shadow_compare.c).
 *
 * A message is its body and its attributes, all text: for RabbitMQ the header table's entries
 * and the properties (message_id, type, correlation_id, content_type, app_id, user_id,
 * timestamp) and the delivery's routing_key and exchange; for Redis Streams the entry's fields.
 *
 * Specs name a value of a message:
 *     body          the whole body (as JSON when it parses, else as text)
 *     /a/b/0        an RFC 6901 JSON pointer into the body
 *     header:NAME   an attribute (above)
 * Messages are matched by a key spec (its value as text: a string's characters, anything else
 * its compact JSON), then compared field by field; a field is a spec for both sides, or
 * LEGACY=OURS when they name it differently. Values are equal as JSON (member order and
 * whitespace aside; numbers by value, so 10.5 = 10.50 = 1.05e1); a text equals a number or
 * boolean of the same text (a header "42" and a body's 42). Absent equals absent only.
 *
 * Per key the first message read counts; later ones with the same key are counted as
 * duplicates (at least once delivery makes them) and not compared. */
#ifndef PB_SHADOW_COMPARE_H
#define PB_SHADOW_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/err.h"

struct json_t;

typedef struct pb_shadow_attr {
    char *name;
    char *value;
} pb_shadow_attr_t;

typedef struct pb_shadow_msg {
    char *body;
    size_t body_len;
    pb_shadow_attr_t *attrs;
    size_t n_attrs;
    struct json_t *body_json; /* the body parsed once (NULL: not JSON), see body_parsed */
    bool body_parsed;
} pb_shadow_msg_t;

/* The messages read from one queue or stream, in the order read. Owns everything. */
typedef struct pb_shadow_msgs {
    pb_shadow_msg_t *items;
    size_t n, cap;
} pb_shadow_msgs_t;

/* Appends a message with a copy of the body; returns it (valid until the next add). */
pb_shadow_msg_t *pb_shadow_msgs_add(pb_shadow_msgs_t *ms, const void *body, size_t len);
/* Adds an attribute (copies of name and value; value of len bytes, NULs kept out). */
void pb_shadow_msg_set_attr(pb_shadow_msg_t *m, const char *name, const char *value, size_t len);
void pb_shadow_msgs_free(pb_shadow_msgs_t *ms);

typedef enum pb_shadow_spec_kind {
    PB_SPEC_BODY,
    PB_SPEC_POINTER,
    PB_SPEC_HEADER,
} pb_shadow_spec_kind_t;

typedef struct pb_shadow_spec {
    pb_shadow_spec_kind_t kind;
    char *text; /* as given, for reports */
    char *arg;  /* the pointer or the attribute name */
} pb_shadow_spec_t;

/* A field to compare: how each side names it. */
typedef struct pb_shadow_field {
    pb_shadow_spec_t legacy, ours;
} pb_shadow_field_t;

typedef struct pb_shadow_opts {
    pb_shadow_spec_t key_legacy, key_ours;
    pb_shadow_field_t *fields;
    size_t n_fields;
} pb_shadow_opts_t;

/* Parses one spec; PB_FATAL naming what is wrong. what names the option in the message. */
pb_status_t pb_shadow_spec_parse(const char *text, const char *what, pb_shadow_spec_t *out,
                                 pb_error_t *err) PB_MUSTCHECK;
/* Parses a comma-separated field list ("body" when text is empty) into opts->fields. */
pb_status_t pb_shadow_fields_parse(const char *text, pb_shadow_opts_t *opts,
                                   pb_error_t *err) PB_MUSTCHECK;
void pb_shadow_opts_free(pb_shadow_opts_t *opts);

/* The value a spec names in a message: a new JSON reference, or NULL when it is absent. */
struct json_t *pb_shadow_value(pb_shadow_msg_t *m, const pb_shadow_spec_t *spec);

/* Whether two values (either may be NULL: absent) are equal as described above. */
bool pb_shadow_values_equal(struct json_t *a, struct json_t *b);

typedef enum pb_shadow_diff_kind {
    PB_DIFF_MISSING,  /* in legacy, not in ours */
    PB_DIFF_EXTRA,    /* in ours, not in legacy */
    PB_DIFF_DIFFERS,  /* in both, some field differs */
    PB_DIFF_UNKEYED,  /* a message without the key: cannot be matched */
} pb_shadow_diff_kind_t;

typedef struct pb_shadow_field_diff {
    const pb_shadow_field_t *field;
    struct json_t *legacy, *ours; /* owned; NULL: absent */
} pb_shadow_field_diff_t;

typedef struct pb_shadow_diff {
    pb_shadow_diff_kind_t kind;
    char *key;        /* NULL for UNKEYED */
    bool in_legacy;   /* UNKEYED: which side */
    size_t position;  /* UNKEYED: 1-based place in its side's read order */
    pb_shadow_field_diff_t *fields; /* DIFFERS */
    size_t n_fields;
} pb_shadow_diff_t;

typedef struct pb_shadow_report {
    size_t legacy, ours;                     /* messages read */
    size_t equal;                            /* matched and equal */
    size_t missing, extra, differing, unkeyed;
    size_t duplicates_legacy, duplicates_ours;
    pb_shadow_diff_t *diffs; /* in key order: missing, extra and differing mixed; unkeyed last */
    size_t n_diffs;
} pb_shadow_report_t;

/* Matches and compares; the report is the caller's (pb_shadow_report_free). */
void pb_shadow_compare(const pb_shadow_opts_t *opts, pb_shadow_msgs_t *legacy,
                       pb_shadow_msgs_t *ours, pb_shadow_report_t *rep);
void pb_shadow_report_free(pb_shadow_report_t *rep);

/* Whether the two sides are the same: nothing missing, extra, differing or unkeyed. */
bool pb_shadow_report_equal(const pb_shadow_report_t *rep);

/* One line per difference, then a summary line. */
void pb_shadow_report_write_text(const pb_shadow_report_t *rep, FILE *out);
/* One JSON object: sources, counts, equal, and the differences. */
void pb_shadow_report_write_json(const pb_shadow_report_t *rep, const char *legacy_source,
                                 const char *ours_source, FILE *out);

#endif
