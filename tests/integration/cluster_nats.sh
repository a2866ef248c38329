#!/usr/bin/env bash
# Issue 29: a NATS JetStream cluster. Three nats-server nodes of this test's own (cluster_lib.sh);
# postbox's nats.url lists all three and nats.replicas = 3, so the relay creates an R3 stream and
# the consumer an R3 durable consumer on it. A steady producer commits 400 transactions, one
# event of each of 40 aggregates each (16,000 events, numbered per aggregate), about 20 a second;
# they flow relay (poll capture) -> stream -> postbox consume while the stream's leader is
# SIGKILLed mid-stream; it is started again later, and then the node the relay is connected to
# is killed too (or, when the relay's node was the leader, the consumer's node), so the relay
# and the consumer must reconnect to another server of the list. At the end: every event took
# effect exactly once, every aggregate in order, the stream holds each event once, the durable consumer
# has nothing pending, the relay (and the consumer, when its node was killed) logged a
# reconnection, and no event was dead-lettered although the relay retries quickly (10 attempts
# would fit into an election: the relay must wait for the new leader, not fail the events on).
# Reported per kill: how long publishes failed (the last failure the relay logged) and how long
# publishing stalled (the longest time the published count stood still while events were
# pending).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
source "$(dirname "$0")/cluster_lib.sh"

export POSTBOX_CONSUME_CONSUMER=ordered
export POSTBOX_NATS_REPLICAS=3 POSTBOX_NATS_ACK_WAIT=3s
export POSTBOX_RELAY_RECONNECT_CAP=1s POSTBOX_CONSUME_RECONNECT_CAP=1s
# quick retries: 10 attempts fit into an election (~6 s here), so an event whose publishes
# counted as attempts while the stream had no leader would be dead-lettered
export POSTBOX_RELAY_BACKOFF_BASE=200ms POSTBOX_RELAY_BACKOFF_CAP=1s
DURABLE=postbox_ordered
N_AGG=40 N_TX=400
total=$((N_AGG * N_TX))
: >"$CONSUMER_LOG"

nats_cluster_start
export POSTBOX_NATS_URL=$NATS_CLUSTER_URL

consumer_state() { nats_tool consumer-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$DURABLE" 2>/dev/null; }
leader() { nats_tool stream-leader "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" 2>/dev/null || echo -; }
# node_of PID: the number (1..3) of the node whose client port PID has a connection to
node_of() {
    local i
    for i in 1 2 3; do
        if ss -tnpH state established "( dport = :${NATS_NODE_PORT[i]} )" 2>/dev/null | grep -q "pid=$1,"; then
            echo "$i"
            return 0
        fi
    done
    echo 0
}

pb_init
create_effects
start_consumer # creates the R3 stream and the durable consumer
wait_until '[[ -n $(consumer_state) ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the durable consumer was not created"; }
info=$(stream_info)
[[ $info == *" replicas=3 "* ]] || fail "the stream is not replicated three times: $info"
start_relay --set relay.batch_size=200
start_sampler
say "stream: $info; leader $(leader)"

kill_at=() kill_what=()
kill_node() { # I WHY
    local i=$1 p=$(published_count)
    kill_at+=("$(now_ms)")
    kill_what+=("n$i ($2)")
    nats_node_kill "$i"
    say "SIGKILL node n$i ($2) with $p published, $(pending_count) pending, $(effects) effects"
}

t_start=$(now_ms)
start_producer

wait_produced $((N_TX / 8))
l=$(leader)
[[ $l == n[123] ]] || fail "the stream has no leader before the kill: $l"
leader_killed=${l#n}
relay_node=$(node_of "$RELAY_PID") consumer_node=$(node_of "$CONSUMER_PID")
relay_node_killed=no consumer_node_killed=no
((relay_node == leader_killed)) && relay_node_killed=yes
((consumer_node == leader_killed)) && consumer_node_killed=yes
kill_node "$leader_killed" "the stream leader; the relay is connected to n$relay_node, the consumer to n$consumer_node"
wait_until '[[ $(leader) == n[123] && $(leader) != n$leader_killed ]]' 30 || fail "no new stream leader 30 s after killing n$leader_killed"
say "new stream leader: $(leader), found $(($(now_ms) - kill_at[0])) ms after the kill"

wait_produced $((N_TX / 2))
nats_node_start "$leader_killed"
say "node n$leader_killed started again"
sleep 3 # it catches up with the stream, so that the cluster keeps its quorum at the next kill

if [[ $relay_node_killed == no || $consumer_node_killed == no ]]; then
    # the node of whichever of the two has not lost its connection yet (one node at most: two
    # down would leave the cluster without a quorum)
    relay_node=$(node_of "$RELAY_PID") consumer_node=$(node_of "$CONSUMER_PID")
    victim=$relay_node
    [[ $relay_node_killed == no ]] || victim=$consumer_node
    ((victim > 0)) || fail "cannot tell which node to kill (relay on n$relay_node, consumer on n$consumer_node)"
    ((relay_node == victim)) && relay_node_killed=yes
    ((consumer_node == victim)) && consumer_node_killed=yes
    kill_node "$victim" "the relay is connected to n$relay_node, the consumer to n$consumer_node; stream leader $(leader)"
fi
finish_stream '[[ $(consumer_state) == "pending=0 ack_pending=0 "* ]]' 'echo "durable consumer $(consumer_state)"'
in_stream=$(stream_count)
dup_acks=$(relay_duplicate_acks)
# a node killed after the last events: the reconnection may come after the stream is complete
if [[ $relay_node_killed == yes ]]; then
    wait_until "grep -q 'reconnected to nats' '$PB_RELAY_LOG'" 20 || true
fi
relay_reconnects=$(grep -c 'reconnected to nats' "$PB_RELAY_LOG" || true)
consumer_reconnects=$(grep -c 'reconnected to nats' "$CONSUMER_LOG" || true)
end_ms=$(now_ms)
for ((k = 0; k < ${#kill_at[@]}; k++)); do
    to=${kill_at[k + 1]:-$end_ms}
    say "kill of ${kill_what[k]}: publishes failed for $(failing_between "${kill_at[k]}" "$to") ms; publishing stalled for at most $(stall_between "${kill_at[k]}" "$to") ms"
done
say "$total events published in $publish_ms ms; stream holds $in_stream; republishes JetStream dropped as duplicates: $dup_acks"
say "effects $n ($distinct distinct) of $total; out of order $out_of_order; committed events without an inbox row: $missing; duplicates absorbed by the inbox: $dups"
say "reconnections logged: relay $relay_reconnects ($(grep -m1 'reconnected to nats' "$PB_RELAY_LOG" | cut -c1-200)), consumer $consumer_reconnects"

check_effects
((in_stream == total)) || fail "the stream holds $in_stream messages for $total events"
((relay_reconnects >= 1)) || fail "the relay logged no reconnection although its node was killed"
[[ $consumer_node_killed == no ]] || ((consumer_reconnects >= 1)) || fail "the consumer logged no reconnection although its node was killed"
