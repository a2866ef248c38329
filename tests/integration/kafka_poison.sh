#!/usr/bin/env bash
# The kafka source with a poison message, published by the relay: the handler of bad.v1 always
# fails, the one of good.v1 works. With consume.max_attempts=3 and backoff 100..500 ms the
# poison message (first of its partition) is handled again after each failure while the other
# aggregates' messages flow past it, and its own aggregate's later messages wait behind it; then
# it lands in postbox.inbox_dead with attempts = 3, its aggregate goes on in order, and the
# group's committed offsets reach the end of every partition (nothing left behind it, nothing
# committed before it was settled).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
TOPIC=$(kafka_topic test)
export POSTBOX_CONSUME_SOURCE=kafka POSTBOX_CONSUME_CONSUMER=poison-test
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.poison
GOOD_SQL="INSERT INTO seen (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
BAD_SQL="SELECT 1 / ((\$1::jsonb->>'seq')::int * 0)"
N_AGG=10 PER_AGG=40

pb_init
psql_q "CREATE TABLE seen (n bigint GENERATED ALWAYS AS IDENTITY, agg text, seq int)"
enqueue() { # AGG SEQ TYPE
    psql_q "SELECT postbox.enqueue('test', '$1', '$3', jsonb_build_object('agg', '$1', 'seq', $2))" >/dev/null
}
# the poison message is its aggregate's first; everything else is good
enqueue a-0 0 bad.v1
psql_q "SELECT count(postbox.enqueue('test', 'a-' || a, 'good.v1', jsonb_build_object('agg', 'a-' || a, 'seq', s)))
          FROM generate_series(1, $PER_AGG) s, generate_series(0, $((N_AGG - 1))) a" >/dev/null
total=$((N_AGG * PER_AGG + 1))
relay_drain 60
start_consumer --set "handlers.bad.v1=$BAD_SQL" --set "handlers.good.v1=$GOOD_SQL" \
    --set consume.max_attempts=3 --set consume.backoff_base=100ms --set consume.backoff_cap=500ms \
    --set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 &&
               $(psql_q "SELECT count(*) FROM seen") == $((total - 1)) ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead, $(psql_q "SELECT count(*) FROM seen") handled"; }
lag=-1
wait_until 'lag=$(kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "$POSTBOX_KAFKA_GROUP" "$TOPIC"); [[ $lag == 0 ]]' 20 ||
    fail "the group's committed offsets are $lag message(s) short of the end"
stop_consumer

dead_row=$(psql_q "SELECT message_type, attempts, routing_key FROM postbox.inbox_dead")
attempts_logged=$(grep -c 'attempt [0-9]* failed' "$CONSUMER_LOG" || true)
disorder=$(psql_q "SELECT count(*) FROM (SELECT agg, seq, lag(seq) OVER (PARTITION BY agg ORDER BY n) AS prev FROM seen) s
                   WHERE prev IS NOT NULL AND seq <= prev")
dup=$(psql_q "SELECT count(*) - count(DISTINCT (agg, seq)) FROM seen")
first_after=$(psql_q "SELECT min(i.processed_at) > (SELECT dead_at FROM postbox.inbox_dead)
                      FROM postbox.inbox i JOIN postbox.outbox_all o ON o.event_id::text = i.message_id
                      WHERE o.aggregate_id = 'a-0' AND o.event_type = 'good.v1'")
say "poison message: dead letter $dead_row after $attempts_logged logged failures; a-0's good messages all handled after it: $first_after"
say "good messages handled: $(psql_q "SELECT count(*) FROM seen") of $((total - 1)), out of order: $disorder, twice: $dup; group lag 0"
[[ $dead_row == "bad.v1|3|$TOPIC" ]] || fail "unexpected dead letter: $dead_row"
((attempts_logged == 2)) || fail "expected 2 logged retries before the dead letter, got $attempts_logged"
[[ $first_after == t ]] || fail "a message of the poison's aggregate was handled before the poison was settled"
((disorder == 0)) || fail "$disorder message(s) handled out of their aggregate's order"
((dup == 0)) || fail "$dup message(s) handled twice"
