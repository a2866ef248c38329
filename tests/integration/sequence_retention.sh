#!/usr/bin/env bash
# The sequence tables' retention (README, "Retention"; sql/018): rows of idle aggregates go, the
# numbering and the consumer's duplicate rule hold. Events go outbox -> relay -> queue -> consumer,
# which waits for gaps (a wrong number would wait, and say so) and records each effect.
#   1. A, B, C, D: 1..3 each take effect
#   2. `postbox purge --sequences` after backdating: A's rows go on both sides; B's producer row
#      stays (an event is pending), C's rows stay (active), D's consumer row stays (a folded
#      number received since the cutoff), another consumer's row stays (--consumer)
#   3. A's next events are numbered 1, 2, 3 again and take effect in order, each once; a copy of
#      one is a duplicate; B's pending event takes effect; nothing is late or waited for
#   4. a consumer that still has its row when the producer starts over (it lagged): the new
#      numbers take effect once each, as late
#   5. the janitors: relay.sequence_retention and consume.sequence_retention purge by themselves
#      (idle rows go, active ones stay)
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=seqret
export POSTBOX_CONSUME_WAIT_FOR_GAPS=always POSTBOX_CONSUME_GAP_TIMEOUT=3s
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, step, id)
    VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'step')::int, \$3::jsonb->>'message_id')"
setup_queue '#'
pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, step int NOT NULL, id text NOT NULL)"

events() { # AGG FROM TO: the aggregate's steps FROM..TO, one transaction
    psql_q "SELECT count(postbox.enqueue('order', '$1', 'step.v1', jsonb_build_object('agg', '$1', 'step', k)))
              FROM generate_series($2, $3) k" >/dev/null
}
drain() {
    local PRE=()
    _with_dsn "$PB_CONSUMER_DSN"
    "$POSTBOX_BIN" "${PRE[@]}" consume --drain >>"$CONSUMER_LOG" 2>&1 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "consume --drain failed"; }
}
steps_of() { psql_q "SELECT coalesce(string_agg(step::text, ',' ORDER BY n), '') FROM effects WHERE agg = '$1'"; }
expect_steps() { [[ $(steps_of "$1") == "$2" ]] || fail "aggregate $1: effects $(steps_of "$1"), expected $2"; }
numbers_of() { # AGG: the aggregate_sequence of its events, by id
    psql_q "SELECT string_agg(sequence::text, ',' ORDER BY id) FROM postbox.outbox_all WHERE aggregate_id = '$1'"
}
producer_rows() { psql_q "SELECT coalesce(string_agg(aggregate_id, ',' ORDER BY aggregate_id), '') FROM postbox.aggregate_sequences"; }
consumer_rows() { psql_q "SELECT coalesce(string_agg(consumer || '/' || aggregate_id, ',' ORDER BY consumer, aggregate_id), '') FROM postbox.inbox_sequences"; }
backdate() { # TABLE AGG... : the rows of these aggregates look idle for 100 days
    local t=$1
    shift
    local list
    list=$(printf "'%s'," "$@")
    psql_q "UPDATE postbox.$t SET updated_at = now() - interval '100 days' WHERE aggregate_id IN (${list%,})" >/dev/null
}

say "1. A, B, C, D: 1..3 each take effect"
for a in A B C D; do events $a 1 3; done
relay_drain 60
drain
for a in A B C D; do expect_steps $a 1,2,3; done
[[ $(producer_rows) == A,B,C,D ]] || fail "producer rows $(producer_rows)"
# D: a folded number received just now (the inbox purge folds what it deletes into the row)
psql_q "UPDATE postbox.inbox_sequences SET purged = '{[1,2)}', purged_before = now() WHERE aggregate_id = 'D'" >/dev/null
# another consumer's idle row: `--consumer seqret` leaves it
psql_q "INSERT INTO postbox.inbox_sequences (consumer, aggregate_type, aggregate_id, last_sequence, updated_at)
        VALUES ('other', 'order', 'A', 3, now() - interval '100 days')" >/dev/null

