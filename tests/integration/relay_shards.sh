#!/usr/bin/env bash
# Several relays share the outbox by shard (relay.shards = 8): a second relay gets half the shards
# within a few poll intervals while the first is busy; when one stops (SIGTERM) or dies (SIGKILL)
# mid-stream, the survivor takes its shards over. Every event arrives, first occurrences keep
# per-aggregate order, both relays of a pair really published, and a relay started with another
# relay.shards is refused.
source "$(dirname "$0")/lib.sh"

N_AGG=200 PER_PHASE=50 # seq per aggregate and phase: 10,000 events per phase
OPTS=(--set relay.shards=8 --set relay.batch_size=20 --set relay.poll_interval=200ms)
pb_init
setup_queue '#'

# relays_json: "PID:SHARDS PID:SHARDS" of the relays that own shards, from postbox status --json
relays() {
    "$POSTBOX_BIN" status --json 2>/dev/null |
        python3 -c 'import json,sys; print(" ".join("%d:%s" % (r["pid"], r["shards"]) for r in json.load(sys.stdin)["relay_owners"]))'
}
# balanced: two relays, four shards each
balanced() { [[ $(relays) =~ ^[0-9]+:[0-9]+,[0-9]+,[0-9]+,[0-9]+\ [0-9]+:[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]]; }
one_owner() { [[ $(relays) =~ ^[0-9]+:0,1,2,3,4,5,6,7$ ]]; }

# ---- phase 1: A alone, B joins, B stops with SIGTERM --------------------------------------------
for ((k = 1; k <= PER_PHASE; k += 10)); do enqueue_seq $N_AGG $k $((k + 9)); done
start_relay "${OPTS[@]}"
A=$RELAY_PID
wait_until one_owner 15 || fail "relay A did not take all 8 shards: $(relays)"
start_relay "${OPTS[@]}"
B=$RELAY_PID
wait_until balanced 15 || fail "the shards were not split between A and B: $(relays)"
say "A and B share the shards: $(relays); pending $(pending_count)"
left=$(pending_count)
((left > 0)) || fail "the backlog was gone before both relays shared it; the test proves nothing"
sleep 0.5
RELAY_PID=$B
stop_relay
((RELAY_RC == 0)) || fail "relay B exited with $RELAY_RC after SIGTERM"
b_published=$(sed -n 's/.*relay: published [0-9]* events in .*totals: published \([0-9]*\),.*/\1/p' "$PB_RELAY_LOG" | tail -n 1)
say "B stopped after publishing ${b_published:-0} events"
((${b_published:-0} > 0)) || fail "relay B published nothing while it owned shards"
wait_until one_owner 15 || fail "A did not take B's shards over: $(relays)"
wait_until '(($(pending_count) == 0))' 120 || fail "$(pending_count) events still pending after phase 1"

# ---- phase 2: C joins A, A dies with SIGKILL mid-stream --------------------------------------------
for ((k = PER_PHASE + 1; k <= 2 * PER_PHASE; k += 10)); do enqueue_seq $N_AGG $k $((k + 9)); done
start_relay "${OPTS[@]}"
C=$RELAY_PID
wait_until balanced 15 || fail "the shards were not split between A and C: $(relays)"
say "A and C share the shards: $(relays); pending $(pending_count)"

# a relay with another shard count is refused while they run
start_relay --set relay.shards=4
wait_relay 30
((RELAY_RC != 0)) || fail "a relay with relay.shards=4 started beside relays with 8"
grep -q 'relay.shards = 8' "$PB_RELAY_LOG" || fail "the refusal does not name the other shard count"

sleep 0.3
kill -KILL "$A"
wait "$A" 2>/dev/null || true
say "A killed with pending $(pending_count)"
wait_until one_owner 15 || fail "C did not take A's shards over: $(relays)"
wait_until '(($(pending_count) == 0))' 120 || fail "$(pending_count) events still pending after phase 2"
RELAY_PID=$C
stop_relay
((RELAY_RC == 0)) || fail "relay C exited with $RELAY_RC"

total=$((N_AGG * 2 * PER_PHASE))
((total == $(published_count))) || fail "published rows: $(published_count), expected $total (dead letters: $(dead_count))"
drain_queue "$PB_TMP/got" $total 3000 300
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
