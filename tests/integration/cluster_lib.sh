# shellcheck shell=bash
# Private broker clusters for the cluster tests (cluster_nats, cluster_kafka); sourced after
# lib.sh. Every server started here listens on 127.0.0.1, on ports from free_port, keeps its
# data under PB_TMP, is recorded in PB_PIDS and killed (by pid) when the test exits. The shared
# servers of scripts/services are never touched.

# ---- NATS: a JetStream cluster of three nodes -------------------------------------------------
# nats_cluster_start: nodes n1, n2, n3 (server_name) in cluster pb-<test>, each with a client
# port, a cluster port and a JetStream store of its own; routes to all three. Sets
# NATS_NODE_PORT[i], NATS_NODE_PID[i] (i = 1..3) and NATS_CLUSTER_URL (the three client URLs,
# comma-separated, as nats.url takes them). Waits until the cluster has a JetStream meta leader.
NATS_NODE_PORT=() NATS_NODE_CPORT=() NATS_NODE_PID=()
NATS_CLUSTER_URL=
nats_cluster_start() {
    local i routes=
    for i in 1 2 3; do
        NATS_NODE_PORT[i]=$(free_port)
        NATS_NODE_CPORT[i]=$(free_port)
        routes+="${routes:+, }nats-route://127.0.0.1:${NATS_NODE_CPORT[i]}"
    done
    for i in 1 2 3; do
        mkdir -p "$PB_TMP/nats$i/store"
        cat >"$PB_TMP/nats$i/server.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${NATS_NODE_PORT[i]}
jetstream { store_dir: "$PB_TMP/nats$i/store" }
cluster {
    name: pb-$PB_TEST
    listen: 127.0.0.1:${NATS_NODE_CPORT[i]}
    routes: [ $routes ]
}
EOF
        nats_node_start "$i"
    done
    NATS_CLUSTER_URL="nats://127.0.0.1:${NATS_NODE_PORT[1]},nats://127.0.0.1:${NATS_NODE_PORT[2]},nats://127.0.0.1:${NATS_NODE_PORT[3]}"
    # JetStream answers API requests only once the nodes elected a meta leader
    wait_until 'nats_tool delete-stream "$NATS_CLUSTER_URL" PB_CLUSTER_PROBE 2>/dev/null' 30 ||
        fail "the NATS cluster elected no JetStream meta leader within 30 s: $(tail -n 5 "$PB_TMP/nats1/server.log")"
    say "NATS cluster of 3 nodes on ports ${NATS_NODE_PORT[*]} (routes ${NATS_NODE_CPORT[*]})"
}

nats_node_start() { # I: (re)starts node I with its configuration and store
    local i=$1
    nats-server -c "$PB_TMP/nats$i/server.conf" -l "$PB_TMP/nats$i/server.log" </dev/null &
    NATS_NODE_PID[i]=$!
    PB_PIDS+=("${NATS_NODE_PID[i]}")
    wait_until "(exec 3<>/dev/tcp/127.0.0.1/${NATS_NODE_PORT[i]}) 2>/dev/null" 10 ||
        fail "nats node n$i did not listen on port ${NATS_NODE_PORT[i]}: $(tail -n 5 "$PB_TMP/nats$i/server.log")"
}

nats_node_kill() { # I: SIGKILL node I (by its recorded pid)
    local i=$1
    kill -KILL "${NATS_NODE_PID[i]}" 2>/dev/null || true
    wait "${NATS_NODE_PID[i]}" 2>/dev/null || true
}
