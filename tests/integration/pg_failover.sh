#!/usr/bin/env bash
# Failover: a primary with a synchronous streaming replica of the test's own; the poll relay and
# `postbox consume` (inbox in the same database) connect with the multi-host DSN
# postgresql://...@P1,P2/db?target_session_attrs=read-write, and so does a producer writing one
# event to each of N_AGG aggregates per transaction. Mid-stream the primary is stopped the hard way
# (pg_ctl stop -m immediate) and the replica promoted. The relay and the consumer find the new
# primary by themselves (their logs say so); every event whose COMMIT succeeded is published and
# handled once in effect (a handler counting per event: each count is 1), each aggregate in
# order, and nothing is left pending or stuck. A transaction whose COMMIT outcome the producer
# never heard (the primary died under it) may or may not exist; if it does, it is relayed too.
# Prints how long publishing and handling stalled.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
N_AGG=5 TXNS=1200 CHUNK=40 KILL_AT=300

use_pg_pair
pb_init
psql_q "CREATE TABLE effect (agg text NOT NULL, seq int NOT NULL, n int NOT NULL,
                             handled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                             ord bigserial, PRIMARY KEY (agg, seq))"
setup_queue '#'
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=failover
export POSTBOX_CONSUME_HANDLER="INSERT INTO effect (agg, seq, n)
    VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int, 1)
    ON CONFLICT (agg, seq) DO UPDATE SET n = effect.n + 1"

# produce: transactions 1..TXNS, each enqueueing seq T for every aggregate, CHUNK per psql run;
# psql echoes "committed T" only after T's COMMIT succeeded. When a run fails after it connected
# (the primary died) the transaction after the last echoed one has an unknown outcome: it is
# written down and never tried again (that could make a second event for its seq), and the next
# run starts after it. A run that could not connect (no primary yet) tried nothing.
COMMITTED=$PB_TMP/committed UNKNOWN=$PB_TMP/unknown
: >"$COMMITTED"
: >"$UNKNOWN"
produce() {
    local t=1 k out=$PB_TMP/producer.out
    while ((t <= TXNS)); do
        {
            echo "\\echo connected"
            for ((k = t; k < t + CHUNK && k <= TXNS; k++)); do
                echo "BEGIN;"
                echo "SELECT count(postbox.enqueue('order', 'f-' || a, 'failover.v1',
                          jsonb_build_object('agg', 'f-' || a, 'seq', $k))) FROM generate_series(1, $N_AGG) a;"
                echo "COMMIT;"
                echo "\\echo committed $k"
            done
        } >"$PB_TMP/chunk.sql"
        local rc=0
        psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/chunk.sql" >"$out" 2>>"$PB_TMP/producer.err" || rc=$?
        grep '^committed' "$out" >>"$COMMITTED" || true
        if ((rc == 0)); then
            t=$k
        elif grep -q '^connected' "$out"; then
            k=$(awk '/^committed/ { k = $2 } END { print k }' "$out") # none when t was cut off
            k=$((${k:-$((t - 1))} + 1))
            echo "$k" >>"$UNKNOWN"
            t=$((k + 1))
        else
            sleep 0.1
        fi
    done
}
committed_count() { wc -l <"$COMMITTED"; }

start_relay --set relay.batch_size=100
wait_until 'grep -q "relaying from postgresql 127.0.0.1:$PG_PRIMARY_PORT/" "$PB_RELAY_LOG"' 30 ||
    fail "the relay did not start relaying from the primary"
start_consumer --set consume.batch_size=50
wait_until 'grep -q "writing its inbox in postgresql 127.0.0.1:$PG_PRIMARY_PORT/" "$CONSUMER_LOG"' 30 ||
    fail "the consumer did not connect to the primary: $(tail -n 5 "$CONSUMER_LOG")"
produce &
PRODUCER=$!
PB_PIDS+=("$PRODUCER")

wait_until '(($(committed_count) >= KILL_AT))' 60 || fail "the producer committed only $(committed_count) transactions"
handled_before=$(psql_q "SELECT count(*) FROM effect")
((handled_before > 0)) || fail "nothing was handled before the failover: the test would test less than intended"
pg_pair_kill_primary
t_kill=$(date +%s%N)
committed_at_kill=$(committed_count)
say "primary stopped (immediate) after $committed_at_kill committed transactions, $handled_before events handled"
sleep 1 # a failover takes a while to decide; meanwhile nothing is writable
pg_pair_promote
say "replica promoted $((($(date +%s%N) - t_kill) / 1000000)) ms after the primary died"

wait_until 'grep -q "relaying from postgresql 127.0.0.1:$PG_REPLICA_PORT/" "$PB_RELAY_LOG" || ! pid_alive $RELAY_PID' 60 ||
    fail "the relay did not reconnect to the new primary within 60 s"
pid_alive "$RELAY_PID" || fail "the relay exited after the failover"
say "relay relaying from the new primary $((($(date +%s%N) - t_kill) / 1000000)) ms after the primary died"
wait_until 'grep -q "writing its inbox in postgresql 127.0.0.1:$PG_REPLICA_PORT/" "$CONSUMER_LOG" || ! pid_alive $CONSUMER_PID' 60 ||
    fail "the consumer did not reconnect to the new primary within 60 s (the producer $(pid_alive $PRODUCER && echo runs || echo ended), $(committed_count) transactions committed): $(tail -n 5 "$CONSUMER_LOG")"
