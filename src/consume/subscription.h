/* Whether a consumer's subscription takes every event of an aggregate, judged from its
 * configuration at start. Only such a consumer can receive every aggregate_sequence number, so
 * only it waits for a missing one (consume.wait_for_gaps = auto); a filtered subscription
 * (bindings by event type, a subject filter, a stream or topic per event type) keeps the
 * broker's order and the hold-back of failed messages. */
#ifndef PB_CONSUME_SUBSCRIPTION_H
#define PB_CONSUME_SUBSCRIPTION_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "source/source.h"

/* True when the consumer waits for missing sequence numbers: consume.wait_for_gaps, else the
 * source's own judgement of its subscription (takes_every_event). why[0..n) says on what
 * grounds, for the start-up log. */
bool pb_subscription_waits_for_gaps(const pb_config_t *cfg, const pb_source_t *src, char *why,
                                    size_t n);

#endif
