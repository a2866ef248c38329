#!/usr/bin/env bash
# cdc capture, a large streamed transaction (pgoutput protocol 2) and SIGKILLs of the relay, on
# a PostgreSQL of the test's own with logical_decoding_work_mem = 64kB, relaying to NATS
# JetStream (Nats-Msg-Id: the stream drops what a restarted relay sends again):
# 1. killed while the transaction (PB_KILL_ROWS rows, default 40,000) is open and streaming to
#    it: nothing was published; restarted, the server streams the transaction again from its
#    first block and the relay holds it on disk again, still publishing nothing;
# 2. after COMMIT, killed in the middle of relaying it: the slot's confirmed position has not
#    passed the commit (it never runs ahead of the broker); restarted, the relay sends the
#    transaction again (the stream acknowledges the repeats as duplicates).
# In the end the stream holds every event exactly once, each aggregate in order, and no relay
# left a file behind in cdc.spill_dir.
source "$(dirname "$0")/lib.sh"
use_private_pg "-c logical_decoding_work_mem=64kB"
source "$(dirname "$0")/nats_lib.sh"

ROWS=${PB_KILL_ROWS:-40000}
N_AGG=40
BATCH=200
pb_init
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
export POSTBOX_CDC_SPILL_DIR=$PB_TMP/spill
mkdir -p "$POSTBOX_CDC_SPILL_DIR"
relay() { start_cdc_relay --set relay.batch_size=$BATCH; }
relay

mkfifo "$PB_TMP/sql.in"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" <"$PB_TMP/sql.in" >"$PB_TMP/sql.out" 2>&1 &
PB_PIDS+=($!)
exec 3>"$PB_TMP/sql.in"
sql() { echo "$1" >&3; }
sql_wait() { # MARK SECONDS
    wait_until "grep -qx '$1' '$PB_TMP/sql.out'" "$2" || fail "the session did not reach '$1' in $2 s: $(tail -n 3 "$PB_TMP/sql.out")"
}
spill_fds() { find "/proc/$RELAY_PID/fd" -lname '*(deleted)' 2>/dev/null | wc -l; }
spill_bytes() { find "/proc/$RELAY_PID/fd" -lname '*(deleted)' -exec stat -L -c %s {} + 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
published() { stream_count; }

# ---- 1. killed while the transaction streams ----------------------------------------------
sql "BEGIN;"
sql "SELECT count(postbox.enqueue('order', 'agg-' || (i % $N_AGG), 'created.v1', jsonb_build_object('seq', i))) FROM generate_series(1, $ROWS) i;"
sql "SELECT 'inserted';"
wait_until '(($(spill_bytes) > 0))' 120 || fail "the relay holds no spill file while the transaction streams"
held=$(spill_bytes)
kill_relay
say "kill 1: the relay held $((held / 1024)) kB of the open transaction on disk; published: $(published)"
sql_wait inserted 300
(($(published) == 0)) || fail "$(published) event(s) of an open transaction were published"
relay
wait_until '(($(spill_fds) > 0))' 60 || fail "after the restart the relay holds no spill file of the open transaction (not streamed again?)"
sleep 1
(($(published) == 0)) || fail "after the restart $(published) event(s) of an open transaction were published"
say "restarted: the open transaction streams to the relay again ($(($(spill_bytes) / 1024)) kB on disk), nothing published"

# ---- 2. killed while the committed transaction is relayed ---------------------------------
sql "SELECT 'before ' || pg_current_wal_lsn();"
sql "COMMIT;"
sql "SELECT 'committed';"
sql_wait committed 60
before_commit=$(awk '$1 == "before" { print $2 }' "$PB_TMP/sql.out")
target=$((ROWS / 3))
t0=$SECONDS
while (($(published) < target)) && pid_alive "$RELAY_PID" && ((SECONDS - t0 < 120)); do sleep 0.01; done
pid_alive "$RELAY_PID" || fail "the relay exited by itself"
kill_relay
p1=$(published)
confirmed=$(slot_confirmed_lsn)
say "kill 2: $p1 of $ROWS events published; slot confirmed at $confirmed, the commit comes after $before_commit"
((p1 < ROWS)) || fail "the relay published all $ROWS events before the kill: the kill hit nothing (lower PB_KILL_ROWS' speed?)"
lsn_le "$confirmed" "$before_commit" ||
    fail "the slot's confirmed position $confirmed passed the commit (after $before_commit) although $((ROWS - p1)) of its events were not published"
relay
cdc_wait_caught_up 300
sql "\\q"
exec 3>&-
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
[[ -z $(ls -A "$POSTBOX_CDC_SPILL_DIR") ]] || fail "files left in the spill directory: $(ls -A "$POSTBOX_CDC_SPILL_DIR")"
check_cdc_marked

drain_stream "$PB_TMP/got" "$ROWS" 1500 120
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats; the stream dropped $(relay_duplicate_acks) repeat(s) the restarted relay sent"
check_all_arrived "$PB_TMP/got"
dups=$(duplicates_in "$PB_TMP/got")
((dups == 0)) || fail "$dups duplicate(s) in the stream"
(($(wc -l <"$PB_TMP/got") == ROWS)) || fail "$(wc -l <"$PB_TMP/got") messages in the stream, expected $ROWS"
(($(relay_duplicate_acks) > 0)) || fail "the restarted relay sent nothing again: the second kill did not hit the relay in the middle of the transaction"
