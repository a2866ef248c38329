#!/usr/bin/env bash
# relay.otlp_endpoint: per send of a batch the relay exports an OTLP/HTTP JSON span of kind
# PRODUCER to a collector (here a fake one, python's http.server recording each POST), in a
# trace of its own, linked (not parented) to the producer's W3C context of each event that has
# one: traceId/spanId from its traceparent, traceState from its tracestate. Events without a
# valid traceparent give no link. Messaging attributes per broker (stdout, RabbitMQ). A collector
# that is down (nothing listens) or never answers costs one warning and does not slow the drain.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3 # Debian's, whatever python3 is first on PATH
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
pb_init
setup_queue '#'

cat >"$PB_TMP/collector.py" <<'PYEOF'
# MODE PORT DIR: "ok" records every POST (path, content type, body) as DIR/NNNNN.json and
# answers 200 {}; "hang" accepts connections and never reads nor answers.
import http.server, json, os, socket, sys
mode, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "hang":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    held = []
    while True:
        held.append(s.accept()[0])
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        n = len([f for f in os.listdir(out) if f.endswith(".json")])
        rec = {"path": self.path, "ctype": self.headers.get("Content-Type"),
               "body": json.loads(body)}
        with open(f"{out}/{n:05d}.tmp", "w") as f:
            json.dump(rec, f)
        os.rename(f"{out}/{n:05d}.tmp", f"{out}/{n:05d}.json")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
PYEOF

start_collector() { # MODE DIR: COLLECTOR_PORT, COLLECTOR_PID
    COLLECTOR_PORT=$(free_port)
    mkdir -p "$2"
    "$PY" "$PB_TMP/collector.py" "$1" "$COLLECTOR_PORT" "$2" 2>>"$PB_TMP/collector.log" &
    COLLECTOR_PID=$!
    PB_PIDS+=("$COLLECTOR_PID")
    wait_until '(exec 3<>"/dev/tcp/127.0.0.1/$COLLECTOR_PORT") 2>/dev/null' 20 ||
        fail "the fake collector did not listen on $COLLECTOR_PORT"
}
stop_collector() { kill -TERM "$COLLECTOR_PID" 2>/dev/null || true; wait "$COLLECTOR_PID" 2>/dev/null || true; }

# check_spans DIR SYSTEM DESTINATION EVENTS EXPECTED_LINKS: every span the collector got, read
# as an OTLP consumer reads it; EXPECTED_LINKS holds "traceId spanId traceState" lines ("-": none)
check_spans() {
    "$PY" - "$@" <<'PYEOF' || fail "the spans the collector got are not the ones expected (files in $1)"
import glob, json, sys
d, system, dest, events, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
want = sorted(tuple(l.split(" ")) for l in want.strip().split("\n") if l.strip())
producer_traces = {w[0] for w in want}
recs = [json.load(open(f)) for f in sorted(glob.glob(d + "/*.json"))]
assert recs, "no export request"
spans, links = [], []
for r in recs:
    assert r["path"] == "/v1/traces", r["path"]
    assert r["ctype"] == "application/json", r["ctype"]
    for rs in r["body"]["resourceSpans"]:
        attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
        assert attrs["service.name"] == {"stringValue": "shop-relay"}, attrs
        for ss in rs["scopeSpans"]:
            assert ss["scope"]["name"] == "postbox", ss["scope"]
            spans += ss["spans"]
count = 0
for s in spans:
    assert s["kind"] == 4, s                       # SPAN_KIND_PRODUCER
    asslen = lambda v, n: isinstance(v, str) and len(v) == n and v == v.lower() and int(v, 16) > 0
    assert asslen(s["traceId"], 32) and asslen(s["spanId"], 16), s
    assert "parentSpanId" not in s, s              # a link, not a child
    assert s["traceId"] not in producer_traces, s  # a trace of its own
    assert 0 < int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"]), s
    a = {x["key"]: x["value"] for x in s["attributes"]}
    assert a["messaging.system"] == {"stringValue": system}, a
    assert a["messaging.operation"] == {"stringValue": "publish"}, a
    if dest == "-":
        assert "messaging.destination.name" not in a and s["name"] == "publish", s
    else:
        assert a["messaging.destination.name"] == {"stringValue": dest}, a
        assert s["name"] == dest + " publish", s
    count += int(a["messaging.batch.message_count"]["intValue"])
    assert "status" not in s, s                    # every event confirmed
    for l in s["links"]:
        links.append((l["traceId"], l["spanId"], l.get("traceState", "-")))
        assert l["flags"] & 0x300 == 0x300, l      # a remote context
assert count == events, (count, events)
assert sorted(links) == want, (sorted(links), want)
PYEOF
}

TP1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TS1=congo=t61rcWkgMzE,rojo=00f067aa0ba902b7
TP2=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00
TP3=00-11111111111111111111111111111111-2222222222222222-01

