#!/usr/bin/env bash
# `relay --capture cdc --drain` run again and again, events committed between the runs: each run
# relays everything committed before it started. A --drain stops right after its drain marker,
# without confirming the marker's position, so the next run's stream begins with that old marker;
# a relay that took any marker for its own stopped there, before the events behind it.
source "$(dirname "$0")/lib.sh"

ROUNDS=20
PER_ROUND=200 # 5 aggregates x 40
pb_init
setup_queue '#'
cdc_use_slot
cdc_create_slot
expected=0
for ((round = 1; round <= ROUNDS; round++)); do
    enqueue_seq 5 $(((round - 1) * 40 + 1)) $((round * 40))
    expected=$((expected + PER_ROUND))
    relay_drain 60 --capture cdc
    got=$(queue_count)
    pending=$(pending_count)
    say "round $round: $got messages in the queue (expected $expected), $pending rows pending"
    ((got >= expected)) || fail "round $round: relay --drain stopped before relaying every committed event: $got of $expected in the queue"
    ((pending == 0)) || fail "round $round: $pending outbox rows still pending after relay --drain"
done
say "ok: $ROUNDS drains in a row, each relayed everything committed before it"
