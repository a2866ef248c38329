#!/usr/bin/env bash
# PII masking that does not leak through the gaps of a deny-list, on the stdout sink: an event
# type and a header name written in another case are still masked, a path without [*] reaches
# into an array, a value whose shape does not fit its rule (a card number that is a plain string
# where the rule expects card.number) is dropped rather than published, with one warning for a
# whole burst of such events, and an allow-listed type (relay.mask_allow_types) publishes only
# the fields its keep / lastN rules name.
source "$(dirname "$0")/lib.sh"

pb_init
CONF=$PB_TMP/postbox.ini
cat >"$CONF" <<INI
[relay]
sink = stdout
mask_allow_types = customer.registered.v1

[mask]
order.created.v1 = drop headers:x-ssn, last4 card.number, drop items.card
customer.registered.v1 = keep id, keep address.country, last4 phone
INI

psql_q "SELECT postbox.enqueue('order', 'o-1', 'Order.Created.V1',
        '{\"card\": {\"number\": \"4111111111111111\"}, \"items\": [{\"card\": \"5500000000000004\", \"sku\": \"A\"}]}',
        '{\"X-SSN\": \"078-05-1120\", \"trace\": \"t-1\"}')" >/dev/null
BURST=30
psql_q "SELECT postbox.enqueue('order', 'o-' || i, 'order.created.v1',
        '{\"card\": \"4012888888881881\", \"total\": 5}') FROM generate_series(2, $((BURST + 1))) i" >/dev/null
psql_q "SELECT postbox.enqueue('customer', 'c-1', 'customer.registered.v1',
        '{\"id\": 7, \"name\": \"Ann\", \"ssn\": \"219-09-9999\",
          \"address\": {\"country\": \"DE\", \"street\": \"Main 1\"}, \"phone\": \"+49123456789\"}')" >/dev/null

relay_drain 60 -c "$CONF"
out=$PB_RELAY_OUT
n=$(grep -c . "$out" || true)
((n == BURST + 2)) || fail "expected $((BURST + 2)) events on stdout, got $n"

first=$(jq -cS 'select(.aggregate_id == "o-1") | [.payload, .headers]' "$out")
[[ $first == '[{"card":{"number":"************1111"},"items":[{"sku":"A"}]},{"trace":"t-1"}]' ]] ||
    fail "Order.Created.V1 published as $first"
say "an event type and a header in another case, a card in an array: masked"

burst=$(jq -c 'select(.aggregate_id == "o-2") | .payload' "$out")
[[ $burst == '{"total":5}' ]] || fail "a card number that is a plain string published as $burst"
for secret in 4111111111111111 5500000000000004 078-05-1120 4012888888881881 219-09-9999 Ann Main; do
    ! grep -q -- "$secret" "$out" || fail "\"$secret\" was published"
done
warnings=$(grep -c 'that a rule could not apply to were dropped' "$PB_RELAY_LOG" || true)
grep 'that a rule could not apply to were dropped' "$PB_RELAY_LOG" | sed 's/^/  log: /'
((warnings == 1)) || fail "expected one warning for the burst of $BURST unfit events, got $warnings"
grep -q 'rule "last4 card.number" cannot go into member "card", a string: dropped' "$PB_RELAY_LOG" ||
    fail "the warning does not name the rule and the member"
say "$BURST card numbers of the wrong shape: dropped, one warning"

customer=$(jq -cS 'select(.event_type == "customer.registered.v1") | .payload' "$out")
[[ $customer == '{"address":{"country":"DE"},"id":7,"phone":"********6789"}' ]] ||
    fail "the allow-listed customer.registered.v1 published as $customer"
say "allow-listed type: only id, address.country and the masked phone published"
[[ $(pending_count) == 0 && $(dead_count) == 0 ]] || fail "events pending or dead-lettered"
say "ok"