say "2. postbox purge --sequences"
events B 4 4 # pending: the relay does not run
backdate aggregate_sequences A B D
backdate inbox_sequences A D
out=$("$POSTBOX_BIN" purge --older-than 30d --sequences --consumer seqret 2>&1) || fail "postbox purge failed: $out"
printf '%s\n' "$out" | sed 's/^/  /'
grep -q 'postbox.aggregate_sequences: deleted 2 rows' <<<"$out" || fail "purge output: $out"
grep -q 'postbox.inbox_sequences: deleted 1 rows' <<<"$out" || fail "purge output: $out"
[[ $(producer_rows) == B,C ]] || fail "producer rows $(producer_rows), expected B,C (A and D idle, B pending, C active)"
[[ $(consumer_rows) == other/A,seqret/B,seqret/C,seqret/D ]] ||
    fail "consumer rows $(consumer_rows), expected other/A,seqret/B,seqret/C,seqret/D"

say "3. A's numbering starts over and is consumed in order, once"
events A 4 6
[[ $(numbers_of A) == 1,2,3,1,2,3 ]] || fail "A's numbers $(numbers_of A), expected 1,2,3,1,2,3"
[[ $(numbers_of B) == 1,2,3,4 ]] || fail "B's numbers $(numbers_of B), expected 1,2,3,4"
relay_drain 60
drain
expect_steps A 1,2,3,4,5,6
expect_steps B 1,2,3,4
copy=$(psql_q "SELECT event_id FROM postbox.outbox_published WHERE aggregate_id = 'A' ORDER BY id OFFSET 3 LIMIT 1")
publish order.step.v1 "$copy" step.v1 '{"agg": "A", "step": 4}' --header aggregate_type=order \
    --header aggregate_id=A --header aggregate_sequence=1
drain
expect_steps A 1,2,3,4,5,6
[[ $(psql_q "SELECT count(*) FROM effects GROUP BY id ORDER BY 1 DESC LIMIT 1") == 1 ]] || fail "an event took effect twice"
[[ $(psql_q "SELECT last_sequence FROM postbox.inbox_sequences WHERE consumer = 'seqret' AND aggregate_id = 'A'") == 3 ]] ||
    fail "A's consumer row is not at 3"
if grep -E 'handled out of order|gave up waiting' "$CONSUMER_LOG"; then
    fail "the consumer handled an event out of order or waited for a gap"
fi

say "4. a consumer that lagged keeps its row: the new numbers take effect once, as late"
backdate aggregate_sequences C
"$POSTBOX_BIN" purge --older-than 30d --sequences --outbox-only >/dev/null || fail "postbox purge --outbox-only failed"
# B's pending event of step 2 is published now, and B idle since: its row goes too
[[ $(producer_rows) == A ]] || fail "producer rows $(producer_rows), expected A"
events C 4 5
[[ $(numbers_of C) == 1,2,3,1,2 ]] || fail "C's numbers $(numbers_of C), expected 1,2,3,1,2"
relay_drain 60
drain
expect_steps C 1,2,3,4,5
grep -q 'aggregate order/C handled out of order (late' "$CONSUMER_LOG" || fail "C's new numbers were not handled as late"

say "5. the janitors purge by themselves"
backdate aggregate_sequences A
backdate inbox_sequences B C
start_relay --set relay.purge_interval=1s --set relay.sequence_retention=30d
wait_until '[[ $(producer_rows) == C ]]' 30 || fail "the relay's janitor left producer rows $(producer_rows), expected C"
wait_until "grep -q 'purged 1 rows of postbox.aggregate_sequences' '$PB_RELAY_LOG'" 10 || fail "the relay did not log the purge"
stop_relay
start_consumer --set consume.purge_interval=1s --set consume.sequence_retention=30d
wait_until '[[ $(consumer_rows) == other/A,seqret/A,seqret/D ]]' 30 ||
    fail "the consumer's janitor left rows $(consumer_rows), expected other/A,seqret/A,seqret/D"
stop_consumer
say "PASS"
