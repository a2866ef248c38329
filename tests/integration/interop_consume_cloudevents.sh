#!/usr/bin/env bash
# postbox consume takes CloudEvents in binary content mode from producers that are not
# postbox's and send none of postbox's headers: python3-pika (RabbitMQ: cloudEvents_ headers and
# the older cloudEvents: ones), kcat (Kafka: ce_ headers), nats-tool (a plain nats.c client:
# ce- headers, percent-encoded) and redis-cli XADD (Redis: postbox's mapping, and ce_ fields).
# The message id is the ce id, the type the ce type, the trace context the traceparent
# attribute (the handler's postbox.traceparent); the attributes are in the handler's $2. The
# same ce id sent twice is handled once. postbox's own message id and type win over the
# attributes; an id that is not text has no id (inbox_dead); an oversize id is replaced by its
# digest and handled.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
source "$(dirname "$0")/redis_lib.sh"
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps)"
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
pb_init
setup_queue '#'

TP1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TP2=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
SRC=urn:example:shop
psql_q "CREATE TABLE got (via text, id text, type text, traceparent text, source text, body text)" >/dev/null
HANDLER="INSERT INTO got VALUES (\$3::jsonb->>'routing_key', \$3::jsonb->>'message_id', \$3::jsonb->>'type',
    coalesce(nullif(current_setting('postbox.traceparent', true), ''), '-'),
    coalesce(\$2::jsonb->>'cloudEvents_source', \$2::jsonb->>'cloudEvents:source', \$2::jsonb->>'ce_source',
             \$2::jsonb->>'ce-source', '-'),
    \$1::jsonb->>'n')"

consume_drain() { # [GLOBAL OPTIONS...]: postbox consume --drain with the recording handler
    local out
    out=$(POSTBOX_CONSUME_HANDLER=$HANDLER timeout 90 "$POSTBOX_BIN" "$@" consume --drain 2>&1) ||
        { printf '%s\n' "$out" | tail -n 20 >&2; fail "consume --drain failed"; }
    printf '%s\n' "$out" >>"$PB_TMP/consume.log"
}
check_got() { # VIA WANT: the handled messages of VIA, "id type traceparent source n" by n
    local got
    got=$(psql_q "SELECT id || ' ' || type || ' ' || traceparent || ' ' || source || ' ' || body FROM got WHERE via LIKE '$1' ORDER BY body")
    [[ $got == "$2" ]] || fail "$1: the handler got
$got
expected
$2"
}

say "RabbitMQ, published by python3-pika"
/usr/bin/python3 - "$POSTBOX_AMQP_URL" "$PB_QUEUE" "$TP1" "$SRC" <<'PY' || fail "pika publish failed"
import sys, pika
url, queue, tp, src = sys.argv[1:5]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
def send(n, headers, **props):
    ch.basic_publish('', queue, ('{"n": "%s"}' % n).encode(),
                     pika.BasicProperties(content_type='application/json', delivery_mode=2,
                                          headers=headers, **props))
ce = lambda p, i, t, **more: dict({p + 'specversion': '1.0', p + 'id': i, p + 'source': src,
                                   p + 'type': t}, **{p + k: v for k, v in more.items()})
send(1, ce('cloudEvents_', 'ce-a-1', 'com.example.order.created', traceparent=tp))
send(1, ce('cloudEvents_', 'ce-a-1', 'com.example.order.created', traceparent=tp))  # duplicate
send(2, ce('cloudEvents:', 'ce-a-2', 'com.example.order.paid'))
send(3, ce('cloudEvents_', 'ce-ignored', 'ce.type.ignored'), message_id='own-1', type='own.type.v1')
send(4, ce('cloudEvents_', b'\x80\xff', 'com.example.binary'))    # an id that is no text
send(5, ce('cloudEvents_', 'x' * 3000, 'com.example.big'))        # an id above the key size
conn.close()
PY
POSTBOX_CONSUME_SOURCE=amqp consume_drain
check_got "$PB_QUEUE" "ce-a-1 com.example.order.created $TP1 $SRC 1
ce-a-2 com.example.order.paid - $SRC 2
own-1 own.type.v1 - $SRC 3
sha256:$(psql_q "SELECT substr(id, 8) FROM got WHERE body = '5'") com.example.big - $SRC 5"
dead=$(psql_q "SELECT message_type || ' ' || error FROM postbox.inbox_dead")
[[ $dead == "com.example.binary message has no id"* ]] || fail "the message whose id is no text: inbox_dead holds '$dead'"
grep -q 'duplicate message ce-a-1' "$PB_TMP/consume.log" || fail "the duplicate ce id was not logged as a duplicate"
say "RabbitMQ: each ce id handled once, postbox's own id and type won, the binary id dead-lettered"

