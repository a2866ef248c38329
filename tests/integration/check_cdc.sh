#!/usr/bin/env bash
# postbox check for the cdc capture, as the least-privilege relay role: each problem made on
# purpose, one at a time, is found, and the check passes once it is mended (what the shared
# server cannot be made to show, wal_level and a lost slot, is unit-tested in test_check):
#   healthy: exit 0 while the relay streams the slot; an inactive slot is a warning (exit 0,
#   exit 1 with --strict);
#   the slot behind the current WAL position by more than cdc.max_slot_lag; the slot dropped
#   (cdc.create_slot = false: a problem; true: a warning); REPLICA IDENTITY FULL and NOTHING;
#   a publication without postbox.outbox; a login role without the REPLICATION attribute;
#   the relay's start-up check warns about REPLICA IDENTITY FULL and the relay still relays.
source "$(dirname "$0")/lib.sh"

pb_init
use_least_privilege --set relay.capture=cdc
setup_queue '#'
cdc_use_slot
cdc_create_slot
CDC=(--set relay.capture=cdc)

CHECK_RC=0
# run_check NAME [GLOBAL OPTIONS...]: postbox check --relay for the cdc relay as pb_it_relay
run_check() {
    local name=$1
    shift
    CHECK_RC=0
    timeout 60 "$POSTBOX_BIN" --dsn "$PB_RELAY_DSN" "${CDC[@]}" "$@" check --relay \
        >"$PB_TMP/$name.out" 2>"$PB_TMP/$name.err" || CHECK_RC=$?
    ((CHECK_RC != 124)) || fail "($name) postbox check did not finish within 60 s"
}
# expect_line NAME STATUS RC CHECK PATTERN: the run exited RC with a STATUS line of CHECK
# matching PATTERN (and a hint after it)
expect_line() {
    local name=$1 status=$2 rc=$3 check=$4 pattern=$5 line
    ((CHECK_RC == rc)) || { cat "$PB_TMP/$name.out" >&2; fail "($name) exit $CHECK_RC, expected $rc"; }
    line=$(grep -E "^$status $check: " "$PB_TMP/$name.out" | head -1)
    [[ -n $line ]] || { cat "$PB_TMP/$name.out" >&2; fail "($name) no $status line of $check"; }
    grep -Eq -- "$pattern" <<<"$line" || fail "($name) the line does not match /$pattern/: $line"
    grep -A1 -F -- "$line" "$PB_TMP/$name.out" | grep -q '^     hint: ' || fail "($name) no hint after: $line"
    say "($name) exit $CHECK_RC: $line"
}
expect_healthy() {
    ((CHECK_RC == 0)) || { cat "$PB_TMP/$1.out" >&2; fail "($1) exit $CHECK_RC, expected 0"; }
    ! grep -q '^\(FAIL\|WARN\)' "$PB_TMP/$1.out" || fail "($1) problems: $(cat "$PB_TMP/$1.out")"
    say "($1) exit 0: $(tail -1 "$PB_TMP/$1.out")"
}

# ---- healthy, then the slot inactive ---------------------------------------------------------------
start_cdc_relay
run_check streaming
expect_healthy streaming
"$POSTBOX_BIN" --dsn "$PB_RELAY_DSN" "${CDC[@]}" check --relay --json >"$PB_TMP/streaming.json" ||
    fail "(streaming) --json: exit $?"
jq -e --arg slot "$POSTBOX_CDC_SLOT" '.ok and any(.checks[]; .check == "cdc.slot" and .status == "ok"
        and (.message | contains("\"" + $slot + "\": streamed")))
    and ([.checks[].check] | contains(["cdc.wal_level", "cdc.replication_slots", "cdc.wal_senders",
                                        "cdc.publication", "cdc.replica_identity", "privileges.replication"]))' \
    "$PB_TMP/streaming.json" >/dev/null || fail "(streaming) unexpected JSON: $(cat "$PB_TMP/streaming.json")"
stop_relay
run_check inactive
expect_line inactive WARN 0 cdc.slot "replication slot \"$POSTBOX_CDC_SLOT\" is inactive: no relay streams it"
CHECK_RC=0
"$POSTBOX_BIN" --dsn "$PB_RELAY_DSN" "${CDC[@]}" check --relay --strict >/dev/null 2>&1 || CHECK_RC=$?
((CHECK_RC == 1)) || fail "(inactive-strict) --strict with a warning: exit $CHECK_RC, expected 1"

