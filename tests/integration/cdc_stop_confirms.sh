#!/usr/bin/env bash
# A cdc relay that stops cleanly (--drain, SIGTERM) tells PostgreSQL, before it goes, how far the
# broker confirmed: the slot's confirmed position covers every event it relayed, so the next
# start replays none of them. (A position reported only every 100 ms at most, and never at the
# close, left the last transactions to be published a second time by the next relay.)
source "$(dirname "$0")/lib.sh"

# last_event K: one more event in a transaction of its own; prints a WAL position inside that
# transaction, before its commit (a confirmed position past it covers the event)
last_event() {
    psql_q "BEGIN; SELECT count(postbox.enqueue('order', 'agg-last', 'created.v1', '{\"seq\": $1}'::jsonb));
            SELECT pg_current_wal_insert_lsn(); COMMIT" | tail -n 1
}
covers() { [[ $(psql_q "SELECT '$1'::pg_lsn < '$2'::pg_lsn") == t ]]; } # IN_TXN CONFIRMED

ROUNDS=5
pb_init
setup_queue '#'
cdc_use_slot
cdc_create_slot
expected=0
for ((round = 1; round <= ROUNDS; round++)); do
    enqueue_seq 5 $(((round - 1) * 20 + 1)) $((round * 20))
    in_txn=$(last_event "$round")
    expected=$((expected + 101))
    relay_drain 60 --capture cdc
    confirmed=$(slot_confirmed_lsn)
    got=$(queue_count)
    say "round $round (--drain): $got messages in the queue (expected $expected), slot confirmed $confirmed, last event's transaction at $in_txn"
    ((got == expected)) || fail "round $round: $got messages in the queue, expected $expected: the stop left relayed events unconfirmed and the next start published them again"
    covers "$in_txn" "$confirmed" || fail "round $round: the slot's confirmed position $confirmed does not cover the last relayed transaction (at $in_txn)"
done

# SIGTERM while streaming: the events relayed before the stop are confirmed at the stop
start_cdc_relay
enqueue_seq 5 $((ROUNDS * 20 + 1)) $((ROUNDS * 20 + 20))
in_txn=$(last_event 0)
expected=$((expected + 101))
wait_until '(($(queue_count) >= expected))' 60 || fail "only $(queue_count) of $expected messages arrived"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
confirmed=$(slot_confirmed_lsn)
covers "$in_txn" "$confirmed" || fail "after SIGTERM the slot's confirmed position $confirmed does not cover the last relayed transaction (at $in_txn)"
relay_drain 60 --capture cdc
got=$(queue_count)
((got == expected)) || fail "after SIGTERM and a --drain: $got messages in the queue, expected $expected"
say "ok: $ROUNDS drains and a SIGTERM each confirmed everything they relayed; nothing was published twice"
