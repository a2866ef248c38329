/* CloudEvents 1.0 binary content mode: the attributes every sink sends beside an event's payload
 * when its option <sink>.cloudevents = binary (README "CloudEvents").
 *
 * The attributes of an event (id, source, type, subject, time, ...) are the same on every
 * broker; what differs is how each binding names and writes them, so this module makes, once
 * per sink, the table of header names for its binding, and per event the values, into buffers
 * of its own (no allocation per event once the buffers have grown): the sink copies them into
 * its message before asking for the next event's.
 *
 *   attribute          value
 *   specversion        1.0
 *   id                 event_id
 *   source             relay.cloudevents_source (default /postbox/<database>)
 *   type               event_type
 *   subject            aggregate_type/aggregate_id
 *   time               created_at, RFC 3339 UTC with microseconds
 *   datacontenttype    application/json
 *   traceparent        the headers' traceparent, when a string (distributed tracing extension)
 *   tracestate         the headers' tracestate, likewise, with a traceparent
 *   aggregatesequence  the aggregate sequence in decimal, when > 0 (an extension of ours: a
 *                      String, as CloudEvents' Integer stops at 2^31 - 1; not the `sequence`
 *                      extension, which orders a source's events lexicographically)
 *
 * Names per binding:
 *   AMQP 0-9-1  <p><attribute>, p = amqp.cloudevents_prefix (cloudEvents_ by default);
 *               datacontenttype is the content_type property (the sink's own), not a header
 *   Kafka       ce_<attribute>; datacontenttype as the header content-type
 *   NATS        ce-<attribute>, every one; values percent-encoded as its binding asks (space,
 *               '"', '%' and every byte outside printable ASCII as %XY)
 *   JSON        the JSON event format (structured content mode, the stdout sink): each
 *               attribute a member of its plain name, the payload as member data
 *   Redis       no binding; postbox's mapping: fields ce_specversion, ce_source, ce_subject,
 *               ce_datacontenttype, and the entry's own fields for the rest (event_id,
 *               event_type, created_at, traceparent, tracestate, aggregate_sequence; payload is
 *               the data): an entry lives in the server's memory, so nothing is written twice
 *
 * @thread loop (a sink's own, like the sink). */
#ifndef PB_SINK_CLOUDEVENTS_H
#define PB_SINK_CLOUDEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/event.h"
#include "common/str.h"
#include "config/config.h"

#define PB_CE_SPECVERSION "1.0"
#define PB_CE_DATACONTENTTYPE "application/json"
#define PB_CE_SEQUENCE_ATTR "aggregatesequence"
#define PB_CE_SOURCE_DEFAULT_PREFIX "/postbox/"

/* How a broker's binding names and writes the attributes. */
typedef enum pb_ce_binding {
    PB_CE_AMQP,  /* AMQP binding's application properties as RabbitMQ headers: prefix of the
                  * caller's (amqp.cloudevents_prefix); datacontenttype is the content_type
                  * property, not a header */
    PB_CE_KAFKA, /* Kafka binding: ce_ headers, datacontenttype as header content-type */
    PB_CE_NATS,  /* NATS binding: ce- headers, values percent-encoded */
    PB_CE_REDIS, /* postbox's mapping: ce_ entry fields for what postbox's own fields do not
                  * hold (specversion, source, subject, datacontenttype) */
    PB_CE_JSON,  /* JSON event format: the attributes' plain names */
} pb_ce_binding_t;

/* The attributes, in the order they are sent. */
enum {
    PB_CE_SPECVERSION_I,
    PB_CE_ID_I,
    PB_CE_SOURCE_I,
    PB_CE_TYPE_I,
    PB_CE_SUBJECT_I,
    PB_CE_TIME_I,
    PB_CE_DATACONTENTTYPE_I,
    PB_CE_TRACEPARENT_I,
    PB_CE_TRACESTATE_I,
    PB_CE_SEQUENCE_I,
    PB_CE_NATTRS
};

