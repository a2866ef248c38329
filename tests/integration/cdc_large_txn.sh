#!/usr/bin/env bash
# cdc capture, large transactions (pgoutput protocol 2, streaming of in-progress transactions).
# On a PostgreSQL of the test's own with logical_decoding_work_mem = 64kB, so that transactions
# past 64 kB stream while they run:
# 1. One transaction of PB_LARGE_ROWS (default 60,000; 1,000,000 by hand, with
#    PB_LARGE_PRODUCE=insert: plain INSERTs instead of postbox.enqueue, and PB_LARGE_AGGS=100000
#    aggregates instead of 50: each row updates its aggregate's row in postbox.aggregate_sequences,
#    and one transaction's chain of versions of one row slows every update down) outbox rows with a
#    payload pad of PB_LARGE_PAD bytes (default 1000), written while the relay streams the slot:
#    the server streams it while it is open (pg_stat_replication_slots.stream_txns) and the relay
#    holds it in a spill file (an unlinked file among its descriptors) while nothing of it is
#    published; after COMMIT every event arrives once, per aggregate in order. Reported: the
#    time from COMMIT to the first event in Redis and to the last, and the relay's peak RSS
#    (VmHWM), which must stay within PB_LARGE_RSS_MB (default 16) of its RSS before the
#    transaction (~10 MB; ~29 MB under AddressSanitizer): the default transaction's payloads
#    alone are over 60 MB, and held in memory as decoded events they would take more.
# A cdc.spill_dir where no file can be created stops the relay at start with an error naming it.
# 2. A streamed transaction that aborts publishes nothing; in a committed streamed transaction,
#    rolled-back savepoints (one, one nested in a released one, and one holding a released
#    child) drop only their events. What arrives is exactly the committed outbox rows.
source "$(dirname "$0")/lib.sh"
use_private_pg "-c logical_decoding_work_mem=64kB"
source "$(dirname "$0")/redis_lib.sh"

ROWS=${PB_LARGE_ROWS:-60000}
PAD=${PB_LARGE_PAD:-1000}
RSS_MB=${PB_LARGE_RSS_MB:-16}
N_AGG=${PB_LARGE_AGGS:-50}
pb_init
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
SPILL_DIR=$PB_TMP/spill
mkdir -p "$SPILL_DIR"
# a spill directory that cannot take a file: an error naming it at start, not at the first
# large transaction
rc=0
POSTBOX_CDC_SPILL_DIR=$PB_TMP/missing "$POSTBOX_BIN" --dsn "$POSTBOX_PG_DSN" relay --capture cdc \
    >"$PB_TMP/bad.out" 2>&1 || rc=$?
((rc != 0)) && grep -q "cannot create a spill file .*\"$PB_TMP/missing\" (cdc.spill_dir)" "$PB_TMP/bad.out" ||
    fail "a missing cdc.spill_dir: exit $rc, $(cat "$PB_TMP/bad.out")"
say "a missing cdc.spill_dir: exit $rc, $(grep -o 'cannot create.*' "$PB_TMP/bad.out")"
export POSTBOX_CDC_SPILL_DIR=$SPILL_DIR
# under AddressSanitizer freed blocks wait in a quarantine (256 MiB by default) before their
# memory is reused, which would count in the RSS measured here
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0
start_cdc_relay --set log.level=info
sleep 0.5
idle_kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$RELAY_PID/status")