say "stdout sink: links to each producer context, none for events without one"
psql_q "BEGIN;
        SET LOCAL postbox.traceparent = '$TP1';
        SET LOCAL postbox.tracestate = '$TS1';
        SELECT postbox.enqueue('order', 'a-1', 'traced.v1', '{}');
        SELECT postbox.enqueue('order', 'a-2', 'traced.v1', '{}');
        COMMIT;" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'b-1', 'traced.v1', '{}', '{\"traceparent\": \"$TP2\"}');
        SELECT postbox.enqueue('order', 'c-1', 'plain.v1', '{}');
        -- headers the relay must not link: an all-zero trace id, uppercase hex, version ff
        SELECT postbox.enqueue('order', 'd-1', 'bad.v1', '{}',
            '{\"traceparent\": \"00-00000000000000000000000000000000-00f067aa0ba902b7-01\"}');
        SELECT postbox.enqueue('order', 'd-2', 'bad.v1', '{}',
            '{\"traceparent\": \"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\"}');
        SELECT postbox.enqueue('order', 'd-3', 'bad.v1', '{}',
            '{\"traceparent\": \"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}');
        -- a valid one in headers that are not flat (a number beside it)
        SELECT postbox.enqueue('order', 'e-1', 'traced.v1', '{}',
            '{\"traceparent\": \"$TP3\", \"tracestate\": \"k=v\", \"n\": 1}');" >/dev/null
start_collector ok "$PB_TMP/stdout"
relay_drain 60 --set relay.sink=stdout --set relay.otlp_endpoint="http://127.0.0.1:$COLLECTOR_PORT/" \
    --set relay.otlp_service_name=shop-relay

[[ $(grep -c . "$PB_RELAY_OUT") == 8 ]] || fail "expected 8 events on stdout: $(cat "$PB_RELAY_OUT")"
check_spans "$PB_TMP/stdout" stdout - 8 "4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 $TS1
4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 $TS1
0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 -
11111111111111111111111111111111 2222222222222222 k=v"
grep -q 'exporting a publish span per batch' "$PB_RELAY_LOG" || fail "no log line of the export"
! grep -q 'span export to' "$PB_RELAY_LOG" || fail "an export failed"

say "RabbitMQ: messaging.system rabbitmq, the exchange as destination"
psql_q "BEGIN; SET LOCAL postbox.traceparent = '$TP2';
        SELECT postbox.enqueue('order', 'r-1', 'traced.v1', '{}'); COMMIT;" >/dev/null
start_collector ok "$PB_TMP/amqp"
relay_drain 60 --set relay.sink=amqp --set relay.otlp_endpoint="http://127.0.0.1:$COLLECTOR_PORT" \
    --set relay.otlp_service_name=shop-relay
check_spans "$PB_TMP/amqp" rabbitmq "$POSTBOX_AMQP_EXCHANGE" 1 \
    "0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 -"
stop_collector

# the drain of 3000 events in batches of 100 (30 spans) with the sink stdout, in ms
timed_drain() {
    enqueue_seq 30 1 100
    : >"$PB_RELAY_LOG"
    local t0=$(date +%s%N)
    relay_drain 120 --set relay.sink=stdout --set relay.batch_size=100 "$@" >/dev/null
    DRAIN_MS=$((($(date +%s%N) - t0) / 1000000))
    [[ $(pending_count) == 0 ]] || fail "events left pending"
}
timed_drain
base_ms=$DRAIN_MS
say "without export: ${base_ms} ms"

say "collector down (nothing listens): same pace, one warning"
down_port=$(free_port)
timed_drain --set relay.otlp_endpoint="http://127.0.0.1:$down_port"
say "collector down: ${DRAIN_MS} ms"
n=$(grep -c 'span export to' "$PB_RELAY_LOG" || true)
((n == 1)) || fail "expected one warning of the failed export, got $n"
((DRAIN_MS <= 3 * base_ms + 1500)) || fail "the drain took ${DRAIN_MS} ms against ${base_ms} ms without export"

say "collector never answers: same pace (plus the stop's wait of relay.otlp_timeout), one warning"
start_collector hang "$PB_TMP/hang"
timed_drain --set relay.otlp_endpoint="http://127.0.0.1:$COLLECTOR_PORT" --set relay.otlp_timeout=100ms
say "collector hanging: ${DRAIN_MS} ms"
n=$(grep -c 'span export to' "$PB_RELAY_LOG" || true)
((n == 1)) || fail "expected one warning of the failed export, got $n"
((DRAIN_MS <= 3 * base_ms + 100 + 1500)) || fail "the drain took ${DRAIN_MS} ms against ${base_ms} ms without export"
stop_collector

say "a malformed endpoint is refused at start, naming the option"
rc=0
"$POSTBOX_BIN" --set relay.otlp_endpoint=127.0.0.1:4318 relay --drain >/dev/null 2>"$PB_TMP/bad.err" || rc=$?
((rc == 2)) || fail "a malformed endpoint gave exit status $rc, expected 2"
grep -q 'relay.otlp_endpoint "127.0.0.1:4318" is not a URL' "$PB_TMP/bad.err" || fail "message: $(cat "$PB_TMP/bad.err")"
