#!/usr/bin/env bash
# relay.mask_stored across the cdc relay's poll fallback (cdc.on_excess_lag = poll, an age limit
# of 2 s): a delayed event is set aside in postbox.cdc_deferred masked; an event no binding routes
# blocks the stream (retried in place) until the relay falls back. The fallback gives the event
# set aside back to its outbox row (the producer's texts, pending), and the poll capture publishes
# it masked once, not the masked copy masked again. Once the blocked event's routing key is bound
# everything is published: RabbitMQ got every event masked once, and no table of schema postbox
# holds a text the producer wrote.
# On a PostgreSQL of the test's own: the WAL of other tests would count in the slot's lag.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/mask_stored_lib.sh"

use_private_pg
pb_init
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
Q2=$PB_QUEUE.lost
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $Q2"
setup_queue order.order.created.v1
cat >"$PB_TMP/postbox.ini" <<EOF
[relay]
sink = amqp
mask_key_file = $KEY
mask_stored = true
max_attempts = 100000
backoff_base = 200ms
backoff_cap = 500ms

[cdc]
on_excess_lag = poll
max_slot_lag = 0
max_slot_lag_age = 2s
lag_interval = 500ms

[mask]
order.created.v1 = $CREATED_RULES
order.lost.v1 = $CREATED_RULES
EOF

start_cdc_relay -c "$PB_TMP/postbox.ini"
ev enqueue d-1 order.created.v1 "p_available_at => now() + interval '12 s'"
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred WHERE masked") == 1 ]]' 30 ||
    fail "d-1 was not set aside masked: $(psql_q "SELECT aggregate_id, masked FROM postbox.cdc_deferred")"
expect_stored cdc_deferred d-1 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
ev enqueue c-1 order.created.v1
ev enqueue s-1 order.lost.v1
ev enqueue c-2 order.created.v1
wait_until 'grep -q "capture poll active" "$PB_RELAY_LOG"' 60 || fail "the relay did not fall back"
say "fell back: $(grep -m1 'capture poll active' "$PB_RELAY_LOG" | cut -c1-160)"
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") == 0 ]] ||
    fail "the fallback left the event set aside in postbox.cdc_deferred"

amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$Q2" order.order.lost.v1 ||
    fail "amqp-tool setup $Q2 failed"
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]]' 60 ||
    fail "not everything was published: $(psql_q "SELECT string_agg(aggregate_id, ' ') FROM postbox.outbox")"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"

# the broker: each event masked once (d-1 too, published from its row by the poll capture);
# copies published again by the fallback count once
drain_queue "$PB_TMP/got" 3 1500 30
amqp_tool drain "$POSTBOX_AMQP_URL" "$Q2" --expect 1 --idle-ms 1000 --timeout-s 30 >>"$PB_TMP/got" ||
    fail "s-1 did not arrive in $Q2"
for id in c-1 c-2 d-1 s-1; do
    bodies=$(awk -F'\t' -v id="$id" '$5 == id {print $6}' "$PB_TMP/got" | jq -cS . | sort -u)
    [[ $bodies == "$MASKED_CREATED" ]] || fail "RabbitMQ got $id as ${bodies:-nothing}"
    expect_stored outbox_published "$id" . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
done
no_secrets "after the fallback"
say "PASS"
