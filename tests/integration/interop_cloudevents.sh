#!/usr/bin/env bash
# CloudEvents binary content mode (<sink>.cloudevents = binary), read back by clients that are not
# postbox's: python3-pika (RabbitMQ), kcat (Kafka), nats-tool (a plain nats.c client) and
# redis-cli (Redis Streams), in poll and in cdc capture. Every attribute is compared with the
# outbox row it came from: specversion, id = event_id, source (the default /postbox/<database>
# in poll, relay.cloudevents_source in cdc), type = event_type, subject =
# aggregate_type/aggregate_id, time = created_at (RFC 3339, microseconds), datacontenttype (AMQP's
# content_type property, Kafka's content-type header), traceparent/tracestate of a traced event
# (absent on an untraced one), aggregatesequence; NATS values percent-encoded as its binding asks;
# on Redis, postbox's mapping (ce_ fields beside the entry's own, each attribute once).
# postbox's own headers stay; an event's own header with an attribute's name is left out, other
# ce_ headers pass. With the option off no attribute is sent, and a source that is no
# URI-reference stops the relay as a configuration error.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
source "$(dirname "$0")/redis_lib.sh"
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps)"
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_REDIS_MAX_AGE=1d
pb_init
setup_queue '#'

TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TS=congo=t61rcWkgMzE
ATTRS=(specversion id source type subject time datacontenttype traceparent tracestate aggregatesequence)

enqueue_pair() { # AGGREGATE_TYPE AGGREGATE_ID: two events of one aggregate, the second traced
    psql_q "SELECT postbox.enqueue('$1', '$2', 'order.placed.v1', '{\"n\": 1}');
            BEGIN;
            SET LOCAL postbox.traceparent = '$TP';
            SET LOCAL postbox.tracestate = '$TS';
            SELECT postbox.enqueue('$1', '$2', 'order.paid.v1', '{\"n\": 2}');
            COMMIT;" >/dev/null
}

# expected AGGREGATE_TYPE AGGREGATE_ID SOURCE: the attributes of the aggregate's events, one line
# each in the order of ATTRS, '|' between them, from the outbox rows
expected() {
    psql_q "SELECT concat_ws('|', '1.0', event_id, '$3', event_type, aggregate_type || '/' || aggregate_id,
                             to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                             'application/json', coalesce(headers->>'traceparent', ''),
                             coalesce(headers->>'tracestate', ''), sequence)
            FROM postbox.outbox_all WHERE aggregate_type = '$1' AND aggregate_id = '$2' ORDER BY sequence"
}

# nats_encoded: stdin's fields type, subject, tracestate percent-encoded as the NATS binding asks
nats_encoded() {
    /usr/bin/python3 -c '
import sys
def enc(s):
    return "".join(chr(b) if 0x21 <= b <= 0x7e and b not in b"\"%" else "%%%02X" % b for b in s.encode())
for line in sys.stdin.read().splitlines():
    f = line.split("|")
    for i in (3, 4, 8):
        f[i] = enc(f[i])
    print("|".join(f))'
}

check() { # WHAT GOT WANT
    [[ $2 == "$3" ]] || fail "$1: read
$2
expected
$3"
    say "$1: every attribute as expected, e.g. ${2##*$'\n'}"
}

read_amqp() { # PREFIX: the queue's messages as lines of attributes (content_type for datacontenttype)
    /usr/bin/python3 - "$POSTBOX_AMQP_URL" "$PB_QUEUE" "$1" "${ATTRS[@]}" <<'PY'
import sys, pika
url, queue, prefix, attrs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
while True:
    method, props, body = ch.basic_get(queue, auto_ack=True)
    if method is None:
        break
    h = props.headers or {}
    if not any(k.startswith(prefix) for k in h):
        print("no cloudevents headers")
        continue
    def text(v):
        return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))
    vals = [props.content_type if a == "datacontenttype" else text(h.get(prefix + a)) for a in attrs]
    if prefix + "datacontenttype" in h:
        vals.append("datacontenttype sent as a header too")
    # postbox's own headers stay beside the attributes
    if text(h.get("aggregate_sequence")) != vals[-1] or props.message_id != vals[1]:
        vals.append("postbox's headers missing")
    if vals[7] and text(h.get("traceparent")) != vals[7]:
        vals.append("native traceparent header missing")
    print("|".join(vals))
