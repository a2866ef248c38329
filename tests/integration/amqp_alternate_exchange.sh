#!/usr/bin/env bash
# amqp.alternate_exchange: an event no binding routes lands at once in the queue bound to the
# alternate exchange and is marked published (without it, unroutable.sh: retried, then
# dead-lettered). The consumer declares the exchange the same way (no PRECONDITION_FAILED),
# and an exchange declared earlier without the argument is refused with a clear error.
source "$(dirname "$0")/lib.sh"
AE=pb.$PB_TEST.ae
AE_QUEUE=pb.$PB_TEST.unrouted
export POSTBOX_AMQP_ALTERNATE_EXCHANGE=$AE
pb_init
setup_queue none # no queue is bound to the main exchange
amqp_tool delete-exchange "$POSTBOX_AMQP_URL" "$AE" || fail "amqp-tool delete-exchange $AE failed"
amqp_tool delete "$POSTBOX_AMQP_URL" "$AE_QUEUE" || fail "amqp-tool delete $AE_QUEUE failed"
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $AE_QUEUE; amqp_tool delete-exchange $POSTBOX_AMQP_URL $AE"

start_relay
# the relay declared both exchanges; a queue takes what falls through to the alternate one
wait_until "amqp_tool setup '$POSTBOX_AMQP_URL' 'fanout:$AE' '$AE_QUEUE' '' 2>/dev/null" 10 ||
    fail "cannot bind a queue to the alternate exchange $AE"
id=$(psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.lost.v1', '{\"n\": 1}')")
t0=$(date +%s%N)
wait_until "[[ \$(amqp_tool count '$POSTBOX_AMQP_URL' '$AE_QUEUE') == 1 ]]" 10 ||
    fail "the unroutable event did not reach $AE_QUEUE (relay log: $(tail -n 5 "$PB_RELAY_LOG"))"
ms=$((($(date +%s%N) - t0) / 1000000))
say "the unroutable event reached $AE_QUEUE in $ms ms"
((ms < 1000)) || fail "it took $ms ms (over a second)"
wait_until "[[ \$(psql_q \"SELECT count(*) FROM postbox.outbox_published WHERE event_id = '$id'\") == 1 ]]" 10 ||
    fail "the event was not marked published"
[[ $(dead_count) == 0 ]] || fail "the event went to dead_letters"
stop_relay

say "the consumer declares the exchange the same way"
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
out=$(POSTBOX_CONSUME_HANDLER="SELECT 1" timeout 20 "$POSTBOX_BIN" consume --drain 2>&1) ||
    fail "consume --drain failed: $out"

say "an exchange declared without the argument is refused with a clear error"
amqp_tool delete-exchange "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" || fail "delete-exchange failed"
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
rc=0
out=$(timeout 20 "$POSTBOX_BIN" relay --drain 2>&1) || rc=$?
((rc != 0)) || fail "the relay accepted an exchange without the alternate exchange"
grep -q "alternate exchange \"$AE\"" <<<"$out" || fail "no clear error: $out"
say "PASS"
