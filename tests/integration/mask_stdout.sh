#!/usr/bin/env bash
# PII masking ([mask] rules) on the stdout sink: what is published is masked (a field dropped,
# one cut to its last 4 characters, one replaced by its HMAC-SHA-256, cards in an array dropped,
# a header hashed), an event type without rules goes out as it is, an event whose value cannot
# take its rule is dead-lettered with the reason (never published unmasked), and the outbox row
# (postbox.outbox_published, postbox.dead_letters) keeps the original payload and headers.
# The cdc capture masks an emitted event the same way. A key file that group or others may read
# is refused at start.
source "$(dirname "$0")/lib.sh"

pb_init
KEY=$PB_TMP/mask.key
printf 'k3y-for-the-mask-test-0123456789abcdef\n' >"$KEY"
chmod 600 "$KEY"
CONF=$PB_TMP/postbox.ini
cat >"$CONF" <<EOF
[relay]
sink = stdout
mask_key_file = $KEY

[mask]
order.created.v1 = drop customer.ssn, last4 card.number, hmac customer.email, drop items[*].card, hmac headers:x-user
order.odd.v1 = last4 customer ; an object cannot keep its last 4 characters
EOF

EMAIL=ann@example.com USER_ID=user-42
CREATED='{"customer": {"name": "Ann", "ssn": "078-05-1120", "email": "'$EMAIL'"},
           "card": {"number": "4111111111111111", "brand": "visa"}, "total": 19.990,
           "items": [{"sku": "A1", "card": "5500000000000004"}, {"sku": "B2"}]}'
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '$CREATED',
                               '{\"x-user\": \"$USER_ID\", \"trace\": \"t-1\"}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.paid.v1',
                               '{\"customer\": {\"email\": \"$EMAIL\"}}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.odd.v1', '{\"customer\": {\"name\": \"Bob\"}}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.created.v1', '{\"customer\": {\"ssn\": \"219-09-9999\"}}')" >/dev/null

relay_drain 60 -c "$CONF"
out=$PB_RELAY_OUT
sed 's/^/  out: /' "$out"
n=$(grep -c . "$out" || true)
((n == 3)) || fail "expected 3 events on stdout (the odd one dead-lettered), got $n"

hmac() { printf '%s' "$1" | openssl dgst -sha256 -mac HMAC -macopt "key:$(head -c -1 "$KEY")" | awk '{print $NF}'; }
created=$(jq -c 'select(.event_type == "order.created.v1" and .aggregate_id == "o-1")' "$out")
[[ -n $created ]] || fail "order.created.v1 of o-1 is not on stdout"
check() { # JQ EXPECTED: the published order.created.v1 of o-1
    local got
    got=$(jq -cS "$1" <<<"$created")
    [[ $got == "$2" ]] || fail "published $1 is $got, expected $2"
}
check '.payload.customer | has("ssn")' false
check '.payload.customer.name' '"Ann"'
check '.payload.customer.email' "\"$(hmac "$EMAIL")\""
check '.payload.card' '{"brand":"visa","number":"************1111"}'
check '.payload.items' '[{"sku":"A1"},{"sku":"B2"}]'
check '.headers["x-user"]' "\"$(hmac "$USER_ID")\""
check '.headers.trace' '"t-1"'
grep -q '"total":19.990' "$out" || fail "an untouched number lost its text (19.990)"
for secret in 078-05-1120 4111111111111111 5500000000000004 219-09-9999 "$USER_ID"; do
    ! grep -q -- "$secret" "$out" || fail "\"$secret\" was published"
done
# no rule for order.paid.v1: published as it is
paid=$(jq -r 'select(.event_type == "order.paid.v1") | .payload.customer.email' "$out")
[[ $paid == "$EMAIL" ]] || fail "order.paid.v1 changed: email $paid"
# the second order.created.v1 had only the dropped field
second=$(jq -c 'select(.aggregate_id == "o-2") | .payload' "$out")
[[ $second == '{"customer":{}}' ]] || fail "o-2's order.created.v1 published as $second"

# the rows keep what the producer wrote
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE event_type = 'order.created.v1'
              AND aggregate_id = 'o-1' AND payload = '$CREATED'::jsonb
              AND headers = '{\"x-user\": \"$USER_ID\", \"trace\": \"t-1\"}'::jsonb") == 1 ]] ||
    fail "the published row of order.created.v1 was changed"
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE event_type = 'order.odd.v1'
                 AND payload = '{\"customer\": {\"name\": \"Bob\"}}'::jsonb")
say "dead letter: $reason"
[[ $reason == *'payload cannot be masked by the [mask] rules of "order.odd.v1"'*'last4 customer'*'is an object'* ]] ||
    fail "order.odd.v1 not dead-lettered with its reason and original payload: $reason"
[[ $(pending_count) == 0 ]] || fail "events still pending"

# cdc capture, the same driver: an emitted event (no outbox row) is masked too
cdc_use_slot
cdc_create_slot -c "$CONF"
: >"$PB_RELAY_OUT"
psql_q "SELECT postbox.emit('order', 'o-3', 'order.created.v1',
               '{\"customer\": {\"ssn\": \"536-90-4399\", \"email\": \"$EMAIL\"}}',
               '{\"x-user\": \"$USER_ID\"}')" >/dev/null
relay_drain 60 --capture cdc -c "$CONF"
sed 's/^/  cdc out: /' "$PB_RELAY_OUT"
emitted=$(jq -cS 'select(.aggregate_id == "o-3") | [.payload, .headers]' "$PB_RELAY_OUT")
want=$(jq -cn --arg e "$(hmac "$EMAIL")" --arg u "$(hmac "$USER_ID")" '[{customer: {email: $e}}, {"x-user": $u}]')
[[ $emitted == "$want" ]] || fail "cdc published $emitted, expected $want"

# a key file that group or others may read is refused, with a clear error
chmod 640 "$KEY"
: >"$PB_RELAY_LOG"
start_relay --drain -c "$CONF"
wait_relay 30
((RELAY_RC != 0)) || fail "the relay started with a key file of mode 0640"
grep -q 'relay.mask_key_file .*: group or others have access (mode 0640)' "$PB_RELAY_LOG" ||
    fail "no clear error for the key file: $(cat "$PB_RELAY_LOG")"
say "ok"
