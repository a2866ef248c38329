# The body of delay_kill_poll and delay_kill_cdc (CAPTURE set by them), sourced after lib.sh: the
# relay SIGKILLed while events are delayed, then restarted; everything is published exactly
# once, each aggregate in order (lib.sh drain_exactly_once: check_order, check_all_arrived, no
# duplicate). The relay runs as a member of postbox_relay (postbox init --print-grants).
#   wave 1 at T0: seq 1..5 of agg-1..agg-20; seq 1 of each odd aggregate available at T0+12s,
#     so the odd aggregates wait whole; the 50 events of the even ones arrive at once; then
#     SIGKILL while the 50 others wait (poll: as waiting outbox rows; cdc: set aside in
#     postbox.cdc_deferred, the stream's position confirmed past them), and a restart;
#   wave 2: seq 6..8 of every aggregate: the even ones arrive, the odd ones join the wait;
#   wave 3: seq 9 of the odd aggregates only (every one of them behind a delayed event), and a
#     SIGKILL 0.3 s after its commit, while the relay sets them aside (poll: parks them), then a
#     restart: a transaction met again in the stream must not be set aside twice;
#   (cdc) wave 4: one transaction with seq 10 of agg-2 and of the odd aggregates: agg-2's is
#     published at once, but its mark waits for a lock that a test session holds on
#     postbox.outbox_published, so the slot's position cannot be confirmed past the
#     transaction; the odd aggregates' are set aside meanwhile; SIGKILL, the lock released, a
#     restart: the stream gives the transaction again; agg-2's event is published a second time
#     (at least once: the broker had confirmed it), the events set aside are not set aside twice
#     nor published early;
#   at T0+15s the odd aggregates go, in order.
source "$(dirname "$0")/delay_lib.sh"
N_AGG=20 D=15
pb_init
use_least_privilege --set relay.capture=$CAPTURE # the relay: postbox_relay (cdc: REPLICATION)
create_sent
setup_queue '#'
[[ $CAPTURE != cdc ]] || { cdc_use_slot; cdc_create_slot; }
start_capture_relay --set log.level=debug

wave() { # K_FROM K_TO AGG_STEP [AVAILABLE_AT_SQL_FOR_SEQ_1]
    {
        echo "BEGIN;"
        for ((k = $1; k <= $2; k++)); do
            for ((a = 1; a <= N_AGG; a += $3)); do
                if ((k == 1 && a % 2 == 1)); then ev "agg-$a" "$k" "$4"; else ev "agg-$a" "$k"; fi
            done
        done
        echo "COMMIT;"
    } >"$PB_TMP/wave.sql"
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/wave.sql" >/dev/null || fail "writing wave $1..$2 failed"
}
t0=$(date +%s)
wave 1 5 1 "now() + interval '$D s'"
wait_until '(($(queue_count) >= 50))' 10 || fail "only $(queue_count) of the 50 events due at once arrived"
[[ $CAPTURE != cdc ]] || cdc_wait_caught_up 10
sleep 0.3
n=$(queue_count)
((n == 50)) || fail "$n events arrived, expected the 50 of the even aggregates only"
waiting=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE waiting")
deferred=$(psql_q "SELECT count(*) FROM postbox.cdc_deferred")
say "50 events of the even aggregates arrived; waiting outbox rows: $waiting, set aside (cdc): $deferred; SIGKILL"
if [[ $CAPTURE == cdc ]]; then ((deferred == 50)) || fail "expected the 50 events of the odd aggregates set aside"
else ((waiting == 50)) || fail "expected the 50 events of the odd aggregates waiting"; fi
kill_relay
start_capture_relay --set log.level=debug

wave 6 8 1
wait_until '(($(queue_count) >= 80))' 10 || fail "only $(queue_count) of the 80 events due arrived after the restart"
say "wave 2: the even aggregates' events arrived ($(queue_count) in all)"

