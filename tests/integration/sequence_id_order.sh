#!/usr/bin/env bash
# Within an aggregate, id order is numbering order (schema version 30). A row's id is drawn
# before the numbering trigger locks its aggregate, so two producers of one aggregate could get
# their numbers in the other order than their ids, and the poll relay, which publishes in id
# order, sent N+1 before N. pgbench runs 8 producers on 3 hot aggregates (transactions of one
# event, and of several events of two aggregates); afterwards no aggregate may have a row with a
# higher id and a lower number than another. A lone producer draws its ids without holes.
source "$(dirname "$0")/lib.sh"

pb_init
cat >"$PB_TMP/one.sql" <<'SQL'
SELECT postbox.enqueue('order', 'hot-' || (random() * 2)::int, 'created.v1', '{}');
SQL
cat >"$PB_TMP/several.sql" <<'SQL'
\set a random(0, 1)
\set b :a + 1
BEGIN;
SELECT postbox.enqueue('order', 'hot-' || :a, 'created.v1', '{}');
SELECT postbox.enqueue('order', 'hot-' || :b, 'created.v1', '{}');
SELECT postbox.enqueue('order', 'hot-' || :a, 'created.v1', '{}');
COMMIT;
SQL
secs=${PB_ORDER_SECONDS:-6}
pgbench -n -T "$secs" -c 8 -j 2 -f "$PB_TMP/one.sql@3" -f "$PB_TMP/several.sql@1" \
    "$POSTBOX_PG_DSN" >"$PB_TMP/pgbench.out" 2>&1 || { cat "$PB_TMP/pgbench.out"; fail "pgbench failed"; }
grep -E '^(number of transactions actually processed|number of failed)' "$PB_TMP/pgbench.out" | sed 's/^/    /'
read -r events inverted <<<"$(psql_q "SELECT count(*), count(*) FILTER (WHERE sequence < prev) FROM (
    SELECT sequence, lag(sequence) OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY id) AS prev
    FROM postbox.outbox) x" | tr '|' ' ')"
say "$events events of 3 aggregates from 8 producers; rows numbered below an earlier id: $inverted"
((events > 1000)) || fail "too few events ($events) to tell anything"
[[ $inverted == 0 ]] || fail "$inverted events have a lower number than an event of their aggregate with a lower id"
# the numbers themselves stay gapless per aggregate
psql_q "SELECT count(*) FROM (SELECT aggregate_id, count(*) n, min(sequence) lo, max(sequence) hi
        FROM postbox.outbox GROUP BY aggregate_id) g WHERE hi - lo + 1 <> n" | grep -qx 0 ||
    fail "an aggregate's numbers have a gap or a repeat"
# alone, a producer's ids are dense (no id drawn twice)
before=$(psql_q "SELECT max(id) FROM postbox.outbox")
for ((i = 0; i < 20; i++)); do
    psql_q "SELECT postbox.enqueue('order', 'lone-' || ($i % 3), 'created.v1', '{}')" >/dev/null
done
holes=$(psql_q "SELECT max(id) - $before - count(*) FROM postbox.outbox WHERE id > $before")
say "a lone producer's 20 events: $holes ids skipped"
[[ $holes == 0 ]] || fail "a lone producer skipped $holes ids"
