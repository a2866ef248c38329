#!/usr/bin/env bash
# Several relays share the outbox by shard (relay.shards = 8): a shard whose previous owner still
# has a session is held back until that session ends; a second relay gets half the shards
# within a few poll intervals while the first is busy; when one stops (SIGTERM) or dies (SIGKILL)
# mid-stream, the survivor takes its shards over. Every event arrives, first occurrences keep
# per-aggregate order, both relays of a pair really published, and a relay started with another
# relay.shards is refused.
source "$(dirname "$0")/lib.sh"

N_AGG=200 P1=100 P2=50 # seq per aggregate: 20,000 events in phase 1, 10,000 in phase 2
OPTS=(--set relay.shards=8 --set relay.batch_size=20 --set relay.poll_interval=200ms)
pb_init
use_least_privilege # the relay runs as a member of postbox_relay
setup_queue '#'

# relays_json: "PID:SHARDS PID:SHARDS" of the relays that own shards, from postbox status --json
relays() {
    "$POSTBOX_BIN" status --json 2>/dev/null |
        python3 -c 'import json,sys; print(" ".join("%d:%s" % (r["pid"], r["shards"]) for r in json.load(sys.stdin)["relay_owners"]))'
}
# balanced: two relays, four shards each
balanced() { [[ $(relays) =~ ^[0-9]+:[0-9]+,[0-9]+,[0-9]+,[0-9]+\ [0-9]+:[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]]; }
one_owner() { [[ $(relays) =~ ^[0-9]+:0,1,2,3,4,5,6,7$ ]]; }

# ---- phase 0: the fence: a shard whose previous owner still has a session is not relayed -----------
# A session that holds the guard of shard 0 stands for the last session of a relay that died.
psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT true FROM pg_advisory_lock_shared((SELECT guard FROM postbox.relay_lock_keys), 0)" \
    -c "SELECT pg_sleep(4)" >/dev/null &
GUARD=$!
PB_PIDS+=("$GUARD")
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND objid = 0 AND objsubid = 2\") -ge 1 ]]" 10 ||
    fail "the guard session did not take its lock"
enqueue_seq 20 1 10
shard0="(hashtext(aggregate_type || '/' || aggregate_id) & 2147483647) % 2 = 0"
start_relay --set relay.shards=2 --set relay.poll_interval=200ms
F=$RELAY_PID
wait_until "(( \$(psql_q \"SELECT count(*) FROM postbox.outbox WHERE NOT ($shard0)\") == 0 ))" 15 ||
    fail "the relay did not publish the events of shard 1"
held=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE $shard0")
say "guard of shard 0 held by another session: shard 1 published, $held events of shard 0 held back"
((held > 0)) || fail "the events of shard 0 were published while a session of its previous owner was alive"
wait "$GUARD" || true
wait_until '(($(pending_count) == 0))' 15 || fail "the events of shard 0 were not published after the guard went away"
RELAY_PID=$F
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
drain_queue "$PB_TMP/fence" 200 1500 60
psql_q "TRUNCATE postbox.outbox_published"

# ---- phase 1: A alone, B joins, B stops with SIGTERM --------------------------------------------
enqueue_seq $N_AGG 1 $P1 # one transaction: a backlog at once
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
start_relay "${OPTS[@]}"
C=$RELAY_PID
wait_until balanced 15 || fail "the shards were not split between A and C: $(relays)"
enqueue_seq $N_AGG $((P1 + 1)) $((P1 + P2))
say "A and C share the shards: $(relays); pending $(pending_count)"

# a relay with another shard count is refused while they run
start_relay --set relay.shards=4
wait_relay 30
((RELAY_RC != 0)) || fail "a relay with relay.shards=4 started beside relays with 8"
grep -q 'relay.shards = 8' "$PB_RELAY_LOG" || fail "the refusal does not name the other shard count"

sleep 0.2
left=$(pending_count)
kill -KILL "$A"
wait "$A" 2>/dev/null || true
say "A killed with $left events pending"
((left > 0)) || fail "the backlog was gone before A was killed; the test proves nothing"
wait_until one_owner 15 || fail "C did not take A's shards over: $(relays)"
wait_until '(($(pending_count) == 0))' 120 || fail "$(pending_count) events still pending after phase 2"
RELAY_PID=$C
stop_relay
((RELAY_RC == 0)) || fail "relay C exited with $RELAY_RC"

total=$((N_AGG * (P1 + P2)))
((total == $(published_count))) || fail "published rows: $(published_count), expected $total (dead letters: $(dead_count))"
drain_queue "$PB_TMP/got" $total 3000 300
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
