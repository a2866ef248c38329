#!/usr/bin/env bash
# stdout.cloudevents = structured: each line the relay writes is a CloudEvent in the JSON event
# format (structured content mode), read here as a generic CloudEvents reader would: the
# required attributes, subject, time (created_at, RFC 3339), the trace context from the event's
# headers, the sequence extension, destination, and the payload as data, a JSON value. With the
# option off the line keeps postbox's own shape. An event that cannot be a CloudEvent (a control
# character in its type) goes to the dead letters with the reason, and the next is published.
source "$(dirname "$0")/lib.sh"

pb_init
tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '{\"total\": 12.5, \"items\": [1, 2]}',
                               '{\"traceparent\": \"$tp\", \"tracestate\": \"k=v\", \"x-other\": \"1\"}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'o-1', E'order.bad\\x01', '{}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.paid.v1', '\"just a string\"')" >/dev/null
relay_drain 60 --set relay.sink=stdout --set stdout.cloudevents=structured \
    --set relay.cloudevents_source=urn:example:shop
n=$(grep -c . "$PB_RELAY_OUT" || true)
((n == 2)) || fail "expected 2 CloudEvents lines, got $n: $(cat "$PB_RELAY_OUT")"
/usr/bin/python3 - "$PB_RELAY_OUT" "$tp" <<'PY' || fail "the lines are not the CloudEvents expected: $(cat "$PB_RELAY_OUT")"
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tp = sys.argv[2]
first, second = lines
for ev in lines:
    for key in ("specversion", "id", "source", "type"):
        assert isinstance(ev.get(key), str) and ev[key], (key, ev)
    assert ev["specversion"] == "1.0", ev
    assert ev["source"] == "urn:example:shop", ev
    assert ev["datacontenttype"] == "application/json", ev
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", ev["time"]), ev["time"]
    # extension attribute names: lower-case letters and digits only
    for key in ev:
        assert re.fullmatch(r"[a-z0-9]+", key), key
assert first["type"] == "order.created.v1" and first["subject"] == "order/o-1", first
assert first["data"] == {"total": 12.5, "items": [1, 2]}, first["data"]
assert first["traceparent"] == tp and first["tracestate"] == "k=v", first
assert first["aggregatesequence"] == "1", first
assert first["destination"] == "order.order.created.v1", first
assert "x-other" not in first and "headers" not in first, first
assert second["type"] == "order.paid.v1" and second["data"] == "just a string", second
assert "traceparent" not in second, second
assert second["aggregatesequence"] == "1" and second["subject"] == "order/o-2", second
assert first["id"] != second["id"]
PY
say "2 lines in the JSON event format, attributes, trace context, sequence and data as expected"
dead=$(psql_q "SELECT count(*) FROM postbox.dead_letters WHERE coalesce(last_error, '') || reason LIKE '%control character%'")
((dead == 1)) || fail "the event with a control character in its type is not a dead letter with its reason ($dead)"
say "the event that cannot be a CloudEvent is a dead letter, the next one went out"

# off (the default): postbox's own line
psql_q "SELECT postbox.enqueue('order', 'o-3', 'order.created.v1', '{}')" >/dev/null
relay_drain 60 --set relay.sink=stdout
last=$(tail -n 1 "$PB_RELAY_OUT") # the output of every drain of the test, in order
[[ $last == *'"event_id":'*'"o-3"'* && $last != *'"specversion"'* ]] ||
    fail "with stdout.cloudevents off the line is not postbox's own: $last"
say "off: postbox's own line"
