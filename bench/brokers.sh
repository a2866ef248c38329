# shellcheck shell=bash
# The broker side of a relay benchmark, sourced by bench scripts (after backlog.sh, which gives
# backlog_empty). The script sets BIN, AMQP_TOOL, NATS_TOOL, QUEUE (RabbitMQ), STREAM (Redis),
# POSTBOX_NATS_STREAM and, for Kafka, KAFKA_TOOL and a kafka_topic function naming the run's topic.
# redis_raw_xadd needs none of them.
rcli() { redis-cli -h 127.0.0.1 -p "$POSTBOX_REDIS_PORT" "$@"; }

# fresh_target BROKER: the broker's objects, empty, made outside the timed run
fresh_target() {
    case $1 in
    amqp) "$AMQP_TOOL" setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$QUEUE" '#' >/dev/null ;;
    nats)
        "$NATS_TOOL" delete-stream "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" >/dev/null 2>&1 || true
        backlog_empty
        "$BIN" --set relay.sink=nats relay --drain 2>"$TMP/create.log" || { cat "$TMP/create.log" >&2; exit 1; } ;;
    kafka) TOPIC_N=$((TOPIC_N + 1)) ;;
    redis) rcli DEL "$STREAM" >/dev/null ;;
    esac
}

# delivered BROKER: the messages the run left in the broker
delivered() {
    case $1 in
    amqp) "$AMQP_TOOL" count "$POSTBOX_AMQP_URL" "$QUEUE" ;;
    nats) "$NATS_TOOL" count "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" ;;
    kafka) "$KAFKA_TOOL" count "$POSTBOX_KAFKA_BROKERS" "$(kafka_topic)" ;;
    redis) rcli XLEN "$STREAM" ;;
    esac
}

# redis_raw_xadd STREAM N SIZE PIPELINE: the raw Redis publisher of the relay benchmarks, on an
# emptied STREAM: redis-benchmark, one connection, PIPELINE commands in flight, N times
# XADD STREAM MINID ~ 0 * with the redis sink's fields and a payload of SIZE bytes; prints XADDs/s
redis_raw_xadd() {
    local out payload
    payload="{\"pad\": \"$(printf "%$(($3 - 11))s" "" | tr ' ' x)\"}"
    rcli DEL "$1" >/dev/null
    out=$(redis-benchmark -h 127.0.0.1 -p "$POSTBOX_REDIS_PORT" -c 1 -P "$4" -n "$2" --csv \
        XADD "$1" MINID '~' 0 '*' event_id 00000000-0000-0000-0000-000000000000 \
        event_type bench.event.v1 aggregate_type bench aggregate_id agg-1 payload "$payload" \
        headers '{}' created_at 2026-12-01T00:00:00.000000Z 2>/dev/null | tail -n 1)
    [[ $(rcli XLEN "$1") == "$2" ]] || { echo "bench: the raw XADD publisher did not add $2 entries to $1" >&2; exit 1; }
    awk -F'","' '{ printf "%.0f\n", $(NF - 6) }' <<<"$out"
}
