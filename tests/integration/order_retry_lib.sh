# The body of consume_order_retry (RabbitMQ) and nats_order_retry (NATS JetStream), sourced
# after lib.sh (and nats_lib.sh): a handler fails twice on the first event of aggregate agg-0
# and succeeds on its third attempt, while the later events of agg-0 and those of agg-1..agg-9
# arrive (enqueued through postbox.enqueue, relayed by `postbox relay`, consumed with 2 lanes).
# Checked: every aggregate's effects are applied in its events' order, each once; agg-0's first
# event failed exactly twice; the other aggregates are not delayed by the backoff (2 s, then 4 s:
# the retries take at least 3 s): all their events were applied before agg-0's first event, each
# within 2 s of its commit.

export POSTBOX_CONSUME_CONSUMER=order-retry
export POSTBOX_CONSUME_HANDLER="SELECT apply_event(\$1::jsonb, \$3::jsonb)"
export POSTBOX_CONSUME_LANES=2 POSTBOX_CONSUME_MAX_ATTEMPTS=5
export POSTBOX_CONSUME_BACKOFF_BASE=2s POSTBOX_CONSUME_BACKOFF_CAP=4s
N_AGG=10 WAVES=3 PER_WAVE=5

pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL,
                              applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
        CREATE FUNCTION apply_event(p jsonb, meta jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
        DECLARE tries int;
        BEGIN
            SELECT attempts INTO tries FROM postbox.inbox_failures
             WHERE consumer = meta->>'consumer' AND message_id = meta->>'message_id';
            IF (p->>'fail')::boolean AND coalesce(tries, 0) < 2 THEN
                RAISE EXCEPTION 'failing on purpose, attempt %', coalesce(tries, 0) + 1;
            END IF;
            INSERT INTO effects (agg, seq) VALUES (p->>'agg', (p->>'seq')::int);
        END \$\$;"

# wave W: events PER_WAVE*(W-1)+1 .. PER_WAVE*W of every aggregate, sequence-major, one
# transaction; the very first event (agg-0, 1) is the failing one
enqueue_wave() {
    local from=$(($1 * PER_WAVE - PER_WAVE + 1)) to=$(($1 * PER_WAVE))
    psql_q "DO \$\$ BEGIN
              FOR k IN $from..$to LOOP
                FOR a IN 0..$((N_AGG - 1)) LOOP
                  PERFORM postbox.enqueue('order', 'agg-' || a, 'step.v1',
                      jsonb_build_object('agg', 'agg-' || a, 'seq', k, 'fail', a = 0 AND k = 1));
                END LOOP;
              END LOOP;
            END \$\$" || fail "enqueue of wave $1 failed"
}

start_consumer
start_relay
for ((w = 1; w <= WAVES; w++)); do
    enqueue_wave $w
    sleep 0.4
done
total=$((N_AGG * WAVES * PER_WAVE))
wait_until '(( $(psql_q "SELECT count(*) FROM effects") >= total ))' 60 ||
    { tail -n 30 "$CONSUMER_LOG" >&2; fail "only $(psql_q "SELECT count(*) FROM effects") of $total effects after 60 s"; }
wait_until '(( $(psql_q "SELECT count(*) FROM postbox.inbox") >= total ))' 30 || fail "inbox incomplete"
stop_relay
stop_consumer

effects=$(psql_q "SELECT count(*) FROM effects")
distinct=$(psql_q "SELECT count(DISTINCT (agg, seq)) FROM effects")
out_of_order=$(psql_q "SELECT count(*) FROM (SELECT seq, row_number() OVER (PARTITION BY agg ORDER BY n) AS rn FROM effects) x WHERE seq <> rn")
failures_logged=$(grep -c 'attempt [0-9]* failed' "$CONSUMER_LOG" || true)
dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead")
left_failures=$(psql_q "SELECT count(*) FROM postbox.inbox_failures")
# seconds between the last effect of the other aggregates and agg-0's first event
gap=$(psql_q "SELECT round(extract(epoch FROM (SELECT applied_at FROM effects WHERE agg = 'agg-0' AND seq = 1)
                                      - (SELECT max(applied_at) FROM effects WHERE agg <> 'agg-0'))::numeric, 3)")
# the slowest of the other aggregates' events, commit to effect
slowest=$(psql_q "SELECT round(max(extract(epoch FROM e.applied_at - o.created_at))::numeric, 3)
                    FROM effects e JOIN postbox.outbox_all o
                      ON o.aggregate_id = e.agg AND (o.payload->>'seq')::int = e.seq
                   WHERE e.agg <> 'agg-0'")
a0_wait=$(psql_q "SELECT round(extract(epoch FROM e.applied_at - o.created_at)::numeric, 3)
                    FROM effects e JOIN postbox.outbox_all o
                      ON o.aggregate_id = e.agg AND (o.payload->>'seq')::int = e.seq
                   WHERE e.agg = 'agg-0' AND e.seq = 1")
say "effects $effects ($distinct distinct) of $total; out of order: $out_of_order; failed attempts logged: $failures_logged; dead $dead"
say "agg-0's first event applied $a0_wait s after its commit, $gap s after the last effect of the other aggregates; their slowest event took $slowest s"

((effects == total && distinct == total)) || fail "$effects effects ($distinct distinct), expected $total once each"
((out_of_order == 0)) || fail "$out_of_order effects out of their aggregate's order: $(psql_q "SELECT agg, string_agg(seq::text, ',' ORDER BY n) FROM effects GROUP BY agg HAVING bool_or(false) OR agg = 'agg-0'")"
((failures_logged == 2)) || fail "$failures_logged failed attempts logged, expected 2"
((dead == 0 && left_failures == 0)) || fail "dead letters $dead, inbox_failures rows $left_failures (expected none)"
[[ $(psql_q "SELECT $gap >= 1.0") == t ]] || fail "the other aggregates finished only $gap s before agg-0's first event: delayed by its backoff?"
[[ $(psql_q "SELECT $slowest < 2.0") == t ]] || fail "an event of another aggregate took $slowest s: delayed by agg-0's backoff"
[[ $(psql_q "SELECT $a0_wait >= 3.0") == t ]] || fail "agg-0's first event was applied after $a0_wait s, before two backoffs (>= 3 s) could have passed"
