#!/usr/bin/env bash
# The NATS sink's header block on the wire, read as raw bytes by a plain core-NATS subscriber (no
# nats.c, no postbox code): with the envelope on (CloudEvents binary + a trace context) and the
# event's own headers, every message has the 21 headers below, each once, each "key: value" on a
# line of its own, and the relay says it set them as one block (the way that spares nats.c's
# per-header hash; src/sink/nats_headers.h). A block nats.c had rewritten, a header lost or
# doubled, or the one-by-one fallback fails the test.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"
pb_init

N=3
cat >"$PB_TMP/raw_sub.py" <<'PY'
# raw_sub.py URL SUBJECT EXPECT OUT: core NATS subscription; prints "ready" once subscribed, then
# writes the header block of EXPECT messages to OUT as JSON strings, one a line; exit 1 on timeout
import json, socket, sys, time
url, subject, expect, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host, port = url.split("://", 1)[-1].split("@")[-1].split(",")[0].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=60)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB ' + subject.encode()
          + b" 1\r\nPING\r\n")
while not f.readline().startswith(b"PONG"):
    pass
print("ready", flush=True)
blocks, deadline = [], time.time() + 60
while len(blocks) < expect and time.time() < deadline:
    line = f.readline()
    if not line:
        sys.exit("nats closed the connection")
    parts = line.split()
    if parts[0] == b"PING":
        s.sendall(b"PONG\r\n")
    elif parts[0] == b"HMSG":
        hlen, tlen = int(parts[-2]), int(parts[-1])
        blocks.append(f.read(tlen + 2)[:hlen].decode("latin-1"))
    elif parts[0] == b"MSG":
        f.read(int(parts[-1]) + 2)
        blocks.append("")
with open(out, "w") as o:
    for b in blocks:
        o.write(json.dumps(b) + "\n")
sys.exit(0 if len(blocks) == expect else 1)
PY
python3 "$PB_TMP/raw_sub.py" "$POSTBOX_NATS_URL" "${POSTBOX_NATS_SUBJECT_PREFIX}>" "$N" \
    "$PB_TMP/blocks" >"$PB_TMP/sub.out" 2>&1 &
SUB_PID=$!
wait_until "grep -q ready $PB_TMP/sub.out" 10 || fail "the raw subscriber did not subscribe: $(cat "$PB_TMP/sub.out")"

TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TS=congo=t61rcWkgMzE,rojo=00f067aa0ba902b7
say "$N traced events with headers of their own (a string, a number, a string with a line break)"
PGOPTIONS="-c postbox.traceparent=$TP -c postbox.tracestate=$TS" psql_q "
    SELECT count(postbox.enqueue('order', 'o-' || i, 'order.paid.v1', jsonb_build_object('i', i),
                                 jsonb_build_object('tenant', 'acme', 'n', 5, 'note', E'a\nb')))
    FROM generate_series(1, $N) i" >/dev/null
relay_drain 60 --set nats.cloudevents=binary
grep -q 'sink.nats: connected to nats .*headers as one block' "$PB_RELAY_LOG" ||
    fail "the relay did not set the headers as one block: $(grep 'connected to nats' "$PB_RELAY_LOG")"
wait "$SUB_PID" || fail "the raw subscriber got $(wc -l <"$PB_TMP/blocks" 2>/dev/null || echo 0) of $N messages: $(cat "$PB_TMP/sub.out")"

ids=$(psql_q "SELECT event_id FROM postbox.outbox_published ORDER BY event_id" | tr '\n' ' ')
python3 - "$PB_TMP/blocks" "$ids" "$TP" "$TS" <<'PY' || fail "header blocks on the wire are not as expected"
import json, re, sys
blocks = [json.loads(l) for l in open(sys.argv[1])]
ids, tp, ts = sorted(sys.argv[2].split()), sys.argv[3], sys.argv[4]
keys = {"Nats-Msg-Id", "event_type", "aggregate_type", "aggregate_id", "aggregate_sequence",
        "created_at", "ce-specversion", "ce-id", "ce-source", "ce-type", "ce-subject", "ce-time",
        "ce-datacontenttype", "ce-traceparent", "ce-tracestate", "ce-aggregatesequence",
        "traceparent", "tracestate", "tenant", "n", "note"}
fixed = {"event_type": "order.paid.v1", "aggregate_type": "order", "ce-specversion": "1.0",
         "ce-type": "order.paid.v1", "traceparent": tp, "tracestate": ts, "ce-traceparent": tp,
         "tenant": "acme", "n": "5", "note": '"a\\nb"'}
bad, seen = [], []
for b in blocks:
    if not (b.startswith("NATS/1.0\r\n") and b.endswith("\r\n\r\n")):
        bad.append("block framing: %r" % b[:40]); continue
    h = {}
    for line in b[len("NATS/1.0\r\n"):-4].split("\r\n"):
        m = re.fullmatch(r"([!-9;-~]+): (.*)", line)
        if not m or "\r" in m.group(2) or "\n" in m.group(2):
            bad.append("line %r" % line); continue
        if m.group(1) in h:
            bad.append("header %s twice" % m.group(1))
        h[m.group(1)] = m.group(2)
    if set(h) != keys:
        bad.append("keys: missing %s, extra %s" % (sorted(keys - set(h)), sorted(set(h) - keys)))
    bad += ["%s: %r, expected %r" % (k, h.get(k), v) for k, v in fixed.items() if h.get(k) != v]
    if h.get("ce-id") != h.get("Nats-Msg-Id") or h.get("ce-aggregatesequence") != h.get("aggregate_sequence"):
        bad.append("ce-id/ce-aggregatesequence differ from Nats-Msg-Id/aggregate_sequence")
    seen.append(h.get("Nats-Msg-Id"))
if sorted(seen) != ids:
    bad.append("Nats-Msg-Id %s, expected the event ids %s" % (sorted(seen), ids))
for x in bad:
    print(x, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
say "PASS"
