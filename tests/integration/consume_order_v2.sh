#!/usr/bin/env bash
# The consumer's ordering rules with RabbitMQ (README, "Guarantees"): the aggregate_sequence
# orders, it never makes a duplicate; hostile keys do not stop the consumer. The queue takes
# every event ('#'), so the consumer waits for a missing number (consume.gap_timeout 1 s).
#   late:       A's 1, then 3 (2 missing: handled after the gap timeout), then 2: takes effect
#   forged:     B's 1, 2, a forged 999999999999, then 3..5, then 6: every one takes effect
#   restarted:  C's 1..5, then a numbering that starts again at 1 (new ids): 1..3 take effect
#   hostile:    a 4 KB aggregate_id and a 4 KB message id are handled or go to inbox_dead with
#               a reason, the consumer keeps running, the next message takes effect
# Counted in postbox_consumer_out_of_order_total and logged at warn, once per aggregate and
# reason per minute.
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
export POSTBOX_CONSUME_CONSUMER=order-v2 POSTBOX_CONSUME_GAP_TIMEOUT=1s
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::bigint)"
PORT=$(free_port)
export POSTBOX_METRICS_LISTEN=127.0.0.1:$PORT
setup_queue '#'
pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq bigint NOT NULL)"

send() { # AGG SEQ ID: one event of aggregate AGG with sequence SEQ and message id ID
    publish "order.step.v1" "$3" step.v1 "{\"agg\": \"$1\", \"seq\": $2}" \
        --header aggregate_type=order --header "aggregate_id=$1" --header "aggregate_sequence=$2"
}
effects_of() { psql_q "SELECT coalesce(string_agg(seq::text, ',' ORDER BY n), '') FROM effects WHERE agg = '$1'"; }
expect_effects() { # AGG LIST [SECONDS]
    wait_until "[[ \$(effects_of $1) == '$2' ]]" "${3:-10}" ||
        fail "aggregate $1: effects $(effects_of "$1"), expected $2"
}
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" 'index($0, k) == 1 { print $2 }'; }

start_consumer
wait_until 'grep -q "ordering: an aggregate" "$CONSUMER_LOG"' 10 ||
    fail "the consumer did not say that it waits for gaps: $(grep ordering "$CONSUMER_LOG")"

say "late: A 1, 3 (2 missing), then 2"
send A 1 a-1
send A 3 a-3
expect_effects A 1,3 10
send A 2 a-2
expect_effects A 1,3,2
grep -q 'gave up waiting for sequence 2' "$CONSUMER_LOG" || fail "no line about the gap before A's 3"

say "forged: B 1, 2, 999999999999, 3..5, then 6"
send B 1 b-1
send B 2 b-2
send B 999999999999 b-forged
for k in 3 4 5; do send B $k b-$k; done
expect_effects B 1,2,3,4,5
expect_effects B 1,2,3,4,5,999999999999 10
send B 6 b-6
expect_effects B 1,2,3,4,5,999999999999,6

say "restarted numbering: C 1..5, then 1..3 again with new ids"
for k in 1 2 3 4 5; do send C $k c-$k; done
expect_effects C 1,2,3,4,5
for k in 1 2 3; do send C $k c2-$k; done
expect_effects C 1,2,3,4,5,1,2,3

say "duplicates are still told by the id: A's 2 and B's 6 again"
send A 2 a-2
send B 6 b-6
wait_until '[[ $(metric "postbox_inbox_duplicates_total{consumer=\"order-v2\"}") == 2 ]]' 10 ||
    fail "duplicates counted: $(metric 'postbox_inbox_duplicates_total{consumer="order-v2"}'), expected 2"
[[ $(effects_of A) == 1,3,2 ]] || fail "a duplicate took effect: A $(effects_of A)"

late=$(metric 'postbox_consumer_out_of_order_total{consumer="order-v2",reason="late"}')
skipped=$(metric 'postbox_consumer_out_of_order_total{consumer="order-v2",reason="gap_skipped"}')
say "out of order: late $late, gap_skipped $skipped"
# late: A's 2, B's 6, C's 1..3 (5); gap skipped: A's 3, B's forged one (2)
[[ $late == 5 ]] || fail "postbox_consumer_out_of_order_total late = '$late', expected 5"
[[ $skipped == 2 ]] || fail "postbox_consumer_out_of_order_total gap_skipped = '$skipped', expected 2"
lines=$(grep -c 'handled out of order (late' "$CONSUMER_LOG" || true)
((lines == 3)) || fail "$lines warnings about late messages, expected 3 (one per aggregate A, B, C)"
grep -q 'was handled already' "$CONSUMER_LOG" && fail "a message was dropped for its sequence number"
say "hostile: a 4 KB aggregate_id, a 4 KB message id (consume.message_id_header), then a plain message"
stop_consumer
start_consumer --set consume.message_id_header=msg_id
send_h() { # AGG SEQ ID [AGG_ID]: as send, the id in header msg_id
    publish order.step.v1 "" step.v1 "{\"agg\": \"$1\", \"seq\": $2}" --header aggregate_type=order \
        --header "aggregate_id=${4:-$1}" --header "aggregate_sequence=$2" --header "msg_id=$3"
}
# random text: PostgreSQL compresses a repetitive key until it fits in an index entry
long_agg=$(head -c 3072 /dev/urandom | base64 -w0)
long_id=$(head -c 3072 /dev/urandom | base64 -w0)
send_h H 1 h-long-agg "$long_agg"
send_h H 2 "$long_id" H2
send_h D 1 d-1
expect_effects D 1
hostile_settled() {
    handled=$(psql_q "SELECT count(*) FROM effects WHERE agg = 'H'")
    dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE consumer = 'order-v2'")
    ((handled + dead == 2))
}
wait_until hostile_settled 10 ||
    fail "of the two hostile messages $handled took effect and $dead went to inbox_dead: $(tail -n 3 "$CONSUMER_LOG" | cut -c1-300)"
pid_alive "$CONSUMER_PID" || fail "the consumer stopped: $(tail -n 5 "$CONSUMER_LOG" | cut -c1-300)"
say "hostile messages: $handled handled, $dead in inbox_dead"
# once more: a redelivery of the long id is a duplicate, not a second effect
send_h H 2 "$long_id" H2
send_h D 2 d-2
expect_effects D 1,2
[[ $(psql_q "SELECT count(*) FROM effects WHERE agg = 'H'") == "$handled" ]] ||
    fail "the long message id took effect twice"

say "the queue's depth on /metrics"
[[ $(metric "postbox_amqp_queue_consumers{queue=\"$PB_QUEUE\"}") == 1 ]] ||
    fail "postbox_amqp_queue_consumers: $(curl -s "http://127.0.0.1:$PORT/metrics" | grep amqp_queue)"
[[ $(metric "postbox_amqp_queue_messages{queue=\"$PB_QUEUE\"}") =~ ^[0-9]+$ ]] ||
    fail "postbox_amqp_queue_messages: $(curl -s "http://127.0.0.1:$PORT/metrics" | grep amqp_queue)"

stop_consumer
say "PASS"
