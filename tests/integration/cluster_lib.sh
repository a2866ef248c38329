# shellcheck shell=bash
# Private broker clusters for the cluster tests (cluster_nats, cluster_kafka) and the steady
# stream of events they relay and consume; sourced after lib.sh and exactly_once_lib.sh. Every server started here listens on 127.0.0.1, on ports from free_port, keeps its
# data under PB_TMP, is recorded in PB_PIDS and killed (by pid) when the test exits. The shared
# servers of scripts/services are never touched.

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---- the steady stream of events and its checks -------------------------------------------------
# N_AGG aggregates, N_TX producer transactions: transaction K enqueues event K of every aggregate
# (aggregate_type order, payload {"agg": ..., "seq": K}); the handler (POSTBOX_CONSUME_HANDLER
# below) records each effect in the table effects, in the order they take effect.
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
create_effects() { psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL)"; }
effects() { psql_q "SELECT count(*) FROM effects"; }

produce_tx() { # K: event K of every aggregate, one transaction
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'step.v1',
                                         jsonb_build_object('agg', 'agg-' || a, 'seq', $1)))
              FROM generate_series(1, $N_AGG) a" >/dev/null || fail "producer transaction $1 failed"
}
# The producer: a steady stream of transactions, one event of every aggregate each (seq = the
# transaction's number), about 20 a second; its progress in $PB_TMP/produced (renamed into place,
# so that a reader never finds it empty).
producer() {
    local k
    for ((k = 1; k <= N_TX; k++)); do
        produce_tx "$k"
        echo "$k" >"$PB_TMP/produced.new"
        mv -f "$PB_TMP/produced.new" "$PB_TMP/produced"
        sleep 0.03
    done
}
produced() { cat "$PB_TMP/produced" 2>/dev/null || echo 0; }

# wait_progress DONE COUNT SECONDS: evaluates DONE every 0.2 s until it succeeds; fails when the
# number COUNT prints stood still for SECONDS meanwhile. A stream that stopped fails as before;
# one that a loaded machine only slows down (each producer transaction is a psql of its own:
# 140 ms apiece beside two other ASan tests, more at a load of 5) does not fail on the time its
# whole length takes.
wait_progress() {
    local done=$1 count=$2 secs=$3 last= c since now
    since=$(now_ms)
    until eval "$done"; do
        c=$(eval "$count")
        now=$(now_ms)
        if [[ $c != "$last" ]]; then last=$c since=$now; fi
        ((now - since < secs * 1000)) || return 1
        sleep 0.2
    done
}
wait_produced() { # K: until the producer committed transaction K; fails when it commits none for 60 s
    wait_progress "(( \$(produced) >= $1 ))" produced 60 ||
        fail "the producer is stuck at transaction $(produced) (none committed for 60 s)"
}
start_producer() { # the producer in the background: PRODUCER_PID
    producer &
    PRODUCER_PID=$!
    PB_PIDS+=("$PRODUCER_PID")
}

# The sampler: every 100 ms "ms published pending" (pending: committed, not yet published), so
# that a stall of publishing can be measured afterwards.
SAMPLES=$PB_TMP/samples
sampler() {
    while :; do
        printf '%s %s\n' "$(now_ms)" "$(psql_q "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                                                       count(*) FILTER (WHERE published_at IS NULL)
                                                  FROM postbox.outbox" | tr '|' ' ')" >>"$SAMPLES"
        sleep 0.1
    done
}
# stall_between FROM TO: the longest stretch (ms) between the two times during which the
# published count did not move although events were pending
stall_between() {
    awk -v from="$1" -v to="$2" '$1 >= from && $1 <= to {
            if ($3 > 0 && $2 == last && t0 > 0) { if ($1 - t0 > worst) worst = $1 - t0 }
            else t0 = $1
            last = $2
        }
        END { print worst + 0 }' "$SAMPLES"
}
# failing_between FROM TO: ms from FROM to the last publish failure the relay logged before TO
failing_between() {
    local last=0 line ts ms
    while IFS= read -r line; do
        ts=${line%% *}
        ms=$(date -d "$ts" +%s%3N 2>/dev/null) || continue
        ((ms >= $1 && ms <= $2)) && last=$ms
    done < <(grep 'relay: publish failed' "$PB_RELAY_LOG")
    echo $((last > 0 ? last - $1 : 0))
}

start_sampler() {
    sampler &
    PB_PIDS+=($!)
}

# finish_stream DRAINED DESCRIBE: waits for the producer, then until nothing is pending, every
# event took effect and the condition DRAINED (the broker holds nothing for the consumer;
# DESCRIBE says what it holds instead) holds; stops the relay and the consumer (SIGTERM: both
# must exit 0) and runs effects_stats. publish_ms: from t_start to nothing pending.
finish_stream() {
    wait "$PRODUCER_PID" || fail "the producer failed"
    say "the producer committed $N_TX transactions in $(($(now_ms) - t_start)) ms"
    wait_progress '(( $(pending_count) == 0 ))' pending_count 60 ||
        fail "$(pending_count) events still pending, none published for 60 s"
    publish_ms=$(($(now_ms) - t_start))
    wait_progress '(( $(effects) >= total ))' effects 60 ||
        { tail -n 20 "$CONSUMER_LOG" >&2; fail "only $(effects) of $total effects, none new for 60 s"; }
    wait_until "$1" 30 || fail "the consumer's broker side is not drained: $(eval "$2")"
    stop_relay
    ((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
    stop_consumer
    effects_stats
}

# effects_stats: n, distinct, out_of_order (effects not in their aggregate's order), missing
# (committed events without an inbox row), dups (duplicates the inbox absorbed, from CONSUMER_LOG)
effects_stats() {
    n=$(effects)
    distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
    out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
    missing=$(psql_q "SELECT count(*) FROM postbox.outbox_all o WHERE NOT EXISTS
                        (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)")
    dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
}
# check_effects: after effects_stats, every one of the total events took effect once, in order
check_effects() {
    ((n == total && distinct == total)) || fail "$n effects ($distinct distinct), expected $total once each"
    ((missing == 0)) || fail "$missing committed event(s) never took effect"
    ((out_of_order == 0)) || fail "$out_of_order effects out of their aggregate's order"
    [[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "dead letters in the inbox"
    [[ $(dead_count) == 0 ]] || fail "dead letters in the outbox"
    check_in_order "$CONSUMER_LOG"
}

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

# ---- Kafka: kafka_cluster_start (kafka_lib.sh) -------------------------------------------------
