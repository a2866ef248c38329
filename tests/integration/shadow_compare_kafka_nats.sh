#!/usr/bin/env bash
# postbox shadow compare reads Kafka topics (kafka:TOPIC) and JetStream streams (nats:STREAM):
# postbox publishes three orders to each broker, a legacy publisher (kcat; nats-tool) the same
# three with one total different on purpose. compare reports exactly that one (exit 1), reads
# headers and the record key / subject as attributes (a compare keyed on them finds both sides
# the same, exit 0), and takes nothing away: the topics keep their records, the streams their
# messages. An unknown source kind, a missing topic (not created by the read) or stream is an
# error naming it (exit 2).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps)"
pb_init

enqueue_orders() { # postbox's three orders, the third one differing from the legacy one
    local i total
    for i in 1 2 3; do
        total=$((i * 1000))
        ((i == 3)) && total=3100
        psql_q "SELECT postbox.enqueue('order', 'o-$i', 'order.paid.v1', '{\"order_id\": $i, \"total_cents\": $total}')" >/dev/null
    done
}
legacy_bodies() { for i in 1 2 3; do printf '{"order_id": %d, "total_cents": %d}\n' "$i" $((i * 1000)); done; }
want='differs   3: /total_cents legacy 3000, ours 3100
summary: legacy 3, ours 3, equal 2, missing 0, extra 0, differing 1, unkeyed 0 (duplicates not compared: legacy 0, ours 0): different'
compare() { # expected exit status, then the arguments
    local want_rc=$1 rc=0 out
    shift
    out=$("$POSTBOX_BIN" shadow compare "$@" 2>&1) || rc=$?
    ((rc == want_rc)) || fail "shadow compare $* exited $rc (expected $want_rc): $out"
    printf '%s\n' "$out"
}

say "Kafka: the relay's topic against a legacy topic written by kcat"
enqueue_orders
relay_drain 60 --set relay.sink=kafka
OURS_T=$(kafka_topic order) LEGACY_T=$(kafka_topic legacy)
legacy_bodies | kcat -P -b "$POSTBOX_KAFKA_BROKERS" -t "$LEGACY_T" || fail "kcat could not produce to $LEGACY_T"
out=$(compare 1 --legacy "kafka:$LEGACY_T" --ours "kafka:$OURS_T" --key /order_id --fields /total_cents)
[[ $out == "$want" ]] || fail "kafka compare printed:
$out
expected:
$want"
# the record key (the aggregate id) and a header, as attributes
compare 0 --legacy "kafka:$OURS_T" --ours "kafka:$OURS_T" --key header:key --fields header:event_type,/total_cents >/dev/null
for t in "$OURS_T" "$LEGACY_T"; do
    [[ $(kafka_tool count "$POSTBOX_KAFKA_BROKERS" "$t") == 3 ]] || fail "topic $t lost records"
done
say "kafka: exactly the differing order reported; keyed on the record key both sides are the same"

say "NATS: the relay's stream against a legacy stream written by nats-tool"
enqueue_orders
relay_drain 60 --set relay.sink=nats
LEGACY_S=${POSTBOX_NATS_STREAM}_LEGACY LEGACY_P=pb.${PB_TEST}legacy.
nats_tool delete-stream "$POSTBOX_NATS_URL" "$LEGACY_S" || fail "delete-stream $LEGACY_S"
on_exit "$POSTBOX_NATS_TOOL delete-stream $POSTBOX_NATS_URL $LEGACY_S"
# the legacy stream: made by a relay of its own name and prefix with nothing to publish
POSTBOX_NATS_STREAM=$LEGACY_S POSTBOX_NATS_SUBJECT_PREFIX=$LEGACY_P relay_drain 60 --set relay.sink=nats
i=0
while read -r body; do
    i=$((i + 1))
    nats_tool publish "$POSTBOX_NATS_URL" "${LEGACY_P}order.paid" "legacy-$i" order.paid.v1 "$body" >/dev/null ||
        fail "nats-tool publish to $LEGACY_S failed"
done < <(legacy_bodies)
out=$(compare 1 --legacy "nats:$LEGACY_S" --ours "nats:$POSTBOX_NATS_STREAM" --key /order_id --fields /total_cents)
[[ $out == "$want" ]] || fail "nats compare printed:
$out
expected:
$want"
compare 0 --legacy "nats:$POSTBOX_NATS_STREAM" --ours "nats:$POSTBOX_NATS_STREAM" --key header:Nats-Msg-Id \
    --fields header:subject,header:aggregate_id >/dev/null
[[ $(stream_count) == 3 && $(nats_tool count "$POSTBOX_NATS_URL" "$LEGACY_S") == 3 ]] ||
    fail "a stream lost messages: ours $(stream_count), legacy $(nats_tool count "$POSTBOX_NATS_URL" "$LEGACY_S")"
say "nats: exactly the differing order reported; keyed on Nats-Msg-Id both sides are the same"

out=$(compare 2 --legacy "sqs:orders" --ours "nats:$POSTBOX_NATS_STREAM" --key /order_id)
[[ $out == *'"sqs:orders"'*kafka:TOPIC*nats:STREAM* ]] || fail "unclear error for an unknown source: $out"
out=$(compare 2 --legacy "nats:PB_NO_SUCH_STREAM" --ours "nats:$POSTBOX_NATS_STREAM" --key /order_id)
[[ $out == *'no stream "PB_NO_SUCH_STREAM"'* ]] || fail "unclear error for a missing stream: $out"
out=$(compare 2 --legacy "kafka:$(kafka_topic nothing)" --ours "kafka:$OURS_T" --key /order_id)
[[ $out == *"no topic"* ]] || fail "unclear error for a missing topic: $out"
say "unknown source kind, stream and topic: errors naming them"
