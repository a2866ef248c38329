#!/usr/bin/env bash
# A slot invalidated by max_slot_wal_keep_size (wal_status = lost) stops the cdc relay with an
# error naming the slot, under the running relay and at start, instead of streaming on (or
# creating a slot afresh) past the events whose WAL is gone. On a PostgreSQL of the test's own
# with max_slot_wal_keep_size = 1MB: the relay, blocked on an unroutable event, cannot confirm
# while ~80 MB of WAL are written; a checkpoint then invalidates its slot. The way back the error
# names (`relay --capture poll --drain`, `cdc drop-slot`, a new cdc relay) relays the event.
source "$(dirname "$0")/lib.sh"

use_private_pg "-c max_slot_wal_keep_size=1MB"
pb_init
setup_queue none # nothing bound: the event comes back unroutable and is retried in place
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL)" >/dev/null
wal_status() { psql_q "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'"; }

start_cdc_relay --set relay.backoff_base=200ms --set relay.backoff_cap=500ms --set relay.max_attempts=100000 \
    --set cdc.lag_interval=1s
enqueue_seq 1 1 1
wait_until 'grep -q "unroutable" "$PB_RELAY_LOG"' 30 || fail "the event was never refused by the broker"
recorded=$(psql_q "SELECT confirmed_lsn FROM postbox.cdc_slot_positions WHERE slot_name = '$POSTBOX_CDC_SLOT'")
[[ -n $recorded ]] || fail "no position recorded for the slot"
for i in 1 2 3 4 5; do
    psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 100000) g; SELECT pg_switch_wal();" >/dev/null
done
psql_q "CHECKPOINT" >/dev/null
wait_until '[[ $(wal_status) == lost ]]' 30 || fail "the slot was not invalidated (wal_status $(wal_status))"
say "slot invalidated: wal_status lost, relay's recorded position $recorded"

wait_relay 30
((RELAY_RC != 0)) || fail "the relay exited 0 under a lost slot"
grep -q "replication slot \"$POSTBOX_CDC_SLOT\" is lost (wal_status = lost" "$PB_RELAY_LOG" ||
    fail "the relay's log does not say the slot is lost"
say "under the relay: exit $RELAY_RC, $(grep -m1 'is lost (wal_status' "$PB_RELAY_LOG" | cut -c1-200)..."

start_relay --capture cdc
wait_relay 30
((RELAY_RC != 0)) || fail "the relay started on a lost slot and exited 0"
(($(grep -c "replication slot \"$POSTBOX_CDC_SLOT\" is lost" "$PB_RELAY_LOG") >= 2)) ||
    fail "at start the relay did not say the slot is lost: $(tail -n 3 "$PB_RELAY_LOG")"
[[ $(wal_status) == lost ]] || fail "the lost slot was replaced at start (wal_status $(wal_status))"
say "at start: exit $RELAY_RC, the slot left as it is"

# the way back
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
relay_drain 60 --capture poll
wait_until '(($(queue_count) >= 1))' 30 || fail "the poll drain did not relay the pending event"
out=$("$POSTBOX_BIN" cdc drop-slot 2>&1) || fail "cdc drop-slot failed: $out"
start_cdc_relay
enqueue_seq 1 2 2
wait_until '(($(queue_count) >= 2))' 30 || fail "the new slot did not relay the next event"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
say "ok: a lost slot stopped the relay under it and at start; poll drain + drop-slot + a new slot recovered"
