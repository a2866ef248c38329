/* Shadow publishing rules (relay.shadow): chosen event types go to a second destination as well
 * as their normal one ("also") or instead of it ("only"), each copy marked with the header
 * PB_SHADOW_HEADER, so that a migration can run postbox beside a legacy publisher and compare
 * (seed 001). Removing the rule is the back-out.
 *
 * relay.shadow holds rules separated by commas, each "PATTERN MODE DESTINATION":
 *     order.# only shadow.{aggregate_type}.{event_type}, payment.paid.v1 also audit.payments
 * PATTERN matches the event type by dot-separated words as a RabbitMQ topic binding does:
 * "*" is exactly one word, "#" zero or more; letters match whatever their case (as [mask]).
 * DESTINATION is a routing template (common/route.h) that takes the place of the sink's own
 * (amqp.routing_key on amqp.exchange, nats.subject after nats.subject_prefix, kafka.topic,
 * redis.stream after redis.stream_prefix, stdout.destination); a row's destination is not
 * applied to its shadow copy. The first rule that matches decides.
 *
 * @thread any (a rule set is immutable once parsed). */
#ifndef PB_RELAY_SHADOW_RULES_H
#define PB_RELAY_SHADOW_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/event.h"

/* The header (a string "true") on every shadow copy, whatever the broker. */
#define PB_SHADOW_HEADER "postbox-shadow"

typedef enum pb_shadow_mode {
    PB_SHADOW_ALSO, /* the normal destination and the shadow one */
    PB_SHADOW_ONLY, /* the shadow destination instead of the normal one */
} pb_shadow_mode_t;

typedef struct pb_shadow_rule {
    char *pattern;
    pb_shadow_mode_t mode;
    char *destination; /* routing template */
} pb_shadow_rule_t;

typedef struct pb_shadow_rules {
    size_t n;
    pb_shadow_rule_t *rules;
} pb_shadow_rules_t;

/* Parses relay.shadow text into rules (the caller frees them with pb_shadow_rules_free). An
 * empty text gives no rules. PB_FATAL with a message naming the rule and the problem. */
pb_status_t pb_shadow_rules_parse(const char *text, pb_shadow_rules_t *out,
                                  pb_error_t *err) PB_MUSTCHECK;

/* Checks relay.shadow text without keeping the rules (for pb_config_validate). */
pb_status_t pb_shadow_rules_check(const char *text, pb_error_t *err) PB_MUSTCHECK;

void pb_shadow_rules_free(pb_shadow_rules_t *rs);

/* Whether an event type matches a pattern (see above). */
bool pb_shadow_pattern_matches(const char *pattern, const char *event_type);

/* The first rule matching the event type, or NULL. */
const pb_shadow_rule_t *pb_shadow_rule_for(const pb_shadow_rules_t *rs, const char *event_type);

/* Renders the shadow destination of ev by rule into out (the row's destination ignored);
 * false when it does not fit. */
bool pb_shadow_render(const pb_shadow_rule_t *rule, const pb_event_t *ev, char *out,
                      size_t outsz);

#endif
