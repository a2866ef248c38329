# shellcheck shell=bash
# The Kafka cluster of a benchmark: librdkafka's mock cluster, one of the benchmark's own or the
# running one of scripts/services, and topics sized so that the mock keeps all of a run's
# messages. Sourced by bench/relay-kafka and bench/relay-cdc; not a script of its own (see
# bench/README.md, relay-kafka).
#
#   BENCH_KAFKA          own: a mock of its own (3 brokers), started from POSTBOX_KAFKA_MOCK and
#                        stopped at the end (its memory goes with it); services: the running mock
#                        of scripts/services [own]
#   BENCH_KAFKA_NODELAY  on: the own mock's brokers answer without Nagle's delay, as Kafka's
#                        brokers do (kafka-mock --nodelay on); off: the mock as the tests run it [on]
#
#   kafka_check NAME            validates the two settings above
#   kafka_start NAME MOCK       the cluster: exports POSTBOX_KAFKA_BROKERS, sets KAFKA_CONTROL and
#                               KAFKA_MOCK_LOG (own: starts MOCK, its pid in KAFKA_MOCK_PID)
#   kafka_stop                  stops an own mock (for the caller's EXIT trap)
#   kafka_describe MOCK         one line: which cluster
#   kafka_partitions NAME N SIZE  the fewest partitions keeping N messages of SIZE under 4 MiB each
#   kafka_make_topic NAME TOPIC PARTITIONS   creates TOPIC through the mock's control pipe
# The including script defines $TMP (a scratch directory).

KAFKA=${BENCH_KAFKA:-own}
KAFKA_NODELAY=${BENCH_KAFKA_NODELAY:-on}
KAFKA_MOCK_PID=
KAFKA_CONTROL=
KAFKA_MOCK_LOG=

kafka_check() { # NAME
    [[ $KAFKA == own || $KAFKA == services ]] || { echo "$1: BENCH_KAFKA must be own or services: '$KAFKA'" >&2; exit 2; }
    [[ $KAFKA_NODELAY == on || $KAFKA_NODELAY == off ]] || { echo "$1: BENCH_KAFKA_NODELAY must be on or off: '$KAFKA_NODELAY'" >&2; exit 2; }
}

kafka_start() { # NAME MOCK
    local i args
    if [[ $KAFKA == services ]]; then
        [[ -n ${POSTBOX_KAFKA_BROKERS:-} ]] || { echo "$1: the kafka mock cluster is not running; run scripts/services start kafka (or BENCH_KAFKA=own)" >&2; exit 1; }
        KAFKA_CONTROL=${POSTBOX_KAFKA_CONTROL:?}
        KAFKA_MOCK_LOG=$POSTBOX_SERVICES_DIR/kafka/kafka.log
        return 0
    fi
    args=(--brokers 3 --bootstrap-file "$TMP/kafka.brokers" --control "$TMP/kafka.control")
    [[ $KAFKA_NODELAY == off ]] || args+=(--nodelay on)
    "$2" "${args[@]}" >/dev/null 2>"$TMP/kafka.log" </dev/null &
    KAFKA_MOCK_PID=$!
    for ((i = 0; i < 100; i++)); do
        [[ -s $TMP/kafka.brokers ]] && break
        kill -0 "$KAFKA_MOCK_PID" 2>/dev/null || { echo "$1: $2 exited:" >&2; cat "$TMP/kafka.log" >&2; exit 1; }
        sleep 0.1
    done
    [[ -s $TMP/kafka.brokers ]] || { echo "$1: $2 wrote no bootstrap list within 10 s" >&2; exit 1; }
    POSTBOX_KAFKA_BROKERS=$(<"$TMP/kafka.brokers")
    export POSTBOX_KAFKA_BROKERS
    KAFKA_CONTROL=$TMP/kafka.control
    KAFKA_MOCK_LOG=$TMP/kafka.log
}

kafka_stop() {
    if [[ -n $KAFKA_MOCK_PID ]] && kill -0 "$KAFKA_MOCK_PID" 2>/dev/null; then
        kill -TERM "$KAFKA_MOCK_PID" 2>/dev/null || true
        wait "$KAFKA_MOCK_PID" 2>/dev/null || true
    fi
    KAFKA_MOCK_PID=
}

kafka_describe() { # MOCK
    if [[ $KAFKA == own ]]; then echo "own: $1, nodelay $KAFKA_NODELAY"; else echo "the one of scripts/services"; fi
}

# The mock keeps at most 5 MiB of each partition (it drops a partition's oldest message sets past
# that): the relay and the raw producer key by agg-0..agg-99 (N/100 messages each), librdkafka's
# default partitioner puts a key in partition crc32(key) % partitions; a message takes about
# SIZE + 150 bytes in the log (headers, record overhead), counted as SIZE + 200, and a partition
# may fill to 4 MiB.
kafka_partitions() { # NAME N SIZE
    python3 - "$@" <<'PY'
import sys, zlib
name, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_key = -(-n // 100) * (size + 200)
for parts in range(4, 1001):
    load = [0] * parts
    for k in range(100):
        load[zlib.crc32(b"agg-%d" % k) % parts] += per_key
    if max(load) <= 4 * 1024 * 1024:
        print(parts)
        sys.exit(0)
sys.exit("%s: %d events of %d bytes do not fit the mock's 5 MiB per partition even "
         "with one key per partition (%d bytes per key)" % (name, n, size, per_key))
PY
}

# Creates TOPIC with PARTITIONS partitions of 3 replicas through the mock's control pipe and waits
# for the mock's answer in its log.
kafka_make_topic() { # NAME TOPIC PARTITIONS
    local i
    printf 'topic-create %s %d 3\n' "$2" "$3" >"$KAFKA_CONTROL"
    for ((i = 0; i < 100; i++)); do
        if grep -q "topic-create $2, " "$KAFKA_MOCK_LOG" 2>/dev/null; then
            grep -q "topic-create $2, .*: Success" "$KAFKA_MOCK_LOG" ||
                { echo "$1: the mock did not create topic $2: $(grep "topic-create $2, " "$KAFKA_MOCK_LOG")" >&2; exit 1; }
            return 0
        fi
        sleep 0.05
    done
    echo "$1: no answer from the mock to topic-create $2 within 5 s (see $KAFKA_MOCK_LOG)" >&2
    exit 1
}
