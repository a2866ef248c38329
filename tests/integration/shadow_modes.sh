#!/usr/bin/env bash
# relay.shadow modes. also: the event goes to its normal destination and to the shadow one, and
# is marked published only when both confirmed (a shadow copy that no queue takes comes back
# unroutable: the event is retried, not published, until a queue is bound). only: the normal
# destination gets nothing. An event type no rule matches is published as before. On Redis
# Streams the same, and `postbox shadow compare` reads streams (XRANGE: nothing consumed).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh" # relay.sink = redis unless --set says otherwise
SHADOW_Q=pb.$PB_TEST.shadow
pb_init
setup_queue 'order.#' 'user.#'
amqp_tool delete "$POSTBOX_AMQP_URL" "$SHADOW_Q" || fail "delete $SHADOW_Q"
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $SHADOW_Q"
count() { amqp_tool count "$POSTBOX_AMQP_URL" "$1" 2>/dev/null || echo none; }
attempts() { psql_q "SELECT coalesce(max(attempts), 0) FROM postbox.outbox WHERE published_at IS NULL"; }
AMQP=(--set relay.sink=amqp --set relay.backoff_base=200ms --set relay.backoff_cap=500ms)

say "also: published only once the shadow copy is confirmed as well"
start_relay "${AMQP[@]}" --set 'relay.shadow=order.# also shadow.{event_type}'
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.paid.v1', '{\"order_id\": 1}')" >/dev/null
wait_until "(( \$(attempts) >= 2 ))" 30 || fail "the event was not retried (relay log: $(tail -n 5 "$PB_RELAY_LOG"))"
[[ $(published_count) == 0 ]] || fail "published while its shadow copy was unroutable"
(($(count "$PB_QUEUE") >= 1)) || fail "the normal destination got nothing"
# both copies carry the event's id as message_id, so the broker's return may be put down to
# either: the event's outcome (retry) is the same, and the reason names the routing key
grep -q 'publish failed.*routing_key=shadow.order.paid.v1' "$PB_RELAY_LOG" ||
    fail "the retry does not say that the shadow copy failed: $(tail -n 3 "$PB_RELAY_LOG")"
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$SHADOW_Q" 'shadow.#' || fail "setup $SHADOW_Q"
wait_until "[[ \$(published_count) == 1 ]]" 30 || fail "not published once the shadow copy could be routed"
[[ $(count "$SHADOW_Q") == 1 ]] || fail "the shadow queue holds $(count "$SHADOW_Q"), expected 1"
(($(count "$PB_QUEUE") >= 2)) || fail "the normal copy was not published again with the retry (at least once)"
[[ $(dead_count) == 0 ]] || fail "dead-lettered"
stop_relay

say "only: the normal destination gets nothing; other event types as before"
setup_queue 'order.#' 'user.#'
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$SHADOW_Q" 'shadow.#' || fail "setup $SHADOW_Q"
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.paid.v1', '{\"order_id\": 2}');
        SELECT postbox.enqueue('user', 'u-1', 'user.created.v1', '{}')" >/dev/null
relay_drain 60 "${AMQP[@]}" --set 'relay.shadow=order.# only shadow.{event_type}'
[[ $(published_count) == 3 ]] || fail "published $(published_count) of 3"
got=$(amqp_tool drain "$POSTBOX_AMQP_URL" "$PB_QUEUE" --expect 1 --idle-ms 500 --timeout-s 20 | cut -f2)
[[ $got == user.created.v1 ]] || fail "the normal destination got '$got', expected only user.created.v1"
[[ $(count "$SHADOW_Q") == 1 ]] || fail "the shadow queue holds $(count "$SHADOW_Q"), expected 1"

say "Redis Streams: also, and shadow compare reads streams"
LEGACY=pb:$PB_TEST:legacy OURS=pb:$PB_TEST:shadow.order
for i in 1 2 3; do
    psql_q "SELECT postbox.enqueue('order', 'r-$i', 'order.paid.v1', '{\"order_id\": $i, \"n\": $i}')" >/dev/null
    redis_cli XADD "$LEGACY" '*' payload "{\"n\": $i, \"order_id\": $i}" >/dev/null
done
relay_drain 60 --set redis.max_age=1d --set 'relay.shadow=order.# also shadow.{aggregate_type}'
[[ $(redis_cli XLEN "pb:$PB_TEST:order") == 3 ]] || fail "normal stream: $(redis_cli XLEN "pb:$PB_TEST:order") entries"
[[ $(redis_cli XLEN "$OURS") == 3 ]] || fail "shadow stream: $(redis_cli XLEN "$OURS") entries"
redis_cli --raw XRANGE "$OURS" - + | grep -q '"postbox-shadow":"true"' || fail "shadow entries are not marked"
redis_cli --raw XRANGE "pb:$PB_TEST:order" - + | grep -q 'postbox-shadow' && fail "normal entries are marked shadow"
rc=0
out=$("$POSTBOX_BIN" shadow compare --legacy "redis:$LEGACY" --ours "redis:$OURS" --key /order_id --fields body) || rc=$?
((rc == 0)) || fail "compare of equal streams exited $rc: $out"
redis_cli XADD "$LEGACY" '*' payload '{"n": 4, "order_id": 4}' >/dev/null
rc=0
out=$("$POSTBOX_BIN" shadow compare --legacy "redis:$LEGACY" --ours "redis:$OURS" --key /order_id --fields body) || rc=$?
((rc == 1)) || fail "compare with a missing event exited $rc: $out"
[[ $(head -n 1 <<<"$out") == 'missing   4: in legacy, not in ours' ]] || fail "compare: $out"
[[ $(redis_cli XLEN "$LEGACY") == 4 && $(redis_cli XLEN "$OURS") == 3 ]] || fail "compare changed the streams"
rc=0
out=$("$POSTBOX_BIN" shadow compare --legacy "redis:pb:$PB_TEST:nosuch" --ours "redis:$OURS" --key /order_id 2>&1) || rc=$?
((rc == 2)) && grep -q 'no stream "pb:'"$PB_TEST"':nosuch"' <<<"$out" || fail "a missing stream: exit $rc, $out"
say "PASS"
