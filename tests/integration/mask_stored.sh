#!/usr/bin/env bash
# relay.mask_stored (README, "[mask]"): the history (postbox.outbox_published) and the dead
# letters keep what was published, masked, instead of what the producer wrote.
#   1. off (the default): a published event's row and a dead letter keep the raw payload
#   2. on: a published event's row is masked (field dropped, last4, hmac, header hmac); an event
#      that expired before it was sent is masked in its dead letter; one whose payload cannot be
#      masked is dead-lettered with a null payload and no headers (never stored raw); a type
#      without rules is stored as it is
#   3. the masked dead letter replayed: published again, masked again (drop and last4 give the
#      same text, hmac hashes the token once more), and stored masked
#   4. the cdc capture takes the option only with cdc.mark_published or cdc.delete_after_insert
#      (mask_stored_cdc.sh tests it)
source "$(dirname "$0")/lib.sh"

pb_init
KEY=$PB_TMP/mask.key
printf 'k3y-for-the-mask-stored-test-0123456789\n' >"$KEY"
chmod 600 "$KEY"
conf() { # MASK_STORED: writes the config
    cat >"$PB_TMP/postbox.ini" <<EOF
[relay]
sink = stdout
mask_key_file = $KEY
mask_stored = $1

[mask]
order.created.v1 = drop customer.ssn, last4 card.number, hmac customer.email, hmac headers:x-user
order.odd.v1 = last4 customer
EOF
}
hmac() { printf '%s' "$1" | openssl dgst -sha256 -mac HMAC -macopt "key:$(head -c -1 "$KEY")" | awk '{print $NF}'; }

EMAIL=ann@example.com USER_ID=user-42 SSN=078-05-1120 CARD=4111111111111111
created() { # ID: an order.created.v1 with personal data ([EXTRA] enqueue arguments)
    psql_q "SELECT postbox.enqueue('order', '$1', 'order.created.v1',
        '{\"customer\": {\"name\": \"Ann\", \"ssn\": \"$SSN\", \"email\": \"$EMAIL\"}, \"card\": {\"number\": \"$CARD\"}}',
        '{\"x-user\": \"$USER_ID\", \"trace\": \"t-1\"}'${2:+, $2})" >/dev/null
}
odd() { psql_q "SELECT postbox.enqueue('order', '$1', 'order.odd.v1', '{\"customer\": {\"name\": \"Bob\", \"ssn\": \"$SSN\"}}')" >/dev/null; }
stored() { # TABLE ID: payload and headers of the aggregate's row, as jq-sorted JSON
    psql_q "SELECT jsonb_build_object('payload', payload, 'headers', headers) FROM postbox.$1 WHERE aggregate_id = '$2' ORDER BY id DESC LIMIT 1" | jq -cS .
}
expect_stored() { # TABLE ID JQ EXPECTED
    local got
    got=$(stored "$1" "$2" | jq -cS "$3")
    [[ $got == "$4" ]] || fail "postbox.$1 of $2: $3 is $got, expected $4"
}

say "1. off: the raw payload is stored"
conf false
created o-1
odd o-2
relay_drain 60 -c "$PB_TMP/postbox.ini"
expect_stored outbox_published o-1 .payload.customer.ssn "\"$SSN\""
expect_stored dead_letters o-2 .payload.customer.ssn "\"$SSN\""

say "2. on: the history and the dead letters are masked"
conf true
created o-3
created o-4 "p_expires_at => now() + interval '50 milliseconds'"
odd o-5
psql_q "SELECT postbox.enqueue('order', 'o-6', 'order.paid.v1', '{\"customer\": {\"email\": \"$EMAIL\"}}')" >/dev/null
sleep 0.2 # o-4 expires before the relay starts
: >"$PB_RELAY_OUT"
relay_drain 60 -c "$PB_TMP/postbox.ini"
masked_customer="{\"email\":\"$(hmac "$EMAIL")\",\"name\":\"Ann\"}"
expect_stored outbox_published o-3 .payload.customer "$masked_customer"
expect_stored outbox_published o-3 .payload.card.number '"************1111"'
expect_stored outbox_published o-3 .headers "{\"trace\":\"t-1\",\"x-user\":\"$(hmac "$USER_ID")\"}"
# what is stored is what was published
[[ $(stored outbox_published o-3 | jq -cS .payload) == $(jq -cS 'select(.aggregate_id == "o-3") | .payload' "$PB_RELAY_OUT") ]] ||
    fail "the stored payload of o-3 is not the one published"
[[ $(psql_q "SELECT reason FROM postbox.dead_letters WHERE aggregate_id = 'o-4'") == expired ]] || fail "o-4 did not expire"
expect_stored dead_letters o-4 .payload.customer "$masked_customer"
expect_stored dead_letters o-5 . '{"headers":{},"payload":null}'
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE aggregate_id = 'o-5'")
[[ $reason == *'payload cannot be masked'* ]] || fail "o-5's reason: $reason"
expect_stored outbox_published o-6 .payload.customer.email "\"$EMAIL\""
for secret in "$SSN" "$CARD" "$USER_ID" "$EMAIL"; do
    n=$(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE aggregate_id IN ('o-3', 'o-4', 'o-5')
                  AND (payload::text || headers::text) LIKE '%$secret%'")
    n=$((n + $(psql_q "SELECT count(*) FROM postbox.dead_letters WHERE aggregate_id IN ('o-3', 'o-4', 'o-5')
                  AND (payload::text || headers::text) LIKE '%$secret%'")))
    ((n == 0)) || fail "\"$secret\" is stored in $n rows of events masked on storage"
done

say "3. the masked dead letter replayed"
out=$("$POSTBOX_BIN" -c "$PB_TMP/postbox.ini" dlq replay --aggregate order --event-type order.created.v1 --since 1h) ||
    fail "dlq replay failed: $out"
[[ $out == *"replayed 1 "* ]] || fail "dlq replay: $out"
: >"$PB_RELAY_OUT"
relay_drain 60 -c "$PB_TMP/postbox.ini"
again=$(jq -cS 'select(.aggregate_id == "o-4") | .payload' "$PB_RELAY_OUT")
want="{\"card\":{\"number\":\"************1111\"},\"customer\":{\"email\":\"$(hmac "$(hmac "$EMAIL")")\",\"name\":\"Ann\"}}"
[[ $again == "$want" ]] || fail "the replayed o-4 was published as $again, expected $want"
expect_stored outbox_published o-4 .payload "$want"

say "4. the cdc capture refuses the option without cdc.mark_published nor cdc.delete_after_insert"
if out=$("$POSTBOX_BIN" -c "$PB_TMP/postbox.ini" --set relay.capture=cdc --set cdc.mark_published=false relay 2>&1); then
    fail "the cdc relay started with relay.mask_stored and no mark"
fi
[[ $out == *'relay.mask_stored with relay.capture = cdc needs cdc.mark_published'* ]] || fail "cdc with mask_stored: $out"
say "PASS"
