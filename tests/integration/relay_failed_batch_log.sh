#!/usr/bin/env bash
# A batch whose publishes fail logs one warning, not one per event: 200 events to an exchange
# without any binding (every message comes back unroutable), relay.batch_size 50,
# relay.max_attempts 2, so each event fails twice and is dead-lettered. In the relay's JSON log:
#   - the warnings "publish failed for N of M events of the batch" count the failures (their
#     "failed" fields add up to 400, their "dead" fields to 200) and name the reason;
#   - there is at most one such warning per batch the sink sent, and no warning about a single
#     event (none carries an event_id, no sink warns "returned by rabbitmq");
#   - each event's failure is still there at debug level (400 records with its event_id).
source "$(dirname "$0")/lib.sh"

N=200
pb_init
setup_queue none # the relay declares the exchange; nothing is bound to it
psql_q "SELECT count(postbox.enqueue('order', 'agg-' || g, 'created.v1', jsonb_build_object('seq', g)))
        FROM generate_series(1, $N) g" >/dev/null
relay_drain 120 --set log.format=json --set log.level=debug --set relay.batch_size=50 \
    --set relay.max_attempts=2 --set relay.backoff_base=100ms --set relay.backoff_cap=200ms
[[ $(dead_count) == "$N" ]] || fail "$(dead_count) of $N events dead-lettered"

grep -v '^====' "$PB_RELAY_LOG" >"$PB_TMP/log.json"
summary='select(.level == "warn" and .component == "relay" and (.msg | startswith("publish failed for ")))'
warnings=$(jq -c "$summary" "$PB_TMP/log.json" | wc -l)
failed=$(jq -s "[.[] | $summary | .failed] | add // 0" "$PB_TMP/log.json")
dead=$(jq -s "[.[] | $summary | .dead] | add // 0" "$PB_TMP/log.json")
batches=$(jq -c 'select(.level == "debug" and .component == "sink.amqp" and (.msg | test("^batch of [0-9]+: [0-9]+ sent")))' \
    "$PB_TMP/log.json" | wc -l)
per_event_warn=$(jq -c 'select(.level == "warn" and (has("event_id") or (.msg | test("returned by rabbitmq|publish of event"))))' \
    "$PB_TMP/log.json" | wc -l)
per_event_debug=$(jq -c 'select(.level == "debug" and .component == "relay" and has("event_id")
                                and (.msg | startswith("publish of event")))' "$PB_TMP/log.json" | wc -l)
say "$warnings warning(s) for $failed failed publishes ($dead dead-lettered) in $batches batch(es) sent; per-event: $per_event_warn at warn, $per_event_debug at debug"
say "first: $(jq -r "$summary | .msg" "$PB_TMP/log.json" | head -1 | cut -c1-220)"

((failed == 2 * N)) || fail "the warnings count $failed failed publishes, expected $((2 * N))"
((dead == N)) || fail "the warnings count $dead dead-lettered events, expected $N"
((warnings >= 1 && warnings <= batches)) || fail "$warnings warnings for $batches batches sent: not one per batch"
((warnings * 10 < 2 * N)) || fail "$warnings warnings for $((2 * N)) failed publishes"
((per_event_warn == 0)) || fail "$per_event_warn warnings about single events: $(jq -c 'select(.level == "warn" and has("event_id"))' "$PB_TMP/log.json" | head -2)"
((per_event_debug == 2 * N)) || fail "$per_event_debug debug records of single failed publishes, expected $((2 * N))"
jq -e -s "[.[] | $summary] | all(.msg | contains(\" x unroutable: NO_ROUTE (312) exchange=$POSTBOX_AMQP_EXCHANGE \"))" \
    "$PB_TMP/log.json" >/dev/null || fail "a warning does not name the reason: $(jq -r "$summary | .msg" "$PB_TMP/log.json" | head -1)"
