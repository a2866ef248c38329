#!/usr/bin/env bash
# Issue 26: exactly-once and per-aggregate order with Kafka while the relay and the consumer are
# SIGKILLed, the consumer also faster than its group can complete a join. 7,000 events over 50
# aggregates (numbered per aggregate by the producer's transactions) go through postbox relay
# (killed while publishing at each step) and postbox consume (2 lanes, session.timeout.ms 2.5 s).
# At each of 5 steps the consumer is killed once with work in hand, then started and killed
# twice more 0.2-0.8 s after its start, before its group hands it any partition (the mock
# cluster's join takes at least 1.5 s here): the group keeps dead members and rebalances over
# and over. The last transaction is relayed while only dead members are left; `postbox consume
# --drain` must wait for their sessions, its assignment, and the group's committed offsets at
# the end of every partition. Then: every event took effect exactly once, every aggregate in its
# events' order, no gap was given up on, nothing left past the group's committed offsets.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

export POSTBOX_CONSUME_SOURCE=kafka POSTBOX_CONSUME_CONSUMER=ordered
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
export POSTBOX_CONSUME_LANES=2 POSTBOX_RELAY_RECONNECT_CAP=1s POSTBOX_CONSUME_RECONNECT_CAP=1s
TOPIC=$(kafka_topic order)
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.ordered
GROUP_OPTS=(--set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500)
RELAY_OPTS=(--set relay.batch_size=100 --set kafka.linger.ms=20)
N_AGG=50 N_TX=7 PER_AGG_TX=20
total=$((N_AGG * N_TX * PER_AGG_TX))

effects() { psql_q "SELECT count(*) FROM effects"; }
group_lag() { kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "$POSTBOX_KAFKA_GROUP" "$TOPIC" 2>/dev/null || echo -1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
produce() { # TX: events PER_AGG_TX*(TX-1)+1 .. PER_AGG_TX*TX of every aggregate, one transaction
    local from=$(($1 * PER_AGG_TX - PER_AGG_TX + 1)) to=$(($1 * PER_AGG_TX))
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'step.v1',
                                         jsonb_build_object('agg', 'agg-' || a, 'seq', k)))
              FROM generate_series($from, $to) k, generate_series(1, $N_AGG) a" >/dev/null ||
        fail "producer transaction $1 failed"
}
# every consumer writes a log of its own, so that each kill can tell whether it had a partition
N_CONSUMERS=0
start_member() {
    N_CONSUMERS=$((N_CONSUMERS + 1))
    C_LOG=$PB_TMP/consumer.$N_CONSUMERS.log
    "$POSTBOX_BIN" "${GROUP_OPTS[@]}" consume >"$C_LOG" 2>&1 &
    CONSUMER_PID=$!
    PB_PIDS+=("$CONSUMER_PID")
    C_START=$(now_ms)
    C_E0=$(effects)
}
kills=0 busy=0 fast=0
kill_member() { # WHY
    pid_alive "$CONSUMER_PID" || { tail -n 20 "$C_LOG" >&2; fail "consumer $N_CONSUMERS exited by itself ($1)"; }
    kill_consumer
    local e ms kind=
    e=$(effects)
    ms=$(($(now_ms) - C_START))
    kills=$((kills + 1))
    # (the effects may still grow by a batch whose COMMIT a killed one had sent)
    if ! grep -q 'partitions\{0,1\} assigned' "$C_LOG"; then
        fast=$((fast + 1)) kind="before its assignment"
    elif ((e > C_E0 && e < total)); then
        busy=$((busy + 1)) kind="with work in hand"
    fi
    say "$1: SIGKILL consumer $N_CONSUMERS $ms ms after its start${kind:+, $kind}; effects $C_E0 -> $e"
}

pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL)"
produce 1 # the topic exists before the consumer subscribes
start_relay "${RELAY_OPTS[@]}"
start_member
wait_until '(( $(effects) > 0 ))' 30 || { tail -n 20 "$C_LOG" >&2; fail "the first consumer handled nothing within 30 s"; }

relay_kills=0 relay_busy=0 relay_p0=0
t_start=$(date +%s)
for ((t = 2; t < N_TX; t++)); do
    p_before=$(published_count)
    produce $t
    t0=$(now_ms)
    while (($(published_count) <= p_before)) && (($(now_ms) - t0 < 10000)); do sleep 0.01; done
    sleep_ms $((RANDOM % 40))
    kill_relay_now $t $(($(now_ms) - t0))
    start_relay "${RELAY_OPTS[@]}"
    # once it handles this transaction's events (its group may still be joining)
    wait_until '(( $(effects) > C_E0 ))' 20 || true
    sleep_ms $((100 + RANDOM % 300))
    kill_member "step $t"
    for k in 1 2; do
        start_member
        sleep_ms $((200 + RANDOM % 600))
        kill_member "step $t, fast kill $k"
    done
    ((t == N_TX - 1)) || start_member
done
produce $N_TX # while the group holds only dead members: for the drain
wait_until '(( $(pending_count) == 0 ))' 60 || fail "the relay did not publish everything: $(pending_count) pending"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
lag0=$(group_lag)
say "producers done after $(($(date +%s) - t_start)) s; $relay_kills relay kills ($relay_busy while publishing); group lag before the drain: $lag0"
((lag0 >= N_AGG * PER_AGG_TX)) || fail "group lag $lag0 before the drain, expected at least the last transaction's $((N_AGG * PER_AGG_TX))"

D_LOG=$PB_TMP/drain.log
t0=$(now_ms)
drain_rc=0
timeout 60 "$POSTBOX_BIN" "${GROUP_OPTS[@]}" consume --drain >"$D_LOG" 2>&1 || drain_rc=$?
drain_ms=$(($(now_ms) - t0))
n=$(effects)
distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
last_ok=$(psql_q "SELECT count(*) FROM postbox.inbox_sequences WHERE consumer = 'ordered' AND last_sequence = $((N_TX * PER_AGG_TX))")
logs=("$PB_TMP"/consumer.*.log "$D_LOG")
gave_up=$(cat "${logs[@]}" | grep -c 'gave up waiting for sequence' || true)
disorder=$(cat "${logs[@]}" | grep -c 'handled out of order' || true)
dups=$(cat "${logs[@]}" | grep -c 'duplicate message' || true)
lag=$(group_lag)
say "consume --drain exited $drain_rc after $drain_ms ms; group lag $lag"
say "$kills consumer kills ($busy with work in hand, $fast before an assignment); effects $n ($distinct distinct) of $total; out of order: $out_of_order (logged: $disorder); aggregates at their last number: $last_ok of $N_AGG; duplicates absorbed: $dups; gaps given up: $gave_up"

((drain_rc == 0)) || { tail -n 20 "$D_LOG" >&2; fail "postbox consume --drain exited with $drain_rc"; }
[[ $lag == 0 ]] || fail "group $POSTBOX_KAFKA_GROUP: lag $lag after --drain exited 0"
((n == total && distinct == total)) || fail "$n effects ($distinct distinct) after --drain, expected $total once each"
((out_of_order == 0 && disorder == 0)) || fail "$out_of_order effects out of their aggregate's order ($disorder logged)"
((last_ok == N_AGG)) || fail "only $last_ok aggregates recorded their last sequence number"
((gave_up == 0)) || fail "$gave_up gap(s) given up on: events applied out of order"
((busy >= 3)) || fail "only $busy of $kills consumer kills hit a consumer with work in hand"
((fast >= 6)) || fail "only $fast of $kills consumer kills came before the consumer's assignment"
((relay_busy >= 3)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "dead letters"
