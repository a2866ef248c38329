#!/usr/bin/env bash
# The partitioned layout (README, "Partitioned storage"; sql/020_partitions.sql):
#   1. `postbox init --partition-by '1 day'`: published history and both dead-letter tables
#      become range-partitioned (a DEFAULT partition, today and 3 days ahead), so does the
#      empty inbox (by its ids' time: inbox_partitions tests it), the outbox_all view and the grants survive; a bad interval is refused
#   2. the relay and the consumer (least-privilege roles) run with 7-day retentions while
#      producers write 4,000 events; meanwhile partitions 10 and 9 days old are made (a
#      backdated day boundary) and filled in every table: the janitors drop them while both
#      run, a row of the DEFAULT partition goes by DELETE, and every event is handled exactly
#      once, in order per aggregate
#   3. a row for a time without a partition is stored in the DEFAULT partition (no failure);
#      `postbox check` reports a missing partition ahead (dropped, or detached under its name),
#      and not once it is made again
#   4. `postbox purge` on the partitioned layout drops partitions too
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
unset POSTBOX_TEST_PARTITION_BY

say "1. init --partition-by"
out=$("$POSTBOX_BIN" init --partition-by 'one month' 2>&1) && fail "init took a bad interval: $out"
[[ $out == *"one month"* ]] || fail "the error does not name the bad interval: $out"
out=$("$POSTBOX_BIN" init --partition-by '1 day' 2>&1) || fail "postbox init --partition-by failed: $out"
kind() { psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.$1'::regclass"; }
for t in outbox_published dead_letters inbox_dead; do
    [[ $(kind $t) == p ]] || fail "postbox.$t is not partitioned"
    n=$(psql_q "SELECT count(*) FROM postbox.partitions_of('$t') WHERE lower_bound >= postbox.partition_lower('1 day', now())")
    ((n == 4)) || fail "postbox.$t has $n partitions from today on, expected 4 (today and 3 ahead)"
    [[ $(psql_q "SELECT count(*) FROM postbox.partitions_of('$t') WHERE lower_bound IS NULL") == 1 ]] ||
        fail "postbox.$t has no DEFAULT partition"
done
[[ $(kind inbox) == p ]] || fail "postbox.inbox was not partitioned"
psql_q "SELECT count(*) FROM postbox.outbox_all" >/dev/null || fail "the outbox_all view is gone"
out=$("$POSTBOX_BIN" init --partition-by '1 day' 2>&1) || fail "a second init failed: $out"
out=$("$POSTBOX_BIN" init --partition-by '2 days' 2>&1) && fail "init changed the interval: $out"
[[ $out == *"partitioned by 1 day already"* ]] || fail "unclear error for another interval: $out"

use_least_privilege
psql_q "CREATE TABLE handled (n bigserial PRIMARY KEY, agg text NOT NULL, seq int NOT NULL);
        GRANT INSERT ON handled TO pb_it_consumer; GRANT USAGE ON SEQUENCE handled_n_seq TO pb_it_consumer"
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=parts
export POSTBOX_CONSUME_HANDLER="INSERT INTO handled (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
setup_queue '#'

say "2. retention drops backdated partitions while the relay and the consumer run"
start_consumer --set consume.purge_interval=1s --set consume.dead_retention=7d
start_relay --set relay.purge_interval=1s --set relay.retention=7d --set relay.dead_letter_retention=7d \
    --set relay.batch_size=100
N_AGG=40 PER_TX=10 N_TX=10 # 40 aggregates x 10 seqs per transaction x 10 transactions
produce() {
    for ((t = 0; t < N_TX; t++)); do
        psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1',
                    jsonb_build_object('agg', 'agg-' || a, 'seq', $t * $PER_TX + k)))
                FROM generate_series(1, $PER_TX) k, generate_series(1, $N_AGG) a" >/dev/null
        sleep 0.3
    done
}
produce &
PRODUCER=$!
# a backdated day boundary: partitions of 10 and 9 days ago, rows in each table
psql_q "SELECT postbox.partition_create(t, now() - d * interval '1 day')
        FROM unnest(ARRAY['outbox_published', 'dead_letters', 'inbox_dead']) t, unnest(ARRAY[10, 9]) d" >/dev/null
psql_q "INSERT INTO postbox.outbox_published (id, event_id, aggregate_type, aggregate_id, event_type,
            payload, headers, created_at, published_at, attempts)
        SELECT -i, gen_random_uuid(), 'old', 'o', 't', '{}', '{}', now() - interval '10 days',
               now() - (9 + i % 2) * interval '1 day' - interval '1 hour', 0 FROM generate_series(1, 100) i;
        INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, event_type,
            payload, headers, created_at, attempts, reason, dead_at)
        SELECT -i, gen_random_uuid(), 'old', 'o', 't', '{}', '{}', now(), 1, 'test',
               now() - (9 + i % 2) * interval '1 day' - interval '1 hour' FROM generate_series(1, 10) i;
        INSERT INTO postbox.inbox_dead (consumer, message_id, message_type, body, error, attempts, dead_at)
        SELECT 'parts', 'old-' || i, 't', '\\x7b7d', 'test', 5,
               now() - (9 + i % 2) * interval '1 day' - interval '1 hour' FROM generate_series(1, 10) i" >/dev/null
