/* Shadow publishing in the relay: a sink that stands in front of the configured one when
 * relay.shadow has rules (relay/shadow_rules.h) and hands it, per batch, the events as they are
 * plus a shadow copy of each event a rule matches (mode also), or the copy alone (mode only).
 * A copy carries the header PB_SHADOW_HEADER = "true" and the rule's destination.
 *
 * An event's result is the worst of its copies' (REJECT, then RETRY, then not sent): it is
 * marked published only when every destination it goes to confirmed it. A copy that failed is
 * published again with the others at the next attempt (at least once, as always).
 *
 * Without rules no wrapper is made, so an event costs nothing more than before.
 *
 * @thread the relay driver's thread (as every sink). */
#ifndef PB_RELAY_SHADOW_SINK_H
#define PB_RELAY_SHADOW_SINK_H

#include "common/err.h"
#include "config/config.h"
#include "sink/sink.h"

/* When cfg->relay_shadow has rules, replaces *snk by a shadow sink that owns the former *snk;
 * otherwise leaves *snk as it is. PB_FATAL for bad rules (*snk is then unchanged, still the
 * caller's). */
pb_status_t pb_shadow_sink_wrap(const pb_config_t *cfg, pb_sink_t **snk,
                                pb_error_t *err) PB_MUSTCHECK;

#endif
