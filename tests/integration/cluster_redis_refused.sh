#!/usr/bin/env bash
# Issue 29: Redis Cluster is not supported, and says so. A redis-server of this test's own in
# cluster mode (cluster-enabled yes, one node): the relay (redis sink) and the consumer (redis
# source) must stop at start with an error naming cluster mode, instead of sending XADDs that a
# cluster answers with MOVED or CLUSTERDOWN; no event is published or dead-lettered, every one
# stays pending. Then the same server restarted without cluster mode takes them all.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

export POSTBOX_REDIS_MAX_LEN=100000 POSTBOX_REDIS_MAX_AGE=0
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_REDIS_STREAMS=pb:$PB_TEST:order POSTBOX_CONSUME_HANDLER="SELECT 1"
mkdir -p "$PB_TMP/redis"
use_port() { # PORT: our server's port, and the URL the relay and the consumer use
    port=$1
    export POSTBOX_REDIS_URL=redis://127.0.0.1:$port/0
}
use_port "$(free_port)"
redis_answers() { timeout 10 redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG; }
# start_redis CLUSTER_ENABLED (yes|no): our redis-server, waited for until it answers PING (up to
# 120 s: a loaded machine only delays it). In cluster mode it also listens on a cluster bus port,
# by default the port + 10000, which may be in the kernel's ephemeral range and held by another
# test's connection: the bus gets a free port of its own. A server that exits at start (a port
# taken since free_port looked) is started again on other ports, up to 3 times.
start_redis() {
    local attempt bus
    for attempt in 1 2 3; do
        bus=$(free_port)
        redis-server --bind 127.0.0.1 --port "$port" --dir "$PB_TMP/redis" --daemonize no --save "" \
            --appendonly no --cluster-enabled "$1" --cluster-config-file "$PB_TMP/redis/nodes.conf" \
            --cluster-port "$bus" >>"$PB_TMP/redis/server.log" 2>&1 </dev/null &
        REDIS_PID=$!
        PB_PIDS+=("$REDIS_PID")
        wait_until 'redis_answers || ! pid_alive "$REDIS_PID"' 120 || break
        if pid_alive "$REDIS_PID"; then return 0; fi
        wait "$REDIS_PID" 2>/dev/null || true
        say "attempt $attempt: our redis-server (cluster-enabled $1) on ports $port and $bus exited at start: $(tail -n 2 "$PB_TMP/redis/server.log" | tr '\n' ' ')"
        use_port "$(free_port)"
    done
    fail "our redis-server (cluster-enabled $1) did not start: $(tail -n 5 "$PB_TMP/redis/server.log")"
}

start_redis yes
[[ $(redis-cli -h 127.0.0.1 -p "$port" INFO cluster | tr -d '\r') == *cluster_enabled:1* ]] ||
    fail "our redis-server is not in cluster mode"
pb_init
enqueue_seq 5 1 20

t0=$(date +%s%N)
start_relay
wait_relay 30
relay_ms=$((($(date +%s%N) - t0) / 1000000))
say "the relay exited with $RELAY_RC after $relay_ms ms: $(grep -m1 'cluster mode' "$PB_RELAY_LOG" | cut -c1-240)"
((RELAY_RC != 0)) || fail "the relay ran against a Redis Cluster node"
grep -q 'runs in cluster mode' "$PB_RELAY_LOG" || fail "the relay did not say why it stopped"
pending=$(pending_count)
((pending == 100 && $(published_count) == 0 && $(dead_count) == 0)) ||
    fail "events left their pending state: pending $pending, published $(published_count), dead $(dead_count)"

rc=0
timeout 30 "$POSTBOX_BIN" consume >>"$CONSUMER_LOG" 2>&1 || rc=$?
say "the consumer exited with $rc: $(grep -m1 'cluster mode' "$CONSUMER_LOG" | cut -c1-240)"
((rc != 0 && rc != 124)) || fail "the consumer did not stop at start (exit $rc)"
grep -q 'runs in cluster mode' "$CONSUMER_LOG" || fail "the consumer did not say why it stopped"

# the same events go through once the server is a standalone one
kill -TERM "$REDIS_PID"
wait "$REDIS_PID" 2>/dev/null || true
start_redis no
relay_drain 30
((RELAY_RC == 0 && $(pending_count) == 0)) || fail "a standalone server did not take the events: pending $(pending_count)"
n=$(redis-cli -h 127.0.0.1 -p "$port" XLEN "pb:$PB_TEST:order")
say "standalone: the stream holds $n entries"
((n == 100)) || fail "the stream holds $n entries, expected 100"