conn.close()
PY
}

read_kafka() { # TOPIC: its records' ce_ headers (content-type for datacontenttype)
    kcat -C -b "$POSTBOX_KAFKA_BROKERS" -t "$1" -o beginning -e -q -f '%h\n' |
        awk -v attrs="${ATTRS[*]}" '
            { n = split($0, kv, ","); delete h
              for (i = 1; i <= n; i++) { p = index(kv[i], "="); h[substr(kv[i], 1, p - 1)] = substr(kv[i], p + 1) }
              m = split(attrs, a, " "); line = ""
              for (i = 1; i <= m; i++) {
                  k = a[i] == "datacontenttype" ? "content-type" : "ce_" a[i]
                  line = line (i > 1 ? "|" : "") h[k]
              }
              if (h["event_id"] != h["ce_id"] || h["aggregate_sequence"] != h["ce_aggregatesequence"]) line = line "|postbox headers missing"
              print line }'
}

read_nats() { # SUBJECT_FILTER EXPECT: the stream's messages' ce- headers
    local args=() a
    for a in "${ATTRS[@]}"; do args+=(--header "ce-$a"); done
    nats_tool drain "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$1" --expect "$2" --idle-ms 500 \
        --timeout-s 30 "${args[@]}" --header Nats-Msg-Id --header aggregate_sequence |
        awk -F'\t' '{ line = $7; for (i = 8; i <= 16; i++) line = line "|" $i
                      if ($17 != $8 || $18 != $16) line = line "|postbox headers missing"
                      print line }'
}

# the attributes of a Redis entry by postbox's mapping: ce_ fields for what its own fields do not hold
declare -A REDIS_FIELD=([specversion]=ce_specversion [id]=event_id [source]=ce_source [type]=event_type
    [subject]=ce_subject [time]=created_at [datacontenttype]=ce_datacontenttype [traceparent]=traceparent
    [tracestate]=tracestate [aggregatesequence]=aggregate_sequence)
read_redis() { # STREAM: its entries' attributes
    local fields=() a
    for a in "${ATTRS[@]}"; do fields+=("${REDIS_FIELD[$a]}"); done
    redis_cli --raw XRANGE "$1" - + | awk -v fields="${fields[*]}" '
        function flush(   m, a, i, line) {
            if (!started) return
            m = split(fields, a, " "); line = ""
            for (i = 1; i <= m; i++) line = line (i > 1 ? "|" : "") f[a[i]]
            if ("ce_id" in f || "ce_type" in f || "ce_time" in f) line = line "|an attribute written twice"
            print line; delete f
        }
        state != "value" && /^[0-9]+-[0-9]+$/ { flush(); started = 1; state = "field"; next }
        state == "field" { key = $0; state = "value"; next }
        state == "value" { f[key] = $0; state = "field" }
        END { flush() }'
}

say "off (the default): no attribute is sent"
enqueue_pair order off-1
relay_drain 60 --set relay.sink=amqp
got=$(read_amqp cloudEvents_)
[[ $got == $'no cloudevents headers\nno cloudevents headers' ]] || fail "cloudevents off, yet pika read: $got"

export POSTBOX_AMQP_CLOUDEVENTS=binary POSTBOX_KAFKA_CLOUDEVENTS=binary \
    POSTBOX_NATS_CLOUDEVENTS=binary POSTBOX_REDIS_CLOUDEVENTS=binary
SRC=/postbox/$PB_DB # the default source: the database of postgres.dsn

say "poll: RabbitMQ, read by python3-pika (prefix cloudEvents_)"
enqueue_pair order 'amqp é 1'
relay_drain 60 --set relay.sink=amqp
check "poll amqp" "$(read_amqp cloudEvents_)" "$(expected order 'amqp é 1' "$SRC")"

