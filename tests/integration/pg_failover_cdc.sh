#!/usr/bin/env bash
# Failover under the cdc capture, PostgreSQL 15 (no failover slots: they came with 17). The
# relay streams its slot on the primary through the multi-host DSN; events keep coming while the
# primary is stopped the hard way and its synchronous replica promoted. The promoted server has
# no slot, but it has the relay's recorded position (postbox.cdc_slot_positions, replicated like
# any table): the relay stops with exit 1 and the "is gone (dropped, or a failover)" error, and
# creates no slot in place of the lost one (which would skip every event committed since). The
# way back the error names: `relay --capture poll --drain` relays every committed event still
# pending (duplicates possible, nothing missing), `cdc drop-slot`, and a new cdc relay streams
# what comes next.
source "$(dirname "$0")/lib.sh"

N_AGG=4
use_pg_pair
pb_init
setup_queue '#'
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our servers, gone with them
slot_count() { psql_q "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'"; }

start_cdc_relay --set cdc.lag_interval=1s
enqueue_seq "$N_AGG" 1 50
cdc_wait_caught_up 30
wait_until '[[ -n $(psql_q "SELECT confirmed_lsn FROM postbox.cdc_slot_positions WHERE slot_name = '"'$POSTBOX_CDC_SLOT'"'") ]]' 30 ||
    fail "the relay recorded no position for its slot"

# a steady stream of small transactions while the primary dies (the producer stops at the
# first error: the outcome of the transaction in flight is unknown, and the check below takes
# whatever the new primary holds)
for ((k = 51; k <= 400; k++)); do
    echo "SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1', jsonb_build_object('seq', $k)))
            FROM generate_series(1, $N_AGG) a;"
done >"$PB_TMP/produce.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/produce.sql" >/dev/null 2>"$PB_TMP/producer.err" &
producer=$!
PB_PIDS+=("$producer")
sleep 0.5
pg_pair_kill_primary
wait "$producer" 2>/dev/null || true
pg_pair_promote
say "primary stopped (immediate) under the cdc relay, replica promoted"

wait_relay 60
((RELAY_RC != 0)) || fail "the cdc relay exited 0 after the failover"
gone="replication slot \"$POSTBOX_CDC_SLOT\" is gone (dropped, or a failover)"
grep -q "$gone" "$PB_RELAY_LOG" || fail "the cdc relay did not say its slot is gone"
say "cdc relay: exit $RELAY_RC, $(grep -m1 -o "$gone.*" "$PB_RELAY_LOG" | cut -c1-200)..."
[[ $(slot_count) == 0 ]] || fail "the relay created a slot on the new primary in place of the lost one"

# at start too: refused, no slot made
start_relay --capture cdc
wait_relay 30
((RELAY_RC != 0)) || fail "a cdc relay started on the new primary without its slot and exited 0"
(($(grep -c "$gone" "$PB_RELAY_LOG") >= 2)) || fail "at start the relay did not say its slot is gone: $(tail -n 3 "$PB_RELAY_LOG")"
[[ $(slot_count) == 0 ]] || fail "a relay started after the failover created a slot"

# the way back
pending=$(pending_count)
say "the new primary holds $(psql_q "SELECT count(*) FROM postbox.outbox_all") events, $pending still pending"
relay_drain 60 --capture poll
"$POSTBOX_BIN" cdc drop-slot >>"$PB_RELAY_LOG" 2>&1 || fail "postbox cdc drop-slot failed: $(tail -n 3 "$PB_RELAY_LOG")"
start_cdc_relay
enqueue_seq "$N_AGG" 401 420
cdc_wait_caught_up 30
stop_relay
((RELAY_RC == 0)) || fail "the new cdc relay exited with $RELAY_RC on SIGTERM"
total=$(psql_q "SELECT count(*) FROM postbox.outbox_all")
drain_queue "$PB_TMP/got" "$total" 1000 60
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
check_cdc_marked
say "pending before the drain: $pending; duplicates after the failover: $(duplicates_in "$PB_TMP/got")"
