#!/usr/bin/env bash
# A lost or replaced replication slot stops the cdc relay, never skips silently. The relay
# records the position it confirms (postbox.cdc_slot_positions) before the server hears it:
#  - the slot dropped under the running relay: the relay stops, naming the slot, and does not
#    create a new one (which would start past the events committed meanwhile);
#  - the same at start (the slot missing, a position recorded);
#  - the slot dropped and created again under the running relay, and at start: past the
#    recorded position, the relay stops;
#  - the way out the error names: `relay --capture poll --drain` relays the outbox rows
#    committed while the slot was gone, `postbox cdc drop-slot` forgets the position, and a new
#    cdc relay creates its slot and streams.
# (wal_status = lost: cdc_slot_lost.sh; the decision itself: tests/unit/test_slot_check.c.)
source "$(dirname "$0")/lib.sh"

slot_exists() { [[ $(psql -XAtq -d "$PB_ADMIN_DSN" -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'") == 1 ]]; }
recorded_lsn() { psql_q "SELECT confirmed_lsn FROM postbox.cdc_slot_positions WHERE slot_name = '$POSTBOX_CDC_SLOT'"; }

# replace_slot_under_relay RECREATE: with the relay paused (SIGSTOP: it would reconnect within
# milliseconds and win the slot back), ends its walsender and drops the slot, with RECREATE 1
# creates it again (in the test's database: a logical slot belongs to one), then lets the relay
# go on: it finds its stream broken and reconnects.
replace_slot_under_relay() {
    kill -STOP "$RELAY_PID"
    local recreate=''
    (($1)) && recreate="SELECT pg_create_logical_replication_slot('$POSTBOX_CDC_SLOT', 'pgoutput');"
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" >/dev/null <<SQL || fail "could not drop (and create again) the slot under the relay"
SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots
 WHERE slot_name = '$POSTBOX_CDC_SLOT' AND active_pid IS NOT NULL;
SELECT pg_drop_replication_slot('$POSTBOX_CDC_SLOT');
$recreate
SQL
    kill -CONT "$RELAY_PID"
}

# expect_stop TEXT WHAT: the relay exits non-zero within 30 s, its log naming the slot and TEXT.
expect_stop() {
    wait_relay 30
    ((RELAY_RC != 0)) || fail "$2: the relay exited 0"
    local line
    line=$(grep -F "replication slot \"$POSTBOX_CDC_SLOT\"" "$PB_RELAY_LOG" | grep -F "$1" | tail -n 1 || true)
    [[ -n $line ]] || fail "$2: the relay's log does not say replication slot \"$POSTBOX_CDC_SLOT\" ... $1: $(tail -n 5 "$PB_RELAY_LOG")"
    [[ $line == *"postbox relay --capture poll --drain"* && $line == *"postbox cdc drop-slot"* ]] ||
        fail "$2: the error does not say what to do: $line"
    say "$2: the relay stopped (exit $RELAY_RC): ${line:0:200}..."
}

pb_init
setup_queue '#'
cdc_use_slot
start_cdc_relay
enqueue_seq 3 1 10
cdc_wait_caught_up 30
wait_until '(($(queue_count) >= 30))' 30 || fail "only $(queue_count) of 30 events arrived"
# the slot's position first: the relay records a position before it confirms it (and an idle
# relay confirms the WAL that other databases write), so the record read after is never behind
confirmed=$(slot_confirmed_lsn)
recorded=$(recorded_lsn)
[[ -n $recorded ]] || fail "no position recorded in postbox.cdc_slot_positions"
lsn_le "$confirmed" "$recorded" || fail "the slot confirmed $confirmed, past the recorded $recorded"
say "recorded position $recorded, slot confirmed $confirmed"

# 1. dropped under the running relay
replace_slot_under_relay 0
enqueue_seq 3 11 15 # committed while the slot is gone: never in any stream
expect_stop "is gone" "slot dropped under the relay"
slot_exists && fail "the relay created a new slot after its slot was dropped (it would skip what it missed)"

# 2. at start, the slot missing with a position recorded
start_relay --capture cdc
expect_stop "is gone" "slot missing at start"
slot_exists && fail "the relay created a new slot at start although a position was recorded"

# the way out: the pending rows by poll, forget the slot, a new cdc relay
relay_drain 60 --capture poll
wait_until '(($(queue_count) >= 45))' 30 || fail "only $(queue_count) of 45 events arrived after the poll drain"
out=$("$POSTBOX_BIN" cdc drop-slot 2>&1) || fail "cdc drop-slot failed: $out"
[[ -z $(recorded_lsn) ]] || fail "cdc drop-slot left the recorded position"
start_cdc_relay
enqueue_seq 3 16 20
cdc_wait_caught_up 30
wait_until '(($(queue_count) >= 60))' 30 || fail "only $(queue_count) of 60 events arrived after the new slot"
say "recovered: poll drain relayed the 15 events of the gap, a new slot relays on ($(queue_count) messages)"

# 3. dropped and created again under the running relay
replace_slot_under_relay 1
expect_stop "is past the relay's last position" "slot created again under the relay"

# 4. at start: the new slot is still past the recorded position
start_relay --capture cdc
expect_stop "is past the relay's last position" "replaced slot at start"

got=$(queue_count)
((got == 60)) || fail "$got messages in the queue, expected 60"
say "ok: a dropped or replaced slot stopped the relay each time, nothing skipped silently"
