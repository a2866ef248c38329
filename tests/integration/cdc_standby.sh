#!/usr/bin/env bash
# cdc capture, one relay per slot: a second relay on the same slot waits as a standby ("standing
# by"), publishes nothing while the first streams, and takes over when the first is SIGKILLed
# in the middle of a steady stream of events; nothing is lost, duplicates are reported.
source "$(dirname "$0")/lib.sh"

N_AGG=20 TXNS=400 PER_TXN=10
total=$((TXNS * PER_TXN))
pb_init
setup_queue '#'
cdc_use_slot
start_cdc_relay --set relay.batch_size=50
A=$RELAY_PID
# the standby, with its own log (poll_interval: how often it retries the slot)
B_LOG=$PB_TMP/relay_b.log
"$POSTBOX_BIN" --set relay.poll_interval=200ms relay --capture cdc >/dev/null 2>"$B_LOG" &
B=$!
PB_PIDS+=("$B")
wait_until 'grep -q "standing by" "$B_LOG" || ! pid_alive $B' 30 || fail "the second relay did not report standing by"
pid_alive "$B" || { cat "$B_LOG" >&2; fail "the second relay exited"; }
say "the second relay (pid $B) stands by: $(grep -m1 'standing by' "$B_LOG" | cut -c1-160)"

# a steady producer: TXNS transactions of PER_TXN events, ~10 ms apart
for ((t = 1; t <= TXNS; t++)); do
    echo "SELECT count(postbox.enqueue('order', 'sb-' || (k % $N_AGG), 'standby.v1', jsonb_build_object('seq', k)))
            FROM generate_series($(((t - 1) * PER_TXN + 1)), $((t * PER_TXN))) k;"
    echo "SELECT pg_sleep(0.01);"
done >"$PB_TMP/produce.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/produce.sql" >/dev/null &
producer=$!
PB_PIDS+=("$producer")
wait_until '(($(published_count) >= total / 3))' 60 || fail "the first relay published only $(published_count) events"
grep -q 'streaming slot' "$B_LOG" && fail "the standby streamed the slot while the first relay was alive"
kill -KILL "$A"
wait "$A" 2>/dev/null || true
t_kill=$(date +%s%N)
p_kill=$(published_count)
say "first relay (pid $A) killed after $p_kill published events"
wait_until 'grep -q "streaming slot" "$B_LOG"' 30 || fail "the standby did not take over within 30 s"
say "the standby took over after $((($(date +%s%N) - t_kill) / 1000000)) ms"
wait "$producer" || fail "the producer failed"
cdc_wait_caught_up 60
pid_alive "$B" || fail "the standby exited"
kill -TERM "$B"
wait_until '! pid_alive $B' 60 || fail "the standby did not stop on SIGTERM"
rc=0
wait "$B" || rc=$?
((rc == 0)) || fail "the standby exited with $rc"
published_by_b=$(grep 'totals: published' "$B_LOG" | tail -n 1 | sed 's/.*totals: published \([0-9]*\).*/\1/')
say "the standby published ${published_by_b:-?} events"
((${published_by_b:-0} > 0)) || fail "the standby published nothing"

drain_queue "$PB_TMP/got" $total 1000 120
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
say "duplicates after the takeover: $(duplicates_in "$PB_TMP/got")"
check_cdc_marked
