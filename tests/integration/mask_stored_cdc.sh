#!/usr/bin/env bash
# relay.mask_stored with the cdc capture (README, "PII masking"): no text the producer wrote
# survives in any table of schema postbox once its event is settled, and what the broker got is
# masked once.
#   1. stdout sink, cdc.mark_published (the default): an event published (its row moved to the
#      history masked), one expired before it was sent, one that cannot be masked (dead letter
#      with a null payload), events of postbox.emit (no row), an allow-listed type (keep), and
#      delayed events set aside in postbox.cdc_deferred masked (masked = true, published as they
#      are: an hmac is not hashed twice), one of them expiring while set aside, one that cannot
#      be masked (dead-lettered when it is set aside)
#   2. RabbitMQ sink, cdc.delete_after_insert: an event no binding routes, retried in place,
#      dead-lettered masked after relay.max_attempts; the routed one arrives masked
#   3. cdc without cdc.mark_published nor cdc.delete_after_insert is refused
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/mask_stored_lib.sh"

pb_init
cdc_use_slot
cat >"$PB_TMP/postbox.ini" <<EOF
[relay]
sink = stdout
mask_key_file = $KEY
mask_stored = true
mask_allow_types = order.kept.v1
max_attempts = 2
backoff_base = 100ms
backoff_cap = 200ms

[mask]
order.created.v1 = $CREATED_RULES
order.kept.v1 = keep customer.name, hmac customer.email
order.odd.v1 = last4 customer
order.lost.v1 = $CREATED_RULES
EOF
CONF=(-c "$PB_TMP/postbox.ini")

say "1. stdout sink, cdc.mark_published"
cdc_create_slot "${CONF[@]}"
# o-4, o-6 (emitted), o-8 and o-9 wait 12 s (time for the checks below while they are set aside, even on a busy machine); o-9's second event expires at 3 s behind its first
{
    echo "BEGIN;"
    echo "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '$PAYLOAD', '$HEADERS');"
    echo "SELECT postbox.enqueue('order', 'o-2', 'order.created.v1', '$PAYLOAD', '$HEADERS', p_expires_at => now() - interval '1 s');"
    echo "SELECT postbox.enqueue('order', 'o-3', 'order.odd.v1', '$PAYLOAD', '$HEADERS');"
    echo "SELECT postbox.enqueue('order', 'o-4', 'order.created.v1', '$PAYLOAD', '$HEADERS', p_available_at => now() + interval '12 s');"
    echo "SELECT postbox.enqueue('order', 'o-4', 'order.created.v1', '$PAYLOAD', '$HEADERS');"
    echo "SELECT postbox.emit('order', 'o-5', 'order.created.v1', '$PAYLOAD', '$HEADERS');"
    echo "SELECT postbox.emit('order', 'o-6', 'order.created.v1', '$PAYLOAD', '$HEADERS', p_available_at => now() + interval '12 s');"
    echo "SELECT postbox.enqueue('order', 'o-7', 'order.kept.v1', '$PAYLOAD');"
    echo "SELECT postbox.enqueue('order', 'o-8', 'order.odd.v1', '$PAYLOAD', '$HEADERS', p_available_at => now() + interval '12 s');"
    echo "SELECT postbox.enqueue('order', 'o-9', 'order.created.v1', '$PAYLOAD', '$HEADERS', p_available_at => now() + interval '12 s');"
    echo "SELECT postbox.enqueue('order', 'o-9', 'order.created.v1', '$PAYLOAD', '$HEADERS', p_expires_at => now() + interval '3 s');"
    echo "COMMIT;"
} | psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" >/dev/null || fail "cannot write the events"
: >"$PB_RELAY_OUT"
start_cdc_relay "${CONF[@]}"
# o-9's second event is set aside too unless it expired before the relay read it
wait_until '(($(psql_q "SELECT count(*) FROM postbox.cdc_deferred") >= 4))' 30 ||
    fail "the delayed events were not set aside: $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") row(s)"
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE aggregate_id = '"'o-1'"'") == 1 ]]' 30 ||
    fail "o-1 was not published"
# while set aside: masked, flagged so (the outbox rows of o-4 and o-9 are pending, as the producer wrote them)
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred WHERE NOT masked") == 0 ]] ||
    fail "not every event set aside is flagged masked: $(psql_q "SELECT aggregate_id, masked FROM postbox.cdc_deferred")"
expect_stored cdc_deferred o-4 .payload "$MASKED_CREATED" ASC
expect_stored cdc_deferred o-4 .headers "$MASKED_HEADERS" ASC
expect_stored cdc_deferred o-6 .payload "$MASKED_CREATED"
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred WHERE aggregate_id = 'o-8'") == 0 ]] ||
    fail "o-8, which cannot be masked, was set aside"
