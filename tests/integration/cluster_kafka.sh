#!/usr/bin/env bash
# Issue 29: Kafka with a broker down. A mock cluster of this test's own (3 brokers,
# tools/kafka-mock.c) holds a topic of 6 partitions, 3 replicas each. A steady producer commits
# 300 transactions, one event of each of 40 aggregates each (12,000 events, numbered per
# aggregate), about 20 a second; they flow relay (poll capture, idempotent producer, acks=all)
# -> topic -> postbox consume (a consumer group). Mid-stream the broker leading partition 0,
# which is also the group's coordinator, goes down; a second later its partitions get new
# leaders and the group a new coordinator among the other two brokers, as a controller would
# do. Later it comes back and takes its partitions' leadership back. At the end: every event
# took effect exactly once, every aggregate in order, the topic holds each event once, the group
# has nothing left to read, and the relay and the consumer logged losing the broker. Reported:
# how long publishing stalled (the longest time the published count stood still while events
# were pending) after the broker went down and after it came back.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/cluster_lib.sh"

export POSTBOX_CONSUME_SOURCE=kafka POSTBOX_CONSUME_CONSUMER=ordered
export POSTBOX_RELAY_RECONNECT_CAP=1s POSTBOX_CONSUME_RECONNECT_CAP=1s
GROUP_OPTS=(--set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500)
N_AGG=40 N_TX=300
total=$((N_AGG * N_TX))
: >"$CONSUMER_LOG"

kafka_cluster_start
TOPIC=$(kafka_topic order)
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.ordered
kafka_control topic-create "$TOPIC" 6 3
leaders() { kafka_tool leaders "$POSTBOX_KAFKA_BROKERS" "$TOPIC"; }
leads_any() { awk -v b="$1" '$2 == b { f = 1 } END { exit !f }' "$2"; } # BROKER FILE
group_lag() { kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "$POSTBOX_KAFKA_GROUP" "$TOPIC" 2>/dev/null || echo -1; }
wait_until 'leaders >"$PB_TMP/leaders.0" 2>/dev/null' 20 || fail "the topic $TOPIC was not created"
(($(wc -l <"$PB_TMP/leaders.0") == 6)) || fail "the topic has not 6 partitions: $(cat "$PB_TMP/leaders.0")"
awk '{ n = split($3, r, ","); if (n != 3) exit 1 }' "$PB_TMP/leaders.0" || fail "a partition has not 3 replicas: $(tr '\n' ';' <"$PB_TMP/leaders.0")"
down=$(awk '$1 == 0 { print $2 }' "$PB_TMP/leaders.0")
[[ $down =~ ^[1-3]$ ]] || fail "partition 0 has no leader: $(tr '\n' ';' <"$PB_TMP/leaders.0")"
others=()
for b in 1 2 3; do ((b == down)) || others+=("$b"); done
led=$(awk -v b="$down" '$2 == b { print $1 }' "$PB_TMP/leaders.0" | tr '\n' ' ')
kafka_control coordinator "$POSTBOX_KAFKA_GROUP" "$down"
say "partitions (partition leader replicas): $(tr '\n' ';' <"$PB_TMP/leaders.0"); broker $down leads partitions $led and coordinates the group"

pb_init
create_effects
start_relay --set relay.batch_size=200 --set kafka.linger.ms=5
start_consumer "${GROUP_OPTS[@]}"
start_sampler
t_start=$(now_ms)
start_producer

wait_produced $((N_TX / 4))
down_at=$(now_ms)
kafka_control broker-down "$down"
say "broker $down down with $(published_count) published, $(pending_count) pending, $(effects) effects"
sleep 1 # the controller notices
i=0
for p in $led; do
    kafka_control partition-leader "$TOPIC" "$p" "${others[i % 2]}"
    i=$((i + 1))
done
kafka_control coordinator "$POSTBOX_KAFKA_GROUP" "${others[0]}"
wait_until 'leaders >"$PB_TMP/leaders.1" 2>/dev/null && ! leads_any "$down" "$PB_TMP/leaders.1"' 20 ||
    fail "the metadata still names broker $down as a leader: $(tr '\n' ';' <"$PB_TMP/leaders.1")"
say "new leaders: $(tr '\n' ';' <"$PB_TMP/leaders.1"); coordinator broker ${others[0]}"

wait_produced $((N_TX * 3 / 4))
up_at=$(now_ms)
kafka_control broker-up "$down"
for p in $led; do kafka_control partition-leader "$TOPIC" "$p" "$down"; done
say "broker $down up again, leading partitions $led again, with $(published_count) published, $(pending_count) pending, $(effects) effects"

finish_stream '[[ $(group_lag) == 0 ]]' 'echo "$(group_lag) message(s) past the committed offsets of the group"'
in_topic=$(kafka_tool count "$POSTBOX_KAFKA_BROKERS" "$TOPIC")
# what librdkafka reports of a broker it lost ("HOST:PORT/ID: Disconnected", "... Connect to ...
# failed"), through postbox's error or log callback
lost_pattern="/$down: \\(Disconnected\\|Connect to\\)"
relay_lost=$(grep -c "$lost_pattern" "$PB_RELAY_LOG" || true)
consumer_lost=$(grep -c "$lost_pattern" "$CONSUMER_LOG" || true)
end_ms=$(now_ms)
say "broker down: publishes failed for $(failing_between "$down_at" "$up_at") ms; publishing stalled for at most $(stall_between "$down_at" "$up_at") ms"
say "broker up again: publishes failed for $(failing_between "$up_at" "$end_ms") ms; publishing stalled for at most $(stall_between "$up_at" "$end_ms") ms"
say "$total events published in $publish_ms ms; the topic holds $in_topic"
say "effects $n ($distinct distinct) of $total; out of order $out_of_order; committed events without an inbox row: $missing; duplicates absorbed by the inbox: $dups"
say "broker $down lost, as logged: relay $relay_lost line(s) ($(grep -m1 "$lost_pattern" "$PB_RELAY_LOG" | cut -c1-220)), consumer $consumer_lost ($(grep -m1 "$lost_pattern" "$CONSUMER_LOG" | cut -c1-220))"

check_effects
((in_topic == total)) || fail "the topic holds $in_topic messages for $total events"
((relay_lost >= 1)) || fail "the relay logged nothing about losing broker $down"
((consumer_lost >= 1)) || fail "the consumer logged nothing about losing broker $down"
