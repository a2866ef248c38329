#!/usr/bin/env bash
# W3C trace context (sql/013): a producer's `SET LOCAL postbox.traceparent` / `tracestate` travel
# with its events and arrive as native headers on all four brokers, read by clients that are not
# postbox's: python3-pika (RabbitMQ), kcat (Kafka), redis-cli (Redis Streams: fields of their
# own) and nats-tool (a plain nats.c client); in cdc, postbox.emit takes it as well. An event's
# own traceparent header wins over the session's; a malformed session value is ignored.
# postbox consume hands it to the handler ($2).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
source "$(dirname "$0")/redis_lib.sh"
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps)"
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
pb_init
setup_queue '#'

TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TS=congo=t61rcWkgMzE
OWN=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
enqueue_traced() { # AGGREGATE_ID: one event in a transaction that runs in trace TP
    psql_q "BEGIN;
            SET LOCAL postbox.traceparent = '$TP';
            SET LOCAL postbox.tracestate = '$TS';
            SELECT postbox.enqueue('order', '$1', 'traced.v1', '{}');
            COMMIT;" >/dev/null
}

say "captured with the event; its own header wins; a malformed value is ignored"
enqueue_traced t-1
psql_q "BEGIN; SET LOCAL postbox.traceparent = '$TP';
        SELECT postbox.enqueue('order', 'own-1', 'traced.v1', '{}', '{\"traceparent\": \"$OWN\"}');
        SET LOCAL postbox.traceparent = 'not-a-traceparent';
        SELECT postbox.enqueue('order', 'bad-1', 'traced.v1', '{}');
        COMMIT;" >/dev/null
got=$(psql_q "SELECT aggregate_id || ' ' || coalesce(headers->>'traceparent', '-') || ' ' || coalesce(headers->>'tracestate', '-')
              FROM postbox.outbox ORDER BY id")
want="t-1 $TP $TS
own-1 $OWN -
bad-1 - -"
[[ $got == "$want" ]] || fail "outbox headers: '$got', expected '$want'"
psql_q "DELETE FROM postbox.outbox WHERE aggregate_id <> 't-1'" >/dev/null

say "RabbitMQ, read by python3-pika"
relay_drain 60 --set relay.sink=amqp
got=$(/usr/bin/python3 - "$POSTBOX_AMQP_URL" "$PB_QUEUE" <<'PY'
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
method, props, body = ch.basic_get(sys.argv[2], auto_ack=True)
h = props.headers or {}
print(h.get('traceparent'), h.get('tracestate'))
conn.close()
PY
)
[[ $got == "$TP $TS" ]] || fail "pika read '$got'"

say "Kafka, read by kcat"
enqueue_traced t-2
relay_drain 60 --set relay.sink=kafka
got=$(kcat -C -b "$POSTBOX_KAFKA_BROKERS" -t "$(kafka_topic order)" -o beginning -e -q -f '%h\n')
[[ $got == *"traceparent=$TP"* && $got == *"tracestate=$TS"* ]] || fail "kcat read headers '$got'"

say "NATS JetStream, read by nats-tool"
enqueue_traced t-3
relay_drain 60 --set relay.sink=nats
got=$(nats_tool drain "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" ">" --expect 1 --idle-ms 500 \
    --timeout-s 30 --header traceparent | cut -f7)
[[ $got == "$TP" ]] || fail "nats-tool read '$got'"

say "Redis Streams, read by redis-cli"
enqueue_traced t-4
relay_drain 60 --set relay.sink=redis --set redis.max_age=1d
got=$(redis_cli --raw XRANGE "pb:$PB_TEST:order" - + | awk 'k == "traceparent" || k == "tracestate" { printf "%s ", $0 } { k = $0 }')
[[ $got == "$TP $TS " ]] || fail "redis-cli read '$got'"

say "cdc: postbox.emit takes it too (Kafka, read by kcat)"
cdc_use_slot
cdc_create_slot --set relay.sink=kafka
psql_q "BEGIN;
        SET LOCAL postbox.traceparent = '$TP';
        SELECT postbox.emit('cdcorder', 'e-1', 'traced.v1', '{}');
        COMMIT;" >/dev/null
relay_drain 60 --set relay.sink=kafka --capture cdc
got=$(kcat -C -b "$POSTBOX_KAFKA_BROKERS" -t "$(kafka_topic cdcorder)" -o beginning -e -q -f '%h\n')
[[ $got == *"traceparent=$TP"* ]] || fail "cdc: kcat read headers '$got'"

say "postbox consume hands it to the handler"
psql_q "CREATE TABLE traces (agg text, traceparent text)" >/dev/null
enqueue_traced t-5
relay_drain 60 --set relay.sink=amqp
out=$(POSTBOX_CONSUME_SOURCE=amqp POSTBOX_CONSUME_HANDLER="INSERT INTO traces VALUES (\$1::jsonb->>'x', \$2::jsonb->>'traceparent')" \
      timeout 30 "$POSTBOX_BIN" consume --drain 2>&1) || fail "consume --drain failed: $out"
[[ $(psql_q "SELECT traceparent FROM traces") == "$TP" ]] || fail "the handler saw '$(psql_q "SELECT traceparent FROM traces")'"
say "PASS"
