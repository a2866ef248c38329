#!/usr/bin/env bash
# The stdout sink writes one JSON object per event (event_id, event_type, payload) on stdout;
# logs stay on stderr.
source "$(dirname "$0")/lib.sh"

pb_init
for i in 1 2 3; do
    psql_q "SELECT postbox.enqueue('order', 'o-$i', 'order.created.v1', '{\"n\": $i}')" >/dev/null
done
relay_drain 60 --set relay.sink=stdout
out=$PB_RELAY_OUT
n=$(grep -c . "$out" || true)
say "stdout: $n line(s)"
sed 's/^/  out: /' "$out"
((n == 3)) || fail "expected 3 lines on stdout, got $n"
while IFS= read -r line; do
    [[ $line == \{*\} ]] || fail "not a JSON object: $line"
    for f in event_id event_type payload; do
        [[ $line == *"\"$f\""* ]] || fail "no \"$f\" in: $line"
    done
done <"$out"
for id in $(psql_q "SELECT event_id FROM postbox.outbox ORDER BY id"); do
    grep -q "$id" "$out" || fail "event $id is not on stdout"
done
grep -q '"order.created.v1"' "$out" || fail "event_type value missing"
for i in 1 2 3; do grep -Eq "\"n\": ?$i" "$out" || fail "payload of event $i missing"; done
# in id order
order=$(grep -Eo '"n": ?[0-9]' "$out" | grep -Eo '[0-9]$' | tr -d '\n')
[[ $order == 123 ]] || fail "events out of order on stdout: $order"
[[ $(pending_count) == 0 ]] || fail "events still pending after the stdout relay"
