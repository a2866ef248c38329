#!/usr/bin/env bash
# cdc.on_excess_lag = poll and a lost slot: the relay recovers from the outbox rows instead of
# stopping. On a PostgreSQL of the test's own with max_slot_wal_keep_size = 1MB, the relay,
# blocked on an unroutable event retried in place, cannot confirm while ~80 MB of WAL are written;
# a checkpoint invalidates its slot (wal_status = lost). Under the relay, in the middle of the
# retries, that still stops it (nothing can switch while a batch is out). Started again, it says
# the slot is lost, falls back to polling (dropping the lost slot), publishes the rows the slot
# skipped, and returns to cdc on a new slot. Events of 10 aggregates written before and after:
# every one arrives, first occurrences in each aggregate's order.
source "$(dirname "$0")/lib.sh"

use_private_pg "-c max_slot_wal_keep_size=1MB"
pb_init
setup_queue none # nothing bound: the event comes back unroutable and is retried in place
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL)" >/dev/null
wal_status() { psql_q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'"; }
ARGS=(--set cdc.on_excess_lag=poll --set cdc.max_slot_lag=100GB --set cdc.lag_interval=1s
    --set relay.backoff_base=200ms --set relay.backoff_cap=500ms --set relay.max_attempts=100000)

start_cdc_relay "${ARGS[@]}"
enqueue_seq 10 1 1
wait_until 'grep -q "unroutable" "$PB_RELAY_LOG"' 30 || fail "the event was never refused by the broker"
enqueue_seq 10 2 20 # behind the blocked one in the stream
for i in 1 2 3 4 5; do
    psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 100000) g; SELECT pg_switch_wal();" >/dev/null
done
psql_q "CHECKPOINT" >/dev/null
wait_until '[[ $(wal_status) == lost ]]' 30 || fail "the slot was not invalidated (wal_status $(wal_status))"
say "slot invalidated: wal_status lost"
wait_relay 30
((RELAY_RC != 0)) || fail "the relay exited 0 under a lost slot"
grep -q "replication slot \"$POSTBOX_CDC_SLOT\" is lost (wal_status = lost" "$PB_RELAY_LOG" ||
    fail "the relay's log does not say the slot is lost"
say "under the relay, retrying in place: exit $RELAY_RC"

amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
enqueue_seq 10 21 30 # while no relay runs
t_start=$(date +%s%N)
start_relay --capture cdc "${ARGS[@]}"
wait_until 'grep -q "capture poll active .*replication slot missing, lost or replaced" "$PB_RELAY_LOG"' 30 ||
    fail "the relay did not fall back on the lost slot"
fell_ms=$((($(date +%s%N) - t_start) / 1000000))
(($(grep -c "is lost (wal_status = lost" "$PB_RELAY_LOG") >= 2)) || fail "at start the relay did not say the slot is lost"
wait_until 'grep -q "capture cdc active again" "$PB_RELAY_LOG"' 60 || fail "the relay never returned to cdc"
back_ms=$((($(date +%s%N) - t_start) / 1000000))
wait_until '(($(grep -c "streaming slot" "$PB_RELAY_LOG") >= 2))' 30 || fail "the relay does not stream the new slot"
[[ $(wal_status) != lost ]] || fail "the slot is still the lost one"
enqueue_seq 10 31 40 # through the new slot
wait_until '(($(pending_count) == 0))' 60 || fail "$(pending_count) event(s) still pending"
cdc_wait_caught_up 30
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
drain_queue "$PB_TMP/got" 400
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
check_cdc_marked
say "FIGURES restart_to_fallback_ms=$fell_ms restart_to_cdc_again_ms=$back_ms events=$(psql_q "SELECT count(*) FROM postbox.outbox_all") duplicates=$(duplicates_in "$PB_TMP/got")"
say "ok: the lost slot was given up for polling, its skipped rows published, and a new slot streams"
