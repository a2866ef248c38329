#!/usr/bin/env bash
# Producers commit while the relay runs, one event per transaction, some transactions held open
# after their insert: ids then commit out of order (an id taken early commits after later ones
# were relayed), and the relay, claiming without row locks around its batches in flight, must
# still take every late row. Small batches keep three batches in flight most of the time. Every
# event arrives exactly once, each aggregate's events in order (one producer per aggregate).
source "$(dirname "$0")/lib.sh"

PRODUCERS=8 AGGS=2 PER_AGG=250
total=$((PRODUCERS * AGGS * PER_AGG))
pb_init
setup_queue '#'
start_relay --set relay.batch_size=20 --set relay.poll_interval=200ms

produce() { # P: AGGS aggregates of its own, PER_AGG events each; 1 transaction in 20 waits
    psql_q "DO \$\$
        BEGIN
          FOR k IN 1..$PER_AGG LOOP
            FOR a IN 1..$AGGS LOOP
              PERFORM postbox.enqueue('order', 'p$1-agg-' || a, 'created.v1',
                                      jsonb_build_object('seq', k));
              IF random() < 0.05 THEN PERFORM pg_sleep(random() * 0.2); END IF;
              COMMIT;
            END LOOP;
          END LOOP;
        END \$\$" >/dev/null
}
pids=()
for ((p = 1; p <= PRODUCERS; p++)); do
    produce $p &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "producer (pid $pid) failed"; done
[[ $(psql_q 'SELECT count(*) FROM postbox.outbox_all') == "$total" ]] || fail "not every event was enqueued"
say "all $total events committed"

wait_until '[[ $(pending_count) == 0 ]]' 120 || fail "$(pending_count) event(s) still pending"
late=$(psql_q "SELECT count(*) FROM (SELECT published_at, max(published_at) OVER (ORDER BY id
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_max
               FROM postbox.outbox_published) x WHERE published_at < before_max")
((late > 0)) || fail "no event was published before a smaller id: nothing committed out of order"
say "$late event(s) published before a smaller id (committed late) was"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
drain_exactly_once "$PB_TMP/got" $total 120
[[ $(published_count) == "$total" ]] || fail "$(published_count) of $total rows marked published"
say "ok"
