#!/usr/bin/env bash
# Produce errors injected by the mock cluster: a burst of produce requests refused with
# NOT_ENOUGH_REPLICAS (retriable) is retried by the idempotent producer until it succeeds; the
# retries are visible in the relay's log and in /metrics, every event arrives once per
# aggregate, in order, and none is dead-lettered. Then the same with NOT_LEADER_FOR_PARTITION
# (the producer refreshes its metadata and sends again).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

# a mock cluster of our own: injected errors go to the next produce requests of any client of
# the cluster, so on the shared one the other tests running beside would take them
kafka_cluster_start
pb_init
N_AGG=20 PER_AGG=25
total=$((N_AGG * PER_AGG))
METRICS_PORT=$(free_port)

run_round() { # NAME CONTROL...: inject, enqueue, relay until drained; checks what arrived
    local name=$1 topic got
    shift
    export POSTBOX_KAFKA_TOPIC="pb.$PB_TEST.$PB_KAFKA_RUN.$name.{aggregate_type}"
    topic="pb.$PB_TEST.$PB_KAFKA_RUN.$name.order"
    psql_q "TRUNCATE postbox.outbox_published" >/dev/null
    enqueue_seq $N_AGG 1 $PER_AGG
    kafka_control "$@"
    : >"$PB_RELAY_LOG"
    start_relay --set kafka.statistics.interval.ms=200 --set metrics.listen=127.0.0.1:$METRICS_PORT \
        --set relay.batch_size=50
    wait_until '(( $(pending_count) == 0 ))' 90 || fail "($name) $(pending_count) events still pending after 90 s"
    # the statistics of the last requests come within statistics.interval.ms
    wait_until 'grep -q "librdkafka retried" "$PB_RELAY_LOG"' 10 ||
        fail "($name) the relay's log does not show librdkafka's retries"
    curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" >"$PB_TMP/$name.metrics" || fail "($name) /metrics failed"
    stop_relay
    ((RELAY_RC == 0)) || fail "($name) the relay exited with $RELAY_RC"
    ((0 == $(dead_count))) || fail "($name) $(dead_count) events dead-lettered: $(psql_q 'SELECT reason FROM postbox.dead_letters LIMIT 3')"
    got=$PB_TMP/$name.got
    drain_topic "$got" "$topic" $total 1500 60
    stats=$(check_order "$got") || fail "($name) order broken: $stats"
    (($(wc -l <"$got") == total)) || fail "($name) $(wc -l <"$got") messages in the topic for $total events (duplicates from retries?)"
    retries=$(awk '/^postbox_broker_retries_total\{broker="kafka"\}/ { print $2 }' "$PB_TMP/$name.metrics")
    say "($name) $stats; $(grep 'librdkafka retried' "$PB_RELAY_LOG" | head -1 | sed 's/.*sink.kafka: //'); postbox_broker_retries_total ${retries:-none}"
    [[ -n $retries ]] && awk -v r="$retries" 'BEGIN { exit !(r > 0) }' || fail "($name) /metrics shows no retries"
}

run_round replicas produce-errors 12 NOT_ENOUGH_REPLICAS
run_round leader produce-errors 12 NOT_LEADER_FOR_PARTITION