wave 9 9 2
sleep 0.3
kill_relay
say "wave 3 (odd aggregates only) committed, relay SIGKILLed 0.3 s later; set aside (cdc): $(psql_q "SELECT count(*) FROM postbox.cdc_deferred")"
((n = $(queue_count), n == 80)) || fail "$n events arrived before the odd aggregates were due, expected 80"
start_capture_relay --set log.level=debug
total=$((N_AGG * 8 + N_AGG / 2))
dups=0

if [[ $CAPTURE == cdc ]]; then
    psql -XAtq -d "$POSTBOX_PG_DSN" -c "BEGIN" -c "LOCK TABLE postbox.outbox_published IN SHARE MODE" \
        -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null 2>&1 &
    locker=$!
    PB_PIDS+=("$locker")
    wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks WHERE relation = 'postbox.outbox_published'::regclass AND mode = 'ShareLock' AND granted\") == 1 ]]" 5 ||
        fail "the test session did not get its lock"
    before=$(psql_q "SELECT count(*) FROM postbox.cdc_deferred")
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f - >/dev/null <<<"BEGIN;
        $(ev agg-2 10)
        $(for ((a = 1; a <= N_AGG; a += 2)); do ev "agg-$a" 10; done)
        COMMIT;" || fail "writing wave 4 failed"
    lsn=$(psql_q "SELECT pg_current_wal_lsn()")
    wait_until '(($(queue_count) >= 81))' 10 || fail "agg-2's seq 10 did not arrive"
    wait_until "((\$(psql_q 'SELECT count(*) FROM postbox.cdc_deferred') >= before + 10))" 10 ||
        fail "the odd aggregates' seq 10 was not set aside"
    confirmed=$(slot_confirmed_lsn)
    lsn_le "$lsn" "$confirmed" && fail "the slot's position $confirmed passed $lsn although a mark could not be written"
    kill_relay
    say "wave 4: set aside while the slot stays at $confirmed (before $lsn); SIGKILL"
    wait "$locker" 2>/dev/null || true
    mark=$(wc -l <"$PB_RELAY_LOG")
    start_capture_relay --set log.level=debug
    total=$((total + 1 + N_AGG / 2))
    dups=1 # agg-2's seq 10, published again after the restart
fi
(($(date +%s) < t0 + D - 1)) || fail "the test ran too slowly: the delayed events came due before the kills were done"

if ((dups == 0)); then
    drain_exactly_once "$PB_TMP/got" "$total" 60
else
    drain_queue "$PB_TMP/got" $((total + dups)) 2000 60
    stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
    say "$stats"
    check_all_arrived "$PB_TMP/got"
    again=$(cut -f1 "$PB_TMP/got" | sort | uniq -d)
    [[ $again == "$(psql_q "SELECT event_id FROM sent WHERE agg = 'agg-2' AND seq = 10")" ]] ||
        fail "expected agg-2's seq 10 published twice and nothing else, got: $again"
    n=$(psql_q "SELECT count(*) FROM postbox.cdc_deferred")
    ((n == 0)) || fail "$n row(s) left in postbox.cdc_deferred"
    # the restarted relay met wave 4 again and found its events set aside already
    again=$(tail -n +"$mark" "$PB_RELAY_LOG" | grep -o 'set 10 event(s) aside until due ([0-9]* new)' | head -1)
    [[ $again == *"(0 new)" ]] || fail "the restarted relay did not meet wave 4's events set aside already: '$again'"
    say "after the restart: $again"
fi
# the odd aggregates' first event went no earlier than T0 + D: after every even one
first_odd=$(awk -F'\t' '$5 ~ /^agg-[0-9]*[13579]$/ {print NR; exit}' "$PB_TMP/got")
last_even=$(awk -F'\t' '$5 ~ /^agg-[0-9]*[02468]$/ {n = NR} END {print n}' "$PB_TMP/got")
((first_odd > last_even)) || fail "an event of an odd aggregate arrived at position $first_odd, before the even aggregates' last one ($last_even)"
if [[ $CAPTURE == cdc ]]; then
    check_cdc_marked
    [[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") == 0 ]] || fail "rows left in postbox.cdc_deferred"
else
    [[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "outbox rows left pending"
fi
say "after the SIGKILLs while events were delayed: all $total published, each aggregate in order"