say "poll: Kafka, read by kcat"
enqueue_pair order 'kafka é 1'
relay_drain 60 --set relay.sink=kafka
check "poll kafka" "$(read_kafka "$(kafka_topic order)")" "$(expected order 'kafka é 1' "$SRC")"

say "an event's own header with an attribute's name is left out; another ce_ header passes (Kafka)"
psql_q "SELECT postbox.enqueue('forged', 'f-1', 'order.paid.v1', '{}',
                               '{\"ce_id\": \"forged\", \"content-type\": \"text/plain\", \"ce_partitionkey\": \"p1\"}')" >/dev/null
relay_drain 60 --set relay.sink=kafka
got=$(kcat -C -b "$POSTBOX_KAFKA_BROKERS" -t "$(kafka_topic forged)" -o beginning -e -q -f '%h\n' | tr ',' '\n')
id=$(psql_q "SELECT event_id FROM postbox.outbox_all WHERE aggregate_type = 'forged'")
[[ $(grep -c '^ce_id=' <<<"$got") == 1 && $got == *"ce_id=$id"* && $(grep -c '^content-type=' <<<"$got") == 1 &&
   $got == *"content-type=application/json"* && $got == *"ce_partitionkey=p1"* ]] ||
    fail "kcat read headers: $got"

say "poll: NATS JetStream, read by nats-tool"
enqueue_pair order 'nats é 1'
relay_drain 60 --set relay.sink=nats
check "poll nats" "$(read_nats "${POSTBOX_NATS_SUBJECT_PREFIX}order.>" 2)" \
    "$(expected order 'nats é 1' "$SRC" | nats_encoded)"

say "poll: Redis Streams, read by redis-cli"
enqueue_pair order 'redis é 1'
relay_drain 60 --set relay.sink=redis
check "poll redis" "$(read_redis "pb:$PB_TEST:order")" "$(expected order 'redis é 1' "$SRC")"

say "cdc, with relay.cloudevents_source set (and RabbitMQ's ce- prefix)"
export POSTBOX_RELAY_CLOUDEVENTS_SOURCE=urn:example:shop
cdc_use_slot
cdc_create_slot --set relay.sink=kafka
enqueue_pair cdcorder 'amqp 2'
relay_drain 60 --set relay.sink=amqp --set amqp.cloudevents_prefix=ce- --capture cdc
check "cdc amqp" "$(read_amqp ce-)" "$(expected cdcorder 'amqp 2' urn:example:shop)"
enqueue_pair cdcorder 'kafka 2'
relay_drain 60 --set relay.sink=kafka --capture cdc
check "cdc kafka" "$(read_kafka "$(kafka_topic cdcorder)")" "$(expected cdcorder 'kafka 2' urn:example:shop)"
enqueue_pair cdcorder 'nats 2'
relay_drain 60 --set relay.sink=nats --capture cdc
check "cdc nats" "$(read_nats "${POSTBOX_NATS_SUBJECT_PREFIX}cdcorder.>" 2)" \
    "$(expected cdcorder 'nats 2' urn:example:shop | nats_encoded)"
enqueue_pair cdcorder 'redis 2'
relay_drain 60 --set relay.sink=redis --capture cdc
check "cdc redis" "$(read_redis "pb:$PB_TEST:cdcorder")" "$(expected cdcorder 'redis 2' urn:example:shop)"

say "a source that is no URI-reference is a configuration error (exit 2)"
rc=0
out=$(timeout 30 "$POSTBOX_BIN" --set 'relay.cloudevents_source=my shop' relay --drain 2>&1) || rc=$?
((rc == 2)) || fail "relay with a bad source exited $rc, expected 2: $out"
[[ $out == *'relay.cloudevents_source "my shop" is not a URI-reference (RFC 3986)'* ]] ||
    fail "the error does not name the bad source: $out"
say "PASS"