pid_alive "$CONSUMER_PID" || fail "the consumer exited after the failover: $(tail -n 5 "$CONSUMER_LOG")"
say "consumer writing to the new primary $((($(date +%s%N) - t_kill) / 1000000)) ms after the primary died"

wait_until '! pid_alive $PRODUCER' 90 || fail "the producer did not finish"
wait "$PRODUCER" || fail "the producer failed"
n_committed=$(committed_count)
n_unknown=$(wc -l <"$UNKNOWN")
((n_committed > committed_at_kill)) || fail "no transaction committed after the failover"
say "producer: $n_committed transactions committed, $n_unknown with an unknown outcome ($(tr '\n' ' ' <"$UNKNOWN"))"

# nothing stuck: every event of the new primary's outbox is published and handled
total=$(psql_q "SELECT count(*) FROM postbox.outbox_all")
wait_until '(($(pending_count) == 0)) && (($(psql_q "SELECT count(*) FROM effect") >= total))' 60 ||
    fail "stuck: $(pending_count) events pending, $(psql_q "SELECT count(*) FROM effect") of $total handled 60 s after the producer ended"
sleep 2 # a late duplicate would count twice
stop_consumer
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"

# every committed transaction's events exist and were handled exactly once
sed 's/^committed //' "$COMMITTED" >"$PB_TMP/committed_seqs"
psql_q "CREATE TEMP TABLE c (seq int PRIMARY KEY);
        COPY c FROM STDIN;
$(cat "$PB_TMP/committed_seqs")
\\.
SELECT count(*) FROM c CROSS JOIN generate_series(1, $N_AGG) a
 WHERE NOT EXISTS (SELECT 1 FROM effect e WHERE e.agg = 'f-' || a AND e.seq = c.seq)" >"$PB_TMP/lost" 2>&1 ||
    fail "cannot compare the committed transactions with the handled events: $(cat "$PB_TMP/lost")"
lost=$(tail -n 1 "$PB_TMP/lost")
twice=$(psql_q "SELECT count(*) FROM effect WHERE n <> 1")
phantom=$(psql_q "SELECT count(*) FROM effect e WHERE NOT EXISTS (SELECT 1 FROM postbox.outbox_all o
                    WHERE o.payload->>'agg' = e.agg AND (o.payload->>'seq')::int = e.seq)")
handled=$(psql_q "SELECT count(*) FROM effect")
extra=$((handled - n_committed * N_AGG))
misordered=$(psql_q "SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY agg ORDER BY ord) AS back FROM effect) s WHERE back")
say "events: $total in the outbox, $handled handled, $lost committed but not handled, $twice handled more than once, $phantom handled but not in the outbox, $misordered out of order; $extra from transactions of unknown outcome"
((lost == 0)) || fail "$lost event(s) of committed transactions were never handled"
((twice == 0)) || fail "$twice event(s) took effect more than once"
((phantom == 0)) || fail "$phantom handled event(s) are not in the outbox"
((misordered == 0)) || fail "$misordered event(s) handled after a later one of their aggregate"
((handled == total)) || fail "$handled events handled, $total in the outbox"
((extra >= 0 && extra <= n_unknown * N_AGG)) || fail "$extra events beyond the committed transactions' ($n_unknown unknown outcomes)"

# how long the failover held things up: the longest gap between two publications, between two
# handled events and between two events written (the producer's own stall, which nothing after it
# can beat), each with where it began relative to the primary's death (one clock: same host)
kill_ms=$((t_kill / 1000000))
longest_gap() { # TABLE COLUMN: "<gap ms> <its start, ms after the kill>"
    psql_q "SELECT round(extract(epoch FROM g) * 1000), round(extract(epoch FROM prev) * 1000) - $kill_ms
              FROM (SELECT $2 - lag($2) OVER (ORDER BY $2) AS g, lag($2) OVER (ORDER BY $2) AS prev FROM $1) s
             WHERE g IS NOT NULL ORDER BY g DESC LIMIT 1" | tr '|' ' '
}
read -r pub_gap pub_at <<<"$(longest_gap postbox.outbox_published published_at)"
read -r handle_gap handle_at <<<"$(longest_gap effect handled_at)"
read -r write_gap write_at <<<"$(longest_gap postbox.outbox_all created_at)"
dups=$(grep -o 'totals: processed [0-9]*, duplicates [0-9]*' "$CONSUMER_LOG" | tail -n 1 | sed 's/.*duplicates //')
say "publishing stalled at most $pub_gap ms (from $pub_at ms after the kill), handling $handle_gap ms (from $handle_at ms), writing $write_gap ms (from $write_at ms); duplicates the inbox absorbed: ${dups:-?}"
grep -E 'waiting for postgresql|connected to postgresql|relaying from|writing its inbox' "$PB_RELAY_LOG" "$CONSUMER_LOG" |
    sed "s|$PB_TMP/||; s/^/  log: /" | cut -c1-220 | head -16