# A psql session of the test's own, fed line by line, so a transaction stays open between steps.
mkfifo "$PB_TMP/sql.in"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" <"$PB_TMP/sql.in" >"$PB_TMP/sql.out" 2>&1 &
SQL_PID=$!
PB_PIDS+=("$SQL_PID")
exec 3>"$PB_TMP/sql.in"
sql() { echo "$1" >&3; }
sql_wait() { # MARK SECONDS: waits until the session printed MARK
    wait_until "grep -qx '$1' '$PB_TMP/sql.out'" "$2" || fail "the session did not reach '$1' in $2 s: $(tail -n 3 "$PB_TMP/sql.out")"
}
redis_total() {
    local s n=0
    for s in $(redis_streams); do n=$((n + $(stream_len "$s"))); done
    echo "$n"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
spill_fds() { find "/proc/$RELAY_PID/fd" -lname '*(deleted)' 2>/dev/null | wc -l; }
streamed_txns() { psql_q "SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'"; }

# ---- 1. one large transaction -------------------------------------------------------------
sql "BEGIN;"
t0=$(now_ms)
if [[ ${PB_LARGE_PRODUCE:-enqueue} == enqueue ]]; then
    sql "SELECT count(postbox.enqueue('order', 'agg-' || (i % $N_AGG), 'created.v1', jsonb_build_object('seq', i, 'pad', repeat('x', $PAD)))) FROM generate_series(1, $ROWS) i;"
else # plain INSERTs (1,000,000 by hand)
    sql "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', 'agg-' || (i % $N_AGG), 'created.v1', jsonb_build_object('seq', i, 'pad', repeat('x', $PAD)) FROM generate_series(1, $ROWS) i;"
fi
sql "SELECT 'inserted';"
sql_wait inserted 600
say "inserted $ROWS rows in one open transaction in $(($(now_ms) - t0)) ms"
# the server streams the transaction while it is open; the relay holds it on disk
wait_until '(($(streamed_txns) > 0))' 30 || fail "the server streamed nothing of the open $ROWS-row transaction to the relay (pg_stat_replication_slots.stream_txns = $(streamed_txns))"
grep -q 'pgoutput protocol 2' "$PB_RELAY_LOG" || fail "the relay did not ask for protocol 2 with streaming: $(grep 'streaming slot' "$PB_RELAY_LOG")"
wait_until '(($(spill_fds) > 0))' 30 || fail "the relay holds no spill file while a $ROWS-row transaction is open"
sleep 1
published=$(redis_total)
((published == 0)) || fail "$published event(s) of an uncommitted transaction were published"
spill_bytes=$(find "/proc/$RELAY_PID/fd" -lname '*(deleted)' -exec stat -L -c %s {} + | awk '{ s += $1 } END { print s + 0 }')
((spill_bytes > 0)) || fail "the relay's spill file is empty while the transaction is open"
say "before COMMIT: nothing published; the relay's spill file holds $((spill_bytes / 1024)) kB (still growing as the stream comes in); spill directory entries: $(ls -A "$SPILL_DIR" | wc -l)"
[[ -z $(ls -A "$SPILL_DIR") ]] || fail "the spill directory shows named files: $(ls -A "$SPILL_DIR")"
# the clock (ms) right before COMMIT and right after it returns; Redis stamps each entry's id with
# the time (ms) it appended it: the delays without polling errors. The server sends the Stream
# Commit once the commit record is flushed, before COMMIT returns: the first event can come before
# the second reading, so the delay is reported from the first (an upper bound) and the second.
sql "SELECT 'before ' || (extract(epoch FROM clock_timestamp()) * 1000)::bigint;"
sql "COMMIT;"
sql "SELECT 'committed ' || (extract(epoch FROM clock_timestamp()) * 1000)::bigint;"
wait_until "grep -q '^committed ' '$PB_TMP/sql.out'" 60 || fail "COMMIT did not return in 60 s: $(tail -n 3 "$PB_TMP/sql.out")"
t_commit=$(awk '$1 == "committed" { print $2 }' "$PB_TMP/sql.out")
t_before=$(awk '$1 == "before" { print $2 }' "$PB_TMP/sql.out")
wait_until '(($(redis_total) >= ROWS))' 600 || fail "only $(redis_total) of $ROWS events published within 600 s of the COMMIT"
stream=$(redis_streams)
t_first=$(redis_cli XRANGE "$stream" - + COUNT 1 | head -n 1)
t_last=$(redis_cli XREVRANGE "$stream" + - COUNT 1 | head -n 1)
t_first=${t_first%-*} t_last=${t_last%-*}
cdc_wait_caught_up 120
streamed=$(streamed_txns)
grep -q "streamed transaction [0-9]* committed: relaying its $ROWS event(s)" "$PB_RELAY_LOG" ||
    fail "the relay did not relay the transaction's $ROWS events from its spill file: $(grep 'streamed transaction' "$PB_RELAY_LOG" | tail -n 3)"
hwm_kb=$(awk '/^VmHWM/ { print $2 }' "/proc/$RELAY_PID/status")
say "relay: $(grep -o 'streamed transaction [0-9]* committed: .*' "$PB_RELAY_LOG" | tail -n 1)"
say "FIGURES rows=$ROWS commit_to_first_publish_ms=$((t_first - t_before)) (after COMMIT returned: $((t_first - t_commit))) commit_to_last_publish_ms=$((t_last - t_before)) relay_peak_rss_kb=$hwm_kb (idle: $idle_kb) streamed_txns=$streamed"
spill_fds_after=$(spill_fds)
((spill_fds_after == 0)) || fail "the relay still holds $spill_fds_after spill file(s) after the commit was relayed"
((hwm_kb < idle_kb + RSS_MB * 1024)) || fail "the relay's peak RSS ${hwm_kb} kB is more than $RSS_MB MB over its RSS before the transaction (${idle_kb} kB)"
check_cdc_marked
drain_redis "$PB_TMP/got" "$ROWS"
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
dups=$(duplicates_in "$PB_TMP/got")
((dups == 0)) || fail "$dups duplicate(s) although nothing crashed"

# ---- 2. aborts and rolled-back savepoints in streamed transactions ------------------------------
redis_clear
before_streamed=$(streamed_txns)
CHUNK=3000
chunk() { # TAG FROM: CHUNK events of aggregate ab-TAG, seq FROM.., kind TAG (far past 64 kB)
    echo "SELECT count(postbox.enqueue('ab', 'ab-$1', 'ab.v1', jsonb_build_object('seq', $2 + i, 'kind', '$1', 'pad', repeat('y', 100)))) FROM generate_series(0, $((CHUNK - 1))) i;"
}
sql "BEGIN;"
sql "$(chunk aborted 0)"
sql "$(chunk aborted $CHUNK)"
sql "ROLLBACK;"
sql "BEGIN;"
sql "$(chunk keep 0)"                 # the transaction's own
sql "SAVEPOINT s1;"
sql "$(chunk drop 0)"                 # rolled back
sql "ROLLBACK TO SAVEPOINT s1;"
sql "$(chunk keep $CHUNK)"
sql "SAVEPOINT a;"
sql "$(chunk keep $((2 * CHUNK)))"    # kept: a is released
sql "SAVEPOINT b;"
sql "$(chunk drop $CHUNK)"            # b, nested in a, rolled back
sql "ROLLBACK TO SAVEPOINT b;"
sql "RELEASE SAVEPOINT a;"
sql "SAVEPOINT c;"
sql "$(chunk drop $((2 * CHUNK)))"    # c ...
sql "SAVEPOINT d;"
sql "$(chunk drop $((3 * CHUNK)))"    # ... and its released child d, rolled back with c
sql "RELEASE SAVEPOINT d;"
sql "ROLLBACK TO SAVEPOINT c;"
sql "$(chunk keep $((3 * CHUNK)))"
sql "COMMIT;"
sql "SELECT 'part2';"
sql_wait part2 300
cdc_wait_caught_up 120
sleep 1 # anything extra would arrive now
streamed=$(($(streamed_txns) - before_streamed))
((streamed >= 2)) || fail "the server streamed $streamed of the 2 transactions: the test tested nothing"
drain_redis "$PB_TMP/got2"
got=$(wc -l <"$PB_TMP/got2")
kinds=$(cut -f6 "$PB_TMP/got2" | grep -o '"kind": "[a-z]*"' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
say "streamed transactions: $streamed; arrived: $got events ($kinds)"
((got == 4 * CHUNK)) || fail "$got events arrived, expected the $((4 * CHUNK)) kept ones ($kinds)"
! grep -q '"kind": "\(aborted\|drop\)"' "$PB_TMP/got2" || fail "events of an aborted transaction or a rolled-back savepoint were published ($kinds)"
stats=$(check_order "$PB_TMP/got2") || fail "per-aggregate order broken: $stats"
n_keep=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE aggregate_type = 'ab'")
((n_keep == 4 * CHUNK)) || fail "the outbox holds $n_keep committed ab rows, expected $((4 * CHUNK))"
sql "\\q"
exec 3>&-
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