# where the row went, from the INSERT itself: the relay's janitor, purging every second, may
# delete it (20 days old) before another statement looks
[[ $(psql_q "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id,
                 event_type, payload, headers, created_at, attempts, reason, dead_at)
             VALUES (-99, gen_random_uuid(), 'old', 'default', 't', '{}', '{}', now(), 1, 'test',
                     now() - interval '20 days') RETURNING tableoid::regclass") == *dead_letters_default ]] ||
    fail "a dead letter of a time without a partition is not in the DEFAULT partition"
old_parts() { psql_q "SELECT count(*) FROM postbox.partitions_of('$1') WHERE upper_bound <= now() - interval '7 days'"; }
for t in outbox_published dead_letters inbox_dead; do
    wait_until "(( \$(old_parts $t) == 0 ))" 30 || fail "the old partitions of postbox.$t were not dropped"
done
pid_alive "$PRODUCER" || say "(the producer finished before the drops: the drops ran with the relay and the consumer at work all the same)"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE id < 0") == 0 ]] || fail "old history rows left"
wait_until "[[ \$(psql_q \"SELECT count(*) FROM postbox.dead_letters WHERE outbox_id < 0\") == 0 ]]" 20 ||
    fail "old dead letters left (the DEFAULT partition's by DELETE)"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE message_id LIKE 'old-%'") == 0 ]] || fail "old dead messages left"
grep -q 'dropped 2 partitions of postbox.outbox_published' "$PB_RELAY_LOG" || fail "the relay did not log the drop"
grep -q 'dropped 2 partitions of postbox.inbox_dead' "$CONSUMER_LOG" || fail "the consumer did not log the drop"
wait "$PRODUCER" || fail "a producer transaction failed"
total=$((N_AGG * PER_TX * N_TX))
wait_until "[[ \$(psql_q 'SELECT count(*) FROM handled') -ge $total ]]" 120 ||
    fail "handled $(psql_q 'SELECT count(*) FROM handled') of $total events"
sleep 1
[[ $(pending_count) == 0 ]] || fail "events left pending"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published") == "$total" ]] || fail "published history does not hold every event"
[[ $(psql_q "SELECT count(*) FROM handled") == "$total" ]] || fail "$(psql_q 'SELECT count(*) - count(DISTINCT (agg, seq)) FROM handled') event(s) handled twice"
[[ $(psql_q "SELECT count(DISTINCT (agg, seq)) FROM handled") == "$total" ]] || fail "events lost"
bad=$(psql_q "SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY agg ORDER BY n) AS back FROM handled) x WHERE back")
((bad == 0)) || fail "$bad event(s) handled out of their aggregate's order"
say "all $total events handled once, in order, while 2 old partitions of each table were dropped"
stop_relay
stop_consumer

say "3. no partition: the DEFAULT partition takes the row; check reports the gap"
made=$(psql_q "SELECT postbox.partition_create('dead_letters', now() + interval '30 days')" 2>/dev/null)
psql_q "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, event_type,
            payload, headers, created_at, attempts, reason, dead_at)
        VALUES (-98, gen_random_uuid(), 'late', 'x', 't', '{}', '{}', now(), 1, 'test', now() + interval '40 days')" >/dev/null ||
    fail "a dead letter for a time without a partition was refused"
tomorrow=$(psql_q "SELECT partition FROM postbox.partitions_of('inbox_dead') WHERE lower_bound = postbox.partition_lower('1 day', now() + interval '1 day')")
[[ -n $tomorrow ]] || fail "no partition of tomorrow for postbox.inbox_dead"
psql_q "DROP TABLE $tomorrow" >/dev/null
out=$("$POSTBOX_BIN" check --all 2>&1) && fail "postbox check passed with a partition missing: $out"
grep -q 'postbox.inbox_dead has no partition for the interval from' <<<"$out" ||
    fail "postbox check did not report the missing partition: $out"
say "check: $(grep -m1 'no partition for the interval' <<<"$out")"
# the check looks for the partition by its name first (schema 28): a table of that name that is
# not a partition of the table (detached) is no partition
psql_q "SELECT postbox.partitions_create_ahead()" >/dev/null
psql_q "ALTER TABLE postbox.inbox_dead DETACH PARTITION $tomorrow" >/dev/null
out=$("$POSTBOX_BIN" check --all 2>&1) && fail "postbox check passed with a partition detached: $out"
grep -q 'postbox.inbox_dead has no partition for the interval from' <<<"$out" ||
    fail "postbox check did not report the detached partition: $out"
psql_q "DROP TABLE $tomorrow" >/dev/null
psql_q "SELECT postbox.partitions_create_ahead()" >/dev/null
out=$("$POSTBOX_BIN" check --all 2>&1) || true
grep -q 'no partition for the interval' <<<"$out" && fail "postbox check still reports a missing partition: $out"
grep -q 'partitions ahead of the 4 partitioned tables are in place' <<<"$out" ||
    fail "postbox check does not say the partitions are in place: $out"

say "4. postbox purge drops partitions on the partitioned layout"
psql_q "SELECT postbox.partition_create('outbox_published', now() - interval '12 days')" >/dev/null
out=$("$POSTBOX_BIN" purge --older-than 7d --outbox-only 2>&1) || fail "postbox purge failed: $out"
[[ $out == *"postbox.outbox_published: dropped 1 partitions"* ]] || fail "postbox purge did not drop the old partition: $out"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published") == "$total" ]] || fail "postbox purge lost recent history"
say "PASS"
