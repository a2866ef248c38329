#!/usr/bin/env bash
# The online migration to the partitioned layout (README, "Partitioned storage"): a schema in
# use on the default layout, with published history, dead letters and dead inbox messages, gets
# `postbox init --partition-by '1 day'` while the relay publishes and producers write:
#   - init prepares each table without blocking writers (a validated CHECK constraint, a unique
#     index built concurrently), then attaches it as the partition <table>_legacy: no copy
#   - every event arrives exactly once and in order per aggregate across the switch; the
#     published history holds every event; dead-letter ids go on from the old numbering
#   - `postbox check` finds no partition missing (the legacy partition covers the days it
#     spans); the retention keeps the legacy partition until its bound is past the retention
source "$(dirname "$0")/lib.sh"
unset POSTBOX_TEST_PARTITION_BY
pb_init
setup_queue '#'
start_relay --set relay.batch_size=50
N_AGG=50
enqueue_seq $N_AGG 1 20
wait_until '[[ $(pending_count) == 0 ]]' 60 || fail "the first events were not published"
psql_q "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, event_type,
            payload, headers, created_at, attempts, reason)
        SELECT -i, gen_random_uuid(), 'old', 'o', 't', '{}', '{}', now(), 1, 'test' FROM generate_series(1, 5) i;
        INSERT INTO postbox.inbox_dead (consumer, message_id, message_type, body, error, attempts)
        VALUES ('c', 'm-1', 't', '\\x7b7d', 'test', 5)" >/dev/null
last_dead=$(psql_q "SELECT max(id) FROM postbox.dead_letters")
produce() {
    for ((k = 21; k <= 60; k += 5)); do enqueue_seq $N_AGG $k $((k + 4)); sleep 0.2; done
}
produce &
PRODUCER=$!
sleep 0.3
say "init --partition-by '1 day' while the relay publishes and producers write"
out=$("$POSTBOX_BIN" init --partition-by '1 day' 2>&1) || fail "the online migration failed: $out"
grep -q 'postbox.outbox_published holds rows: CREATE UNIQUE INDEX CONCURRENTLY' <<<"$out" ||
    fail "init did not prepare the history online: $out"
wait "$PRODUCER" || fail "a producer transaction failed during the migration"
for t in outbox_published dead_letters inbox_dead; do
    [[ $(psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.$t'::regclass") == p ]] ||
        fail "postbox.$t is not partitioned"
    [[ $(psql_q "SELECT count(*) FROM postbox.${t}_legacy") -gt 0 ]] || fail "postbox.${t}_legacy holds no rows"
done
total=$((N_AGG * 60))
drain_exactly_once "$PB_TMP/got" $total
wait_until '[[ $(pending_count) == 0 ]]' 60 || fail "events left pending"
[[ $(published_count) == "$total" ]] || fail "published history holds $(published_count) of $total events"
new_dead=$(psql_q "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id,
                       event_type, payload, headers, created_at, attempts, reason)
                   VALUES (-9, gen_random_uuid(), 'new', 'n', 't', '{}', '{}', now(), 1, 'test') RETURNING id" | head -1)
((new_dead > last_dead)) || fail "dead-letter id $new_dead after the migration does not follow $last_dead"
psql_q "SELECT count(*) FROM postbox.outbox_all" >/dev/null || fail "the outbox_all view is gone"
# 4: the three history tables and the inbox, which is empty here (sql/026)
out=$("$POSTBOX_BIN" check --all 2>&1) || true
grep -q 'no partition for the interval' <<<"$out" && fail "postbox check reports a missing partition: $out"
grep -q 'partitions ahead of the 4 partitioned tables are in place' <<<"$out" || fail "postbox check: $out"
out=$("$POSTBOX_BIN" purge --older-than 1d --outbox-only 2>&1) || fail "postbox purge failed: $out"
[[ $out == *"postbox.outbox_published: dropped 0 partitions"* ]] || fail "the legacy partition went before its bound: $out"
[[ $(published_count) == "$total" ]] || fail "the purge took recent history"
stop_relay
say "PASS"