say "Kafka, produced by kcat"
TOPIC=$(kafka_topic ce)
kcat_ce() { # N ID TYPE [MORE kcat -H options...]
    local n=$1 id=$2 type=$3
    shift 3
    printf '{"n": "%s"}' "$n" | kcat -P -b "$POSTBOX_KAFKA_BROKERS" -t "$TOPIC" -k agg -H ce_specversion=1.0 \
        -H "ce_id=$id" -H "ce_source=$SRC" -H "ce_type=$type" -H content-type=application/json "$@" ||
        fail "kcat -P failed"
}
kcat_ce 1 ce-k-1 com.example.order.created -H "ce_traceparent=$TP1"
kcat_ce 1 ce-k-1 com.example.order.created -H "ce_traceparent=$TP1" # duplicate
kcat_ce 2 ce-k-2 com.example.order.paid -H "traceparent=$TP2" -H "ce_traceparent=$TP1" # the plain header wins
kcat_ce 3 ce-k-3 com.example.order.shipped -H "ce_traceparent=not-a-traceparent"
POSTBOX_CONSUME_SOURCE=kafka POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.ce \
    consume_drain --set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500
check_got "$TOPIC" "ce-k-1 com.example.order.created $TP1 $SRC 1
ce-k-2 com.example.order.paid $TP2 $SRC 2
ce-k-3 com.example.order.shipped - $SRC 3"
say "Kafka: each ce id handled once, the trace context from ce_traceparent (a plain traceparent header first)"

say "NATS JetStream, published by nats-tool (nats.c) with percent-encoded ce- headers"
relay_drain 60 --set relay.sink=nats # provisions the stream
SUBJECT=${POSTBOX_NATS_SUBJECT_PREFIX}ce
nats_ce() { # N ID TYPE [--header NAME=VALUE...]: no Nats-Msg-Id, no event_type: CloudEvents only
    local n=$1 id=$2 type=$3
    shift 3
    nats_tool publish "$POSTBOX_NATS_URL" "$SUBJECT" "" "" "{\"n\": \"$n\"}" 1 --header ce-specversion=1.0 \
        --header "ce-id=$id" --header "ce-source=$SRC" --header "ce-type=$type" "$@" >/dev/null ||
        fail "nats-tool publish failed"
}
nats_ce 1 'ce-n%2F1' com.example.order.created --header "ce-traceparent=$TP1"
nats_ce 1 'ce-n%2F1' com.example.order.created --header "ce-traceparent=$TP1" # duplicate
nats_ce 2 'ce-n%20caf%C3%A9' 'com.example.order%20paid'
POSTBOX_CONSUME_SOURCE=nats consume_drain
check_got "$SUBJECT" "ce-n/1 com.example.order.created $TP1 $SRC 1
ce-n café com.example.order paid - $SRC 2"
say "NATS: ids and types percent-decoded, each ce id handled once"

say "Redis Streams, added by redis-cli XADD"
STREAM=${POSTBOX_REDIS_STREAM_PREFIX}ce
xadd() { redis_cli XADD "$STREAM" '*' "$@" >/dev/null || fail "redis-cli XADD failed"; }
xadd ce_specversion 1.0 ce_id ce-r-1 ce_source "$SRC" ce_type com.example.order.created \
    ce_traceparent "$TP1" payload '{"n": "1"}'
xadd ce_specversion 1.0 ce_id ce-r-1 ce_source "$SRC" ce_type com.example.order.created \
    ce_traceparent "$TP1" payload '{"n": "1"}' # duplicate
xadd ce_specversion 1.0 event_id ce-r-2 ce_source "$SRC" event_type com.example.order.paid \
    traceparent "$TP2" payload '{"n": "2"}' # postbox's mapping
POSTBOX_CONSUME_SOURCE=redis POSTBOX_REDIS_STREAMS=$STREAM consume_drain
check_got "$STREAM" "ce-r-1 com.example.order.created $TP1 $SRC 1
ce-r-2 com.example.order.paid $TP2 $SRC 2"
say "Redis: ce_ fields and postbox's mapping, each id handled once"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 ]] || fail "inbox_dead: $(psql_q "SELECT message_type, error FROM postbox.inbox_dead")"
say "PASS"
