#!/usr/bin/env bash
# An event nothing is bound to (mandatory publish, basic.return) is never marked published; the
# failure is recorded, and after max_attempts the event moves to dead_letters with a reason.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue none # the relay declares the exchange; no queue is bound to it
id=$(psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.lost.v1', '{\"n\": 1}')")
say "enqueued $id"

start_relay --set relay.max_attempts=3 --set relay.backoff_base=200ms --set relay.backoff_cap=1s
published_ever=0
outbox_error=
deadline=$(($(date +%s) + 40))
while (($(date +%s) < deadline)); do
    row=$(psql_q "SELECT attempts, coalesce(last_error, '') FROM postbox.outbox WHERE event_id = '$id'")
    [[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE event_id = '$id'") == 0 ]] || published_ever=1
    [[ -n $row && ${row##*|} != '' ]] && outbox_error=$row
    [[ $(psql_q "SELECT count(*) FROM postbox.dead_letters WHERE event_id = '$id'") == 1 ]] && break
    sleep 0.1
done
pid_alive "$RELAY_PID" || fail "the relay exited (status $(wait "$RELAY_PID"; echo $?))"
stop_relay
((published_ever == 0)) || fail "the unroutable event was marked published"
say "outbox row while retrying (attempts|last_error): ${outbox_error:-never seen}"
dead=$(psql_q "SELECT attempts || '|' || coalesce(last_error, '') || '|' || reason FROM postbox.dead_letters WHERE event_id = '$id'")
[[ -n $dead ]] || fail "the event is not in dead_letters after 40 s (outbox: $(psql_q "SELECT attempts, last_error FROM postbox.outbox WHERE event_id = '$id'"))"
say "dead letter (attempts|last_error|reason): $dead"
[[ "$outbox_error $dead" =~ [Uu]nroutable|NO_ROUTE|no[\ _]route ]] || fail "neither last_error nor reason mentions unroutable/NO_ROUTE"
attempts=$(psql_q "SELECT attempts FROM postbox.dead_letters WHERE event_id = '$id'")
((attempts >= 1 && attempts <= 3)) || fail "dead letter after $attempts attempts; relay.max_attempts is 3"
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE event_id = '$id'")
[[ -n $reason ]] || fail "dead letter without a reason"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE event_id = '$id'") == 0 ]] ||
    fail "the event is in postbox.outbox_published"
[[ $(pending_count) == 0 ]] || fail "the event is still pending besides being dead-lettered"
