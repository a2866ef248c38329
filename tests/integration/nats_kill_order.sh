#!/usr/bin/env bash
# Consumer order and exactly-once through consumer crashes, with NATS JetStream: 20,000 events
# over 100 aggregates (postbox.enqueue, numbered per aggregate by the producer's transaction)
# are relayed to a stream while the consumer (2 lanes) is SIGKILLed at least 5 times with work
# in hand and restarted at once. A killed consumer's unacknowledged deliveries come back only
# after nats.ack_wait, while the restarted one already receives later events of the same
# aggregates: those wait for the missing numbers. The run ends with a kill and `postbox consume
# --drain`, which must return only when the durable consumer has nothing pending, not delivered
# or unacknowledged. Then, at once: every event took effect exactly once, every aggregate's
# effects are in its events' order, the durable consumer has nothing pending, and no gap was
# given up on (consume.gap_timeout).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

export POSTBOX_CONSUME_CONSUMER=ordered
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
export POSTBOX_CONSUME_LANES=2 POSTBOX_NATS_ACK_WAIT=2s POSTBOX_CONSUME_RECONNECT_CAP=1s
DURABLE=postbox_ordered
N_AGG=100 N_TX=10 PER_AGG_TX=20
total=$((N_AGG * N_TX * PER_AGG_TX))
: >"$CONSUMER_LOG"

consumer_state() { nats_tool consumer-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$DURABLE" 2>/dev/null; }
effects() { psql_q "SELECT count(*) FROM effects"; }
produce() { # TX: events PER_AGG_TX*(TX-1)+1 .. PER_AGG_TX*TX of every aggregate, one transaction
    local from=$(($1 * PER_AGG_TX - PER_AGG_TX + 1)) to=$(($1 * PER_AGG_TX))
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'step.v1',
                                         jsonb_build_object('agg', 'agg-' || a, 'seq', k)))
              FROM generate_series($from, $to) k, generate_series(1, $N_AGG) a" >/dev/null ||
        fail "producer transaction $1 failed"
}

pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL)"
start_consumer
wait_until '[[ -n $(consumer_state) ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the durable consumer was not created"; }
start_relay --set relay.batch_size=500

kills=0 busy=0 e0=0
kill_now() { # WHEN
    pid_alive "$CONSUMER_PID" || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer exited by itself ($1)"; }
    kill_consumer
    local e
    e=$(effects)
    kills=$((kills + 1))
    if ((e > e0 && e < total)); then busy=$((busy + 1)); fi
    say "$1: SIGKILL consumer; effects $e0 -> $e during its run"
    e0=$e
}
for ((t = 1; t <= N_TX; t++)); do
    produce $t
    sleep_ms $((150 + RANDOM % 350))
    if ((t < N_TX)); then
        kill_now "after transaction $t"
        start_consumer
    fi
done
wait_until '(( $(pending_count) == 0 ))' 120 || fail "the relay did not publish everything: $(pending_count) pending"
stop_relay
# the last kill with work in hand, then the drain
wait_until '(( $(effects) > e0 ))' 30 || true
kill_now "with the stream relayed"
say "durable consumer before the drain: $(consumer_state)"
t0=$(date +%s%N)
drain_rc=0
timeout 180 "$POSTBOX_BIN" consume --drain >>"$CONSUMER_LOG" 2>&1 || drain_rc=$?
drain_ms=$((($(date +%s%N) - t0) / 1000000))
state=$(consumer_state)
n=$(effects)
distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
last_ok=$(psql_q "SELECT count(*) FROM postbox.inbox_sequences WHERE consumer = 'ordered' AND last_sequence = $((N_TX * PER_AGG_TX))")
gave_up=$(grep -c 'gave up waiting for sequence' "$CONSUMER_LOG" || true)
seq_dups=$(grep -c 'was handled already' "$CONSUMER_LOG" || true)
dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
say "consume --drain exited $drain_rc after $drain_ms ms; durable consumer now: $state"
say "$kills consumer kills ($busy with work in hand); effects $n ($distinct distinct) of $total; out of order: $out_of_order; aggregates at their last number: $last_ok of $N_AGG"
say "duplicates absorbed: $dups ($seq_dups by sequence number); gaps given up: $gave_up"

((drain_rc == 0)) || { tail -n 20 "$CONSUMER_LOG" >&2; fail "postbox consume --drain exited with $drain_rc"; }
[[ $state == "pending=0 ack_pending=0 redelivered=0 "* ]] || fail "after --drain the durable consumer still has messages: $state"
((n == total && distinct == total)) || fail "$n effects ($distinct distinct) after --drain, expected $total once each"
((out_of_order == 0)) || fail "$out_of_order effects out of their aggregate's order"
((last_ok == N_AGG)) || fail "only $last_ok aggregates recorded their last sequence number"
((gave_up == 0)) || fail "$gave_up gap(s) given up on: events applied out of order"
((kills >= 6 && busy >= 5)) || fail "only $kills consumer kills, $busy with work in hand"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "dead letters"
