# The body of consume_selective (RabbitMQ, bindings by event type) and nats_selective (NATS, a
# subject filter), sourced after lib.sh (and nats_lib.sh) once the caller has set up a consumer
# that receives only order.paid.v1: ten orders each emit created.v1 and paid.v1 alternately,
# 20 events each (aggregate_sequence 1..20), relayed by `postbox relay`. The consumer never
# receives the odd numbers; it must not wait for them (consume.gap_timeout is its default, a
# minute): all 100 paid events take effect within 5 s of their commit, each aggregate's in
# order, each once.

export POSTBOX_CONSUME_CONSUMER=payments
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
N_AGG=10 PER_AGG=20

pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL)"

start_consumer
wait_until 'grep -q "ordering: " "$CONSUMER_LOG"' 10 || fail "the consumer did not start: $(tail -n 5 "$CONSUMER_LOG")"
grep -q "ordering: the broker's order per aggregate, no wait" "$CONSUMER_LOG" ||
    fail "the consumer waits for gaps it cannot fill: $(grep 'ordering: ' "$CONSUMER_LOG")"
sleep 0.5 # the consumer's queue or durable consumer exists before the events
start_relay
start=$(date +%s%N)
psql_q "DO \$\$ BEGIN
          FOR k IN 1..$PER_AGG LOOP
            FOR a IN 1..$N_AGG LOOP
              PERFORM postbox.enqueue('order', 'o-' || a,
                                      CASE WHEN k % 2 = 1 THEN 'created.v1' ELSE 'paid.v1' END,
                                      jsonb_build_object('agg', 'o-' || a, 'seq', k));
            END LOOP;
          END LOOP;
        END \$\$" || fail "enqueue failed"
want=$((N_AGG * PER_AGG / 2))
effects() { psql_q "SELECT count(*) FROM effects"; }
wait_until '(($(effects) >= want))' 30 || fail "only $(effects) of $want paid events took effect in 30 s"
took_ms=$((($(date +%s%N) - start) / 1000000))
say "$want of $want paid events took effect $took_ms ms after the commit"
((took_ms <= 5000)) || fail "the paid events took $took_ms ms (more than 5 s)"
sleep 0.5
[[ $(effects) == "$want" ]] || fail "$(effects) effects, expected $want (one per paid event)"
disorder=$(psql_q "SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY agg ORDER BY n) AS back FROM effects) s WHERE back")
odd=$(psql_q "SELECT count(*) FROM effects WHERE seq % 2 = 1")
((disorder == 0)) || fail "$disorder effects out of order"
((odd == 0)) || fail "$odd created events took effect in a consumer of paid events"
grep -q 'gave up waiting' "$CONSUMER_LOG" && fail "the consumer waited for a gap"
grep -q 'handled out of order' "$CONSUMER_LOG" && fail "a message was taken as out of order"
stop_consumer
say "PASS"
