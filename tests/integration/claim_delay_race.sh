#!/usr/bin/env bash
# The claim (postbox.claim) decides from one view of the outbox whether any event waits and
# which rows it returns: a transaction that commits a delayed event and a later event of the
# same aggregate while a claim runs must not have the later one returned unparked (the relay
# would publish it ahead of its delayed predecessor). pgbench drives one producer, which
# alternately empties the outbox and commits such a pair, against claimers on the three paths
# of the claim (every shard with nothing in flight, ids in flight, one shard of two); every row
# a claim returns unparked is recorded. A correct claim returns none: each row the producer
# writes is either delayed or behind a delayed one.
source "$(dirname "$0")/lib.sh"

pb_init
shard=$(psql_q "SELECT postbox.shard_of('order', 'a', 2)")
psql_q "CREATE TABLE race_hits (path text, id bigint, claimed_at timestamptz DEFAULT clock_timestamp())" >/dev/null

cat >"$PB_TMP/produce.sql" <<'SQL'
DELETE FROM postbox.outbox;
BEGIN;
INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, available_at)
VALUES ('order', 'a', 'created.v1', '{}', now() + interval '1 hour');
INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'a', 'paid.v1', '{}');
COMMIT;
SQL
claim_script() { # PATH LIMIT SHARDS OWNED IN_FLIGHT
    cat >"$PB_TMP/claim-$1.sql" <<SQL
INSERT INTO race_hits (path, id)
SELECT '$1', c.id FROM postbox.claim($2, $3, '$4'::integer[], '$5'::int8multirange) c WHERE NOT c.parked;
SQL
}
claim_script all 100 1 '{}' '{}'
claim_script in_flight 100 1 '{}' '{[1,2]}'
claim_script shard 100 2 "{$shard}" '{}'

secs=${PB_RACE_SECONDS:-6}
pgbench -n -T "$secs" -c 4 -j 2 -f "$PB_TMP/produce.sql@2" -f "$PB_TMP/claim-all.sql@1" \
    -f "$PB_TMP/claim-in_flight.sql@1" -f "$PB_TMP/claim-shard.sql@1" \
    "$POSTBOX_PG_DSN" >"$PB_TMP/pgbench.out" 2>&1 || {
    cat "$PB_TMP/pgbench.out"
    fail "pgbench failed"
}
grep -E '^(number of transactions actually processed|tps)' "$PB_TMP/pgbench.out" | sed 's/^/    /'
hits=$(psql_q "SELECT coalesce(string_agg(path || ' ' || n, ', '), 'none') FROM (SELECT path, count(*) n FROM race_hits GROUP BY path) h")
say "rows returned unparked behind a delayed event: $hits"
[[ $hits == none ]] || fail "the claim returned events ahead of a delayed event of their aggregate ($hits)"
say "no claim returned an event past a delayed predecessor committed beside it"
