#!/usr/bin/env bash
# NATS JetStream sink: N events relayed to a stream, which holds exactly N messages even though
# the relay was killed between publishing a batch and committing it (the restarted relay
# publishes the same events again and JetStream drops them by Nats-Msg-Id).
#
# The crash point is forced deterministically: a statement trigger on postbox.outbox makes every
# DELETE (the relay moving published rows to the history, after the broker's acks; the claim's
# own UPDATEs, which wake and set aside events waiting for a retry, must go on) wait for an
# advisory lock that this test holds. The relay publishes its first batches, acks arrive, and it blocks before
# its commit; the test sees the messages in the stream while no row is marked, kills the relay
# with SIGKILL, releases the lock, drops the trigger and lets a new relay drain the outbox.
# Checked: stream count == N, nothing pending, the restarted relay's log reports as many
# duplicate acks as messages were in the stream at the kill, per-aggregate order, and every
# header (event_type, aggregate_type/id, the event's own headers) on the messages.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

N_AGG=40 PER_AGG=100 BATCH=250 LOCK_KEY=4242
total=$((N_AGG * PER_AGG))
pb_init
enqueue_seq $N_AGG 1 $PER_AGG
psql_q "SELECT postbox.enqueue('order', 'agg-h', 'headers.v1', '{\"seq\": 1}',
                               '{\"trace\": \"t-1\", \"n\": 5, \"nested\": {\"a\": [1, 2]}}')" >/dev/null
total=$((total + 1))
[[ $(psql_q 'SELECT count(*) FROM postbox.outbox_all') == "$total" ]] || fail "enqueue failed"

# the lock holder: a session of its own, found again by application_name
HOLDER_APP=pb_nats_relay_lock
release_lock() {
    psql_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '$HOLDER_APP'" >/dev/null
}
on_exit release_lock
PGAPPNAME=$HOLDER_APP psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT pg_advisory_lock($LOCK_KEY)" \
    -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
PB_PIDS+=($!)
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $LOCK_KEY AND granted\") == 1 ]]" 10 ||
    fail "the lock holder did not get advisory lock $LOCK_KEY"
psql_q "CREATE FUNCTION public.hold_updates() RETURNS trigger LANGUAGE plpgsql AS \$\$
          BEGIN PERFORM pg_advisory_xact_lock_shared($LOCK_KEY); RETURN NULL; END \$\$;
        CREATE TRIGGER hold_updates BEFORE DELETE ON postbox.outbox
          FOR EACH STATEMENT EXECUTE FUNCTION public.hold_updates();"

start_relay --set relay.batch_size=$BATCH
wait_until '(( $(stream_count 2>/dev/null || echo 0) >= BATCH ))' 30 ||
    fail "no batch reached the stream (stream holds $(stream_count 2>/dev/null || echo none))"
sleep 1 # let the relay publish what it can before it blocks
at_kill=$(stream_count)
marked=$(published_count)
pid_alive "$RELAY_PID" || fail "the relay exited while blocked"
kill_relay
say "SIGKILL while blocked before its commit: $at_kill message(s) in the stream, $marked row(s) marked published"
((marked == 0)) || fail "rows were marked published although every DELETE was blocked"
((at_kill > 0 && at_kill < total)) || fail "expected some but not all events in the stream at the kill, got $at_kill"

release_lock
psql_q "DROP TRIGGER hold_updates ON postbox.outbox; DROP FUNCTION public.hold_updates()"
# the killed relay's transactions end once their backends notice the closed connections
wait_until '[[ $(psql_q "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = '"'outbox'"' AND l.mode = '"'RowShareLock'"'") == 0 ]]' 30 ||
    fail "row locks of the killed relay remain"
[[ $(pending_count) == "$total" ]] || fail "expected all $total events pending after the kill, got $(pending_count)"

relay_drain 120 --set relay.batch_size=$BATCH
dups=$(relay_duplicate_acks)
grep 'already in stream' "$PB_RELAY_LOG" | head -3 | sed 's/^/  log: /'
in_stream=$(stream_count)
say "stream $POSTBOX_NATS_STREAM holds $in_stream message(s) for $total events; duplicate acks logged by the restarted relay: $dups"
[[ $(pending_count) == 0 ]] || fail "$(pending_count) event(s) left pending"
[[ $(published_count) == "$total" ]] || fail "published rows: $(published_count), expected $total"
((in_stream == total)) || fail "the stream holds $in_stream messages, expected exactly $total"
((dups == at_kill)) || fail "the restarted relay got $dups duplicate acks, expected $at_kill (the messages published before the kill)"

drain_stream "$PB_TMP/got" "$total"
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
[[ $(duplicates_in "$PB_TMP/got") == 0 ]] || fail "the stream holds duplicate message ids"
line=$(grep -P '\theaders.v1\t' "$PB_TMP/got") || fail "the event with headers is missing"
IFS=$'\t' read -r id type subj atype aid body <<<"$line"
[[ $subj == "pb.$PB_TEST.order.headers.v1" && $atype == order && $aid == agg-h ]] ||
    fail "subject/headers of the event: '$subj' '$atype' '$aid'"
info=$(stream_info)
say "stream: $info"
[[ $info == *"storage=file"* && $info == *"max_age_ms=604800000"* && $info == *"duplicates_ms=120000"* ]] ||
    fail "stream settings differ from the defaults (file storage, max_age 7d, duplicate window 2m)"
