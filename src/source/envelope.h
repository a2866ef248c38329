/* What a received message's headers say about it beyond the fields its source reads: the
 * CloudEvents attributes of another producer (binary content mode) and the W3C trace context.
 *
 * Every source turns its broker's headers into the JSON object of pb_message_t.headers; this
 * module reads that object, so one rule serves the four brokers:
 *
 *   message_id   the source's own (message_id property, consume.message_id_header, the Redis
 *                entry's event_id), else the CloudEvents id attribute
 *   type         the source's own (type property, event_type), else the type attribute
 *   sequence     the source's own (aggregate_sequence), else the aggregatesequence attribute
 *   traceparent  the header traceparent, else the traceparent attribute; only a valid W3C
 *                traceparent (version 00 form), else none
 *   tracestate   likewise (only with a traceparent)
 *
 * Not the aggregate: a CloudEvents subject is free text of its producer, and splitting
 * "order/42" into a type and an id would be a guess. Without postbox's aggregate_type and
 * aggregate_id headers a message has no aggregate, so no per-aggregate order.
 *
 * Attribute names per source (the bindings' names, cloudevents.h):
 *   amqp   cloudEvents_<attr>, cloudEvents:<attr> (the older separator), and
 *          amqp.cloudevents_prefix when it is another (ce-); a value that was not a UTF-8
 *          string (the headers' "\x<hex>" form) counts as absent
 *   kafka  ce_<attr>
 *   nats   ce-<attr>, percent-decoded (a malformed escape counts as absent)
 *   redis  ce_<attr> entry fields (postbox's own mapping uses event_id and event_type, which
 *          the source reads itself)
 *
 * Hostile values take the inbox's usual way (inbox/screen.h): an id too long or not UTF-8 is
 * replaced by its digest, a type not UTF-8 refuses the message into inbox_dead.
 *
 * @thread the consumer's loop (one envelope per driver). */
#ifndef PB_SOURCE_ENVELOPE_H
#define PB_SOURCE_ENVELOPE_H

#include <stddef.h>

#include "common/str.h"
#include "config/config.h"
#include "source/source.h"

#define PB_ENVELOPE_MAX_PREFIXES 3

typedef struct pb_envelope {
    const char *prefixes[PB_ENVELOPE_MAX_PREFIXES]; /* CloudEvents attribute name prefixes */
    size_t n_prefixes;
    bool percent_encoded; /* NATS: values percent-encoded */
    pb_buf_t text;        /* the values of the last batch, NUL-separated */
} pb_envelope_t;

/* Sets env up for the source cfg->consume_source names. */
void pb_envelope_init(pb_envelope_t *env, const pb_config_t *cfg);

/* Fills in msgs[0..n) what their own fields lack, by the rules above. The strings set point
 * into env: valid until the next call (as the source's own are until its next receive). */
void pb_envelope_fill(pb_envelope_t *env, pb_message_t *msgs, size_t n);

void pb_envelope_free(pb_envelope_t *env);

#endif
