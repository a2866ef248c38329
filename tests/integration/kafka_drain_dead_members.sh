#!/usr/bin/env bash
# Issue 26: `postbox consume --drain` with Kafka after the group's members were SIGKILLed. A
# killed member stays in its group, holding its partitions, until its session times out; the
# drain must wait for its own assignment and exit 0 only once the group's committed offsets
# reach the end of every partition of the topic (the drain used to give up waiting for an
# assignment after 15 s, log "queue drained" and exit 0 with everything unconsumed).
#   1. Two consumers of group "drain" (session.timeout.ms 18 s) take the topic's partitions and
#      handle 100 events; both are SIGKILLed; 2,000 more events are relayed; `consume --drain`
#      (same session timeout: the mock cluster hands its assignment out about 17 s after it
#      joins) must handle all 2,000 exactly once, in each aggregate's order, leave the group's
#      lag at 0 and exit 0.
#   2. At the same time, in group "stuck", a consumer with a 30 s session is SIGKILLed holding
#      every partition; a drain with a 3 s session may wait 2 x 3 s + 10 s without progress,
#      while the dead member holds the partitions back for about 29 s: it must exit 1, saying
#      why, and never report "queue drained".
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

export POSTBOX_CONSUME_SOURCE=kafka POSTBOX_CONSUME_CONSUMER=drain
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
export POSTBOX_CONSUME_RECONNECT_CAP=1s
TOPIC=$(kafka_topic order)
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.drain
N_AGG=50
GROUP_OPTS=(--set kafka.session.timeout.ms=18000 --set kafka.heartbeat.interval.ms=1000)
STUCK_GROUP=pb.$PB_KAFKA_RUN.stuck
# group "stuck" has an inbox consumer of its own, so that the effects stay group "drain"'s
STUCK_OPTS=(--set kafka.group="$STUCK_GROUP" --set consume.consumer=stuck --set consume.handler="SELECT 1"
    --set kafka.heartbeat.interval.ms=500)

effects() { psql_q "SELECT count(*) FROM effects"; }
group_lag() { kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "${1:-$POSTBOX_KAFKA_GROUP}" "$TOPIC" 2>/dev/null || echo -1; }
assigned() { grep -c 'partitions\{0,1\} assigned' "$1" || true; }
produce() { # FROM TO: events seq FROM..TO of every aggregate, one transaction
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'step.v1',
                                         jsonb_build_object('agg', 'agg-' || a, 'seq', k)))
              FROM generate_series($1, $2) k, generate_series(1, $N_AGG) a" >/dev/null ||
        fail "producer transaction $1..$2 failed"
}
MEMBER_PIDS=()
start_member() { # LOG [OPTS...]: a consumer in the background
    local log=$1
    shift
    "$POSTBOX_BIN" "$@" consume >>"$log" 2>&1 &
    MEMBER_PIDS+=($!)
    PB_PIDS+=($!)
}
start_drain() { # LOG [OPTS...]: postbox consume --drain in the background; DRAIN_PID
    local log=$1
    shift
    timeout 150 "$POSTBOX_BIN" "$@" consume --drain >>"$log" 2>&1 &
    DRAIN_PID=$!
    PB_PIDS+=($!)
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL)"
produce 1 2 # 100 events: the topic exists before the consumers subscribe
relay_drain 30

M_LOG=$PB_TMP/members.log S_LOG=$PB_TMP/stuck.log
: >"$M_LOG"
: >"$S_LOG"
start_member "$M_LOG" "${GROUP_OPTS[@]}" # both join within the group's first 3 s (the mock
start_member "$M_LOG" "${GROUP_OPTS[@]}" # may still rebalance once: up to 17 s more)
start_member "$S_LOG" "${STUCK_OPTS[@]}" --set kafka.session.timeout.ms=30000
wait_until '(( $(assigned "$M_LOG") >= 2 && $(effects) == 100 && $(assigned "$S_LOG") >= 1 )) &&
            [[ $(group_lag) == 0 ]]' 60 ||
    { tail -n 20 "$M_LOG" "$S_LOG" >&2; fail "the members did not take the partitions and handle the first 100 events within 60 s"; }
for pid in "${MEMBER_PIDS[@]}"; do kill -KILL "$pid"; wait "$pid" 2>/dev/null || true; done
t_kill=$(now_ms)
say "group drain: 2 members SIGKILLed holding the partitions after handling 100 events (session 18 s); group stuck: its member SIGKILLed (session 30 s)"
produce 3 42 # 2,000 events
relay_drain 30
[[ $(group_lag) == 2000 ]] || fail "group drain: lag $(group_lag) after relaying 2,000 events, expected 2000"
left=$(group_lag "$STUCK_GROUP")
((left >= 2000)) || fail "group stuck: lag $left, expected at least 2000"
# the dead members' sessions end before the drain's first rebalance does (the mock ends a
# session within a second of its timeout)
sleep_ms $((t_kill + 3000 - $(now_ms)))

D_LOG=$PB_TMP/drain.log X_LOG=$PB_TMP/drain_stuck.log
t0=$(now_ms)
start_drain "$D_LOG" "${GROUP_OPTS[@]}"
D_PID=$DRAIN_PID
start_drain "$X_LOG" "${STUCK_OPTS[@]}" --set kafka.session.timeout.ms=3000
X_PID=$DRAIN_PID
X_RC=0 D_RC=0
wait "$X_PID" || X_RC=$?
X_MS=$(($(now_ms) - t0))
wait "$D_PID" || D_RC=$?
D_MS=$(($(now_ms) - t0))

# ---- 1. group drain -----------------------------------------------------------------------------
n=$(effects)
distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
lag=$(group_lag)
say "group drain: consume --drain exited $D_RC after $D_MS ms: effects $n ($distinct distinct) of 2100, out of order $out_of_order, group lag $lag"
grep -E 'assigned|drain' "$D_LOG" | cut -c1-220 | sed 's/^/    /'
((D_RC == 0)) || { tail -n 20 "$D_LOG" >&2; fail "postbox consume --drain exited with $D_RC"; }
((n == 2100 && distinct == 2100)) || fail "$n effects ($distinct distinct) after --drain, expected 2100 once each"
((out_of_order == 0)) || fail "$out_of_order effects out of their aggregate's order"
[[ $lag == 0 ]] || fail "group $POSTBOX_KAFKA_GROUP: lag $lag after --drain exited 0"
(($(assigned "$D_LOG") >= 1)) || fail "the drain exited without ever being assigned a partition"
grep -q 'queue drained' "$D_LOG" || fail "the drain did not log \"queue drained\""
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "dead letters"

# ---- 2. group stuck -----------------------------------------------------------------------------
say "group stuck: consume --drain (session 3 s) exited $X_RC after $X_MS ms; its last lines:"
tail -n 3 "$X_LOG" | cut -c1-400 | sed 's/^/    /'
((X_RC == 1)) || fail "group stuck: consume --drain exited with $X_RC while a dead member held the partitions (124: it did not end within 150 s), expected 1"
! grep -q 'queue drained' "$X_LOG" || fail "group stuck: the drain reported \"queue drained\" with $left message(s) left"
grep -q 'error consume: --drain gave up: .*assigned no partition to this consumer within 16 s' "$X_LOG" ||
    fail "group stuck: the drain's error does not say that it got no partition within its bound"
((X_MS < 27000)) || fail "group stuck: the drain took $X_MS ms, beyond its bound of 16 s and near the dead member's hold"
