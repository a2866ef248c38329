#!/usr/bin/env bash
# amqp.single_active_consumer: two consumer processes on one queue declared with
# x-single-active-consumer. Only the first receives (the second stands by) while 1,000 events
# of 10 aggregates arrive; then the first is SIGKILLed and the second takes over for 1,000 more.
# Every event takes effect once, each aggregate in its order, and each phase was handled by one
# process alone (the handler records the consumer's PostgreSQL application_name). A consumer
# without the option on that queue is refused with an error naming the setting.
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_AMQP_BINDINGS='#' POSTBOX_AMQP_SINGLE_ACTIVE_CONSUMER=true
export POSTBOX_CONSUME_CONSUMER=sac
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq, who) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int, current_setting('application_name'))"
N_AGG=10 PER_PHASE=100
DSN=$POSTBOX_PG_DSN
sep() { [[ $DSN == *\?* ]] && echo '&' || echo '?'; }

amqp_tool delete "$POSTBOX_AMQP_URL" "$PB_QUEUE" || fail "amqp-tool delete failed"
pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL, who text NOT NULL)"
produce() { # FROM TO
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'step.v1', jsonb_build_object('agg', 'agg-' || a, 'seq', k)))
              FROM generate_series($1, $2) k, generate_series(1, $N_AGG) a" >/dev/null || fail "producer failed"
}
effects() { psql_q "SELECT count(*) FROM effects"; }

POSTBOX_PG_DSN="$DSN$(sep)application_name=first" start_consumer
first=$CONSUMER_PID
wait_until 'grep -q "consuming queue" "$CONSUMER_LOG"' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the first consumer did not start"; }
POSTBOX_PG_DSN="$DSN$(sep)application_name=second" start_consumer
second=$CONSUMER_PID
wait_until '(( $(grep -c "consuming queue" "$CONSUMER_LOG") == 2 ))' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the second consumer did not start"; }
export POSTBOX_PG_DSN=$DSN
start_relay
produce 1 $PER_PHASE
wait_until '(( $(effects) >= N_AGG * PER_PHASE ))' 60 || fail "phase 1: only $(effects) effects"
phase1=$(psql_q "SELECT string_agg(who || ':' || c, ' ' ORDER BY who) FROM (SELECT who, count(*) c FROM effects GROUP BY who) x")
say "phase 1 (both consumers running): effects by process: $phase1"
[[ $phase1 == "first:$((N_AGG * PER_PHASE))" ]] || fail "phase 1 handled by '$phase1', expected the first consumer alone"

kill -KILL "$first"; wait "$first" 2>/dev/null || true
produce $((PER_PHASE + 1)) $((2 * PER_PHASE))
wait_until '(( $(effects) >= 2 * N_AGG * PER_PHASE ))' 60 || fail "phase 2: only $(effects) effects"
stop_relay
CONSUMER_PID=$second
stop_consumer
phase2=$(psql_q "SELECT string_agg(who || ':' || c, ' ' ORDER BY who) FROM (SELECT who, count(*) c FROM effects WHERE seq > $PER_PHASE GROUP BY who) x")
distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
say "phase 2 (the first killed): effects by process: $phase2; $(effects) effects, $distinct distinct, out of order: $out_of_order"
[[ $phase2 == "second:$((N_AGG * PER_PHASE))" ]] || fail "phase 2 handled by '$phase2', expected the second consumer alone"
((distinct == 2 * N_AGG * PER_PHASE && $(effects) == distinct)) || fail "effects not exactly once"
((out_of_order == 0)) || fail "$out_of_order effects out of order"

# the queue has the argument: a consumer declaring it without is refused, naming the setting
out=$(POSTBOX_AMQP_SINGLE_ACTIVE_CONSUMER=false timeout 30 "$POSTBOX_BIN" consume 2>&1) && fail "a consumer without the option was accepted"
[[ $out == *"single_active_consumer"* ]] || fail "the refusal does not name the setting: $out"
say "without the option: $(grep -o 'queue .* exists with different arguments[^:]*' <<<"$out" | head -1)"