expect_stored dead_letters o-8 . '{"headers":{},"payload":null}'
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE aggregate_id = 'o-8'")
[[ $reason == *'payload cannot be masked'* ]] || fail "o-8's reason: $reason"

wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") == 0 && $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]]' 30 ||
    fail "the events set aside were not settled: $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") set aside, $(psql_q "SELECT count(*) FROM postbox.outbox") outbox row(s)"
wait_until '[[ $(published o-6) != "" ]]' 10 || fail "o-6 (emitted, delayed) was not published"
cdc_wait_caught_up
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"

# what the broker got: masked once, as stored
for id in o-1 o-4 o-5 o-6 o-9; do
    while read -r line; do
        [[ $(jq -cS .payload <<<"$line") == "$MASKED_CREATED" ]] || fail "$id was published as $line"
        [[ $(jq -cS .headers <<<"$line") == "$MASKED_HEADERS" ]] || fail "$id was published with headers $line"
    done < <(published "$id")
done
(($(published o-4 | wc -l) == 2)) || fail "o-4: $(published o-4 | wc -l) event(s) published, expected 2"
[[ $(published o-7 | jq -cS .payload) == "{\"customer\":$MASKED_CUSTOMER}" ]] ||
    fail "o-7 (allow-listed) was published as $(published o-7)"
for s in "${SECRETS[@]}"; do
    ! grep -qF -- "$s" "$PB_RELAY_OUT" || fail "the stdout sink published \"$s\""
done
# what is stored: the history as published, the dead letters masked
expect_stored outbox_published o-1 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
expect_stored outbox_published o-4 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
expect_stored outbox_published o-4 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}" ASC
expect_stored outbox_published o-7 .payload "{\"customer\":$MASKED_CUSTOMER}"
expect_stored outbox_published o-9 .payload "$MASKED_CREATED"
[[ $(psql_q "SELECT string_agg(aggregate_id || ':' || reason, ' ' ORDER BY aggregate_id) FROM postbox.dead_letters WHERE reason = 'expired'") == "o-2:expired o-9:expired" ]] ||
    fail "expired: $(psql_q "SELECT string_agg(aggregate_id || ':' || reason, ' ') FROM postbox.dead_letters")"
expect_stored dead_letters o-2 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
expect_stored dead_letters o-9 . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
expect_stored dead_letters o-3 . '{"headers":{},"payload":null}'
no_secrets "published, expired (from the stream and set aside), not maskable"

say "2. RabbitMQ sink, cdc.delete_after_insert: an unroutable event dead-lettered after max_attempts"
setup_queue order.order.created.v1
: >"$PB_RELAY_OUT"
start_cdc_relay "${CONF[@]}" --set relay.sink=amqp --set cdc.delete_after_insert=true
# the trigger is in place now: the rows go with the transactions that write them
ev enqueue p-1 order.created.v1
ev enqueue p-2 order.lost.v1
ev emit p-3 order.created.v1
ev emit p-4 order.lost.v1
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.dead_letters WHERE aggregate_id = '"'p-4'"'") == 1 ]]' 60 ||
    fail "p-4 (unroutable) was not dead-lettered: $(tail -n 3 "$PB_RELAY_LOG")"
drain_queue "$PB_TMP/got" 2 1500 30
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
for id in p-1 p-3; do
    body=$(awk -F'\t' -v id="$id" '$5 == id {print $6}' "$PB_TMP/got" | jq -cS .)
    [[ $body == "$MASKED_CREATED" ]] || fail "RabbitMQ got $id as $body"
done
for id in p-2 p-4; do
    reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE aggregate_id = '$id'")
    [[ $reason == *'gave up after 2 attempts'* ]] || fail "$id's reason: $reason"
    expect_stored dead_letters "$id" . "{\"headers\":$MASKED_HEADERS,\"payload\":$MASKED_CREATED}"
done
[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "outbox rows left: $(psql_q "SELECT aggregate_id FROM postbox.outbox")"
[[ $(psql_q "SELECT tgname FROM pg_trigger WHERE tgname = 'outbox_cdc_delete'") == outbox_cdc_delete ]] ||
    fail "cdc.delete_after_insert's trigger is missing"
no_secrets "published and dead-lettered with cdc.delete_after_insert"

say "3. without cdc.mark_published nor cdc.delete_after_insert: refused"
if out=$("$POSTBOX_BIN" "${CONF[@]}" --set relay.capture=cdc --set cdc.mark_published=false relay 2>&1); then
    fail "the cdc relay started with relay.mask_stored and no mark"
fi
[[ $out == *'relay.mask_stored with relay.capture = cdc needs cdc.mark_published or cdc.delete_after_insert'* ]] ||
    fail "cdc with mask_stored, without marks: $out"
say "PASS"