# ---- the slot falls behind -----------------------------------------------------------------------
enqueue_seq 5 1 20
run_check lag --set cdc.max_slot_lag=1024
expect_line lag FAIL 1 cdc.slot "replication slot \"$POSTBOX_CDC_SLOT\" is .* behind the current WAL position, more than cdc.max_slot_lag 1.0 KiB \\(no relay streams it\\)"
start_cdc_relay
cdc_wait_caught_up 60
run_check caught-up # the default cdc.max_slot_lag (1 GiB): other databases of the shared server write WAL too
expect_healthy caught-up
stop_relay

# ---- REPLICA IDENTITY -----------------------------------------------------------------------------
psql_q "ALTER TABLE postbox.outbox REPLICA IDENTITY FULL"
run_check identity-full
expect_line identity-full FAIL 1 cdc.replica_identity 'postbox.outbox has REPLICA IDENTITY FULL'
# the relay's start-up check says so too, and the relay works
enqueue_seq 2 21 22
: >"$PB_RELAY_LOG"
start_cdc_relay
grep -q 'warn  relay: start-up check: postbox.outbox has REPLICA IDENTITY FULL' "$PB_RELAY_LOG" ||
    fail "(start-up) no warning about REPLICA IDENTITY FULL: $(head -5 "$PB_RELAY_LOG")"
cdc_wait_caught_up 60
stop_relay
say "(start-up) $(grep -m1 'start-up check: postbox.outbox' "$PB_RELAY_LOG" | sed 's/^.*warn  //' | cut -c1-140)"
psql_q "ALTER TABLE postbox.outbox REPLICA IDENTITY NOTHING"
run_check identity-nothing
expect_line identity-nothing FAIL 1 cdc.replica_identity 'postbox.outbox has REPLICA IDENTITY NOTHING'
psql_q "ALTER TABLE postbox.outbox REPLICA IDENTITY DEFAULT"

# ---- the publication without the outbox ----------------------------------------------------------
psql_q "ALTER PUBLICATION postbox_outbox DROP TABLE postbox.outbox"
run_check publication
expect_line publication FAIL 1 cdc.publication 'publication "postbox_outbox" does not include postbox.outbox'
psql_q "ALTER PUBLICATION postbox_outbox ADD TABLE postbox.outbox"

# ---- a login role without REPLICATION ------------------------------------------------------------
psql_q "DO \$\$ BEGIN CREATE ROLE pb_it_check_norepl LOGIN NOREPLICATION;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END \$\$;
        ALTER ROLE pb_it_check_norepl NOREPLICATION; GRANT postbox_relay TO pb_it_check_norepl" >/dev/null
CHECK_RC=0
timeout 60 "$POSTBOX_BIN" --dsn "${POSTBOX_PG_DSN/postgres@/pb_it_check_norepl@}" "${CDC[@]}" check --relay \
    >"$PB_TMP/norepl.out" 2>&1 || CHECK_RC=$?
expect_line norepl FAIL 1 privileges.replication 'role "pb_it_check_norepl" lacks the REPLICATION attribute'

# ---- the slot dropped ----------------------------------------------------------------------------
cdc_drop_slot "$POSTBOX_CDC_SLOT" || fail "cannot drop the slot"
run_check gone
expect_line gone FAIL 1 cdc.slot_position "replication slot \"$POSTBOX_CDC_SLOT\" is gone"
# dropped on purpose, as `postbox cdc drop-slot` does it: the relay's recorded position goes too
psql_q "DELETE FROM postbox.cdc_slot_positions WHERE slot_name = '$POSTBOX_CDC_SLOT'" >/dev/null
run_check no-slot --set cdc.create_slot=false
expect_line no-slot FAIL 1 cdc.slot "replication slot \"$POSTBOX_CDC_SLOT\" does not exist, and cdc.create_slot = false"
run_check no-slot-created
expect_line no-slot-created WARN 0 cdc.slot "replication slot \"$POSTBOX_CDC_SLOT\" does not exist yet: the relay creates it"
cdc_create_slot
run_check mended
expect_line mended WARN 0 cdc.slot 'is inactive' # and nothing else
(($(grep -c '^\(FAIL\|WARN\)' "$PB_TMP/mended.out") == 1)) || fail "(mended) more than the inactive slot: $(cat "$PB_TMP/mended.out")"
