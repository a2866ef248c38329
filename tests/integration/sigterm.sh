#!/usr/bin/env bash
# SIGTERM while relaying: the relay finishes the batch in flight and exits 0; every row marked
# published is in the queue, no failure was recorded for the shutdown, and the rest is pending.
source "$(dirname "$0")/lib.sh"

N_AGG=50 PER_AGG=100
pb_init
use_least_privilege # the relay runs as a member of postbox_relay
setup_queue '#'
enqueue_seq $N_AGG 1 $PER_AGG
total=$((N_AGG * PER_AGG))

start_relay
wait_until '(( $(published_count) > 0 ))' 60 || fail "the relay published nothing within 60 s"
kill -TERM "$RELAY_PID"
t0=$(date +%s%N)
wait_relay 60
say "exit status $RELAY_RC, $((($(date +%s%N) - t0) / 1000000)) ms after SIGTERM"
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC after SIGTERM"
published=$(published_count)
pending=$(pending_count)
failed=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE published_at IS NULL AND (attempts > 0 OR last_error IS NOT NULL)")
say "published $published, pending $pending, rows with a recorded failure $failed, dead letters $(dead_count)"
((published + pending == total)) || fail "published + pending = $((published + pending)), expected $total"
((pending > 0)) || say "note: the relay had published everything before SIGTERM arrived"
((failed == 0)) || fail "$failed pending row(s) carry a failure although the relay was only asked to stop"
inq=$(queue_count)
say "messages in the queue: $inq"
((inq >= published)) || fail "only $inq messages in the queue for $published rows marked published"
drain_queue "$PB_TMP/got" "$published" 1500 120
psql_q "SELECT event_id FROM postbox.outbox_published" | LC_ALL=C sort >"$PB_TMP/pub_ids"
cut -f1 "$PB_TMP/got" | LC_ALL=C sort -u >"$PB_TMP/got_ids"
missing=$(LC_ALL=C comm -23 "$PB_TMP/pub_ids" "$PB_TMP/got_ids" | wc -l)
((missing == 0)) || fail "$missing row(s) marked published are not in the queue"
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
