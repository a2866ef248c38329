# The broker side of a relay benchmark, sourced by bench scripts (after backlog.sh, which gives
# backlog_empty). The script sets BIN, AMQP_TOOL, NATS_TOOL, QUEUE (RabbitMQ), STREAM (Redis),
# POSTBOX_NATS_STREAM and, for Kafka, KAFKA_TOOL and a kafka_topic function naming the run's topic.
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
