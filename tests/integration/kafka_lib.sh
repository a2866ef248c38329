# Kafka helpers for tests/integration/kafka_*.sh; sourced after lib.sh:
#   source "$(dirname "$0")/lib.sh"; source "$(dirname "$0")/kafka_lib.sh"
#
# Environment: POSTBOX_KAFKA_TOOL (tests/tools/kafka_tool.c, built as kafka-tool: a plain
# librdkafka client, no postbox code); POSTBOX_KAFKA_BROKERS and POSTBOX_KAFKA_CONTROL come from
# `scripts/services env` (lib.sh) while the mock cluster runs. The mock never deletes a topic, so
# every run of a test gets topics of its own: pb.<test>.<run>.<aggregate_type>
# (POSTBOX_KAFKA_TOPIC), and relay.sink = kafka.
: "${POSTBOX_KAFKA_TOOL:?POSTBOX_KAFKA_TOOL must name the kafka-tool binary}"
for _v in $(compgen -v POSTBOX_KAFKA_ || true); do
    case $_v in POSTBOX_KAFKA_TOOL | POSTBOX_KAFKA_MOCK_BIN | POSTBOX_KAFKA_BROKERS | POSTBOX_KAFKA_CONTROL) ;; *) unset "$_v" ;; esac
done
unset _v
[[ -n ${POSTBOX_KAFKA_BROKERS:-} ]] ||
    fail "the kafka mock cluster is not running (scripts/services start kafka)"
export POSTBOX_RELAY_SINK=kafka
PB_KAFKA_RUN=$(date +%s)$$
export POSTBOX_KAFKA_TOPIC="pb.$PB_TEST.$PB_KAFKA_RUN.{aggregate_type}"

kafka_tool() { "$POSTBOX_KAFKA_TOOL" "$@"; }

kafka_topic() { # AGGREGATE_TYPE: this run's topic of that aggregate type
    printf 'pb.%s.%s.%s' "$PB_TEST" "$PB_KAFKA_RUN" "$1"
}

# drain_topic FILE TOPIC EXPECT [IDLE_MS] [TIMEOUT_S]: every message of TOPIC into FILE, read by
# kafka-tool (lines as amqp-tool drain prints them, so check_order and check_all_arrived apply).
drain_topic() {
    local file=$1 topic=$2 expect=$3 idle=${4:-2000} timeout=${5:-300}
    kafka_tool drain "$POSTBOX_KAFKA_BROKERS" "$topic" --expect "$expect" --idle-ms "$idle" \
        --timeout-s "$timeout" >"$file" ||
        fail "draining topic $topic: only $(wc -l <"$file") of $expect message(s)"
}

# kafka_control COMMAND...: a command for the mock cluster (tools/kafka-mock.c), e.g.
# kafka_control produce-errors 20 NOT_ENOUGH_REPLICAS
kafka_control() {
    [[ -p ${POSTBOX_KAFKA_CONTROL:-} ]] || fail "no control pipe of the kafka mock cluster"
    printf '%s\n' "$*" >"$POSTBOX_KAFKA_CONTROL"
}

# ---- a mock cluster of three brokers of the test's own (tools/kafka-mock.c) --------------------
# (a test that injects errors: the shared cluster's errors go to whichever client asks first)
# kafka_cluster_start: a mock cluster of this test's own; POSTBOX_KAFKA_BROKERS and
# POSTBOX_KAFKA_CONTROL (kafka_control) name it from then on.
kafka_cluster_start() {
    : "${POSTBOX_KAFKA_MOCK_BIN:?POSTBOX_KAFKA_MOCK_BIN must name the kafka-mock binary}"
    local d=$PB_TMP/kafka
    mkdir -p "$d"
    "$POSTBOX_KAFKA_MOCK_BIN" --brokers 3 --bootstrap-file "$d/brokers" --control "$d/control" \
        >"$d/stdout.log" 2>"$d/kafka.log" </dev/null &
    KAFKA_MOCK_PID=$!
    PB_PIDS+=("$KAFKA_MOCK_PID")
    wait_until '[[ -s $d/brokers ]] || ! pid_alive "$KAFKA_MOCK_PID"' 20 && [[ -s $d/brokers ]] ||
        fail "the kafka mock cluster did not start: $(tail -n 5 "$d/kafka.log")"
    export POSTBOX_KAFKA_BROKERS=$(<"$d/brokers") POSTBOX_KAFKA_CONTROL=$d/control
    say "Kafka mock cluster of 3 brokers at $POSTBOX_KAFKA_BROKERS"
}