/* One attribute as the sink sends it: header or field name, and value (not NUL-terminated
 * in general: use len; value[len] is readable, every value lies in a NUL-terminated text). */
typedef struct pb_ce_attr {
    const char *name;
    size_t name_len;
    const char *value;
    size_t len;
} pb_ce_attr_t;

#define PB_CE_NAME_MAX 40 /* "cloudEvents_aggregatesequence" and its NUL fit */

/* A sink's CloudEvents state: made by pb_ce_new, freed by pb_ce_free. */
typedef struct pb_ce {
    pb_ce_binding_t binding;
    char names[PB_CE_NATTRS][PB_CE_NAME_MAX]; /* "" for an attribute the binding sends
                                               * otherwise (AMQP datacontenttype, Redis's own
                                               * fields) */
    size_t name_len[PB_CE_NATTRS];
    char *source;                         /* as sent (percent-encoded for NATS) */
    size_t source_len;
    /* the values of the event last given to pb_ce_attrs */
    char time[PB_UTC_TEXT_LEN];
    size_t time_len;         /* 0: time not written yet */
    int64_t time_us;         /* the created_at time holds (events of a transaction share it) */
    char sequence[24];
    pb_buf_t scratch; /* subject, percent-encoded values */
} pb_ce_t;

/* Makes the CloudEvents state of a sink of binding `binding` (prefix: the AMQP header prefix;
 * ignored by the other bindings), with relay.cloudevents_source or its default. PB_FATAL when
 * the source is not a URI-reference. */
pb_status_t pb_ce_new(const pb_config_t *cfg, pb_ce_binding_t binding, const char *prefix,
                      pb_ce_t **out, pb_error_t *err) PB_MUSTCHECK;

/* Whether a sink's <section>.cloudevents option (off|binary, or off|structured for stdout)
 * turns the mode on. */
static inline bool pb_ce_wanted(const char *option)
{
    return option && (strcmp(option, "binary") == 0 || strcmp(option, "structured") == 0);
}

/* Frees ce (accepts NULL). */
void pb_ce_free(pb_ce_t *ce);

/* The attributes of ev into out (at most PB_CE_NATTRS), in the order of the table above;
 * returns how many. Values point into ev, ce and the configuration: valid until the next call
 * on ce. Expects an event pb_ce_check_event accepted and its headers as pb_sink_prepare
 * left them. */
size_t pb_ce_attrs(pb_ce_t *ce, const pb_event_t *ev, pb_ce_attr_t *out);

/* Whether a header of the event's own, named name[0..len), would carry one of ce's attributes
 * under the same name (compared without regard to case, as NATS and HTTP headers are): the sink
 * then leaves it out, so the attribute postbox sets is the only one. False when ce is NULL. */
bool pb_ce_owns(const pb_ce_t *ce, const char *name, size_t len);

/* Whether ev can be sent as a CloudEvent: an id, a type and an aggregate, none holding a
 * control character (which a CloudEvents String may not). Otherwise sets res to PB_OUT_REJECT
 * with the reason and returns false. */
bool pb_ce_check_event(const pb_event_t *ev, pb_result_t *res);

/* Checks relay.cloudevents_source: empty (the default is used) or a URI-reference by RFC 3986's
 * grammar (section 4.1). PB_FATAL with the reason otherwise. */
pb_status_t pb_ce_check_source(const char *source, pb_error_t *err) PB_MUSTCHECK;

/* The default source: "/postbox/" followed by the database postgres.dsn names (libpq's rule:
 * dbname, else PGDATABASE, else the user: user, PGUSER, the login name), percent-encoded as a
 * path segment. Into out of n bytes. */
void pb_ce_default_source(const char *dsn, char *out, size_t n);

/* Percent-encodes s[0..len) as the NATS binding asks (space, '"', '%', bytes outside 0x21-0x7e
 * as %XY, upper-case hex) by appending to b. Returns whether anything needed encoding. */
bool pb_ce_nats_encode(pb_buf_t *b, const char *s, size_t len);

#endif
