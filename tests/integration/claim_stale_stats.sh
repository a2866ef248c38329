#!/usr/bin/env bash
# The wake's and the claim's cost is bounded by the batch size whatever the planner statistics
# say. The outbox is analyzed while empty (its normal state), then a backlog of 200,000 events
# arrives and nothing analyzes it again (autovacuum is off for the table, standing for the
# minutes before it gets there). Each statement is run under EXPLAIN (ANALYZE, BUFFERS): the
# shared buffers it touches must stay below a bound proportional to the batch size, with and
# without waiting events, with ids in flight, and with relay.shards = 4 and one shard owned,
# also when that shard has nothing pending while the others hold the whole backlog.
#
# PB_CLAIM_STMT / PB_WAKE_STMT replace the statements measured (parameters $1..$4 as in
# src/store/outbox_sql.h), e.g. to show that the SQL before schema version 6 fails this test;
# PB_CLAIM_REPORT=1 reports every figure instead of stopping at the first over its bound.
source "$(dirname "$0")/lib.sh"

N=${PB_CLAIM_BACKLOG:-200000}
BATCH=500
CLAIM=${PB_CLAIM_STMT:-'SELECT * FROM postbox.claim($1, $2, $3, $4)'}
WAKE=${PB_WAKE_STMT:-'SELECT postbox.wake($1)'}
# per row read at most its heap page, a probe of the waiting rows and its index entries; per
# row written (woken, parked) its new version and an entry in each index, about 30
BOUND=$((3 * BATCH + 100))
WRITE=40

pb_init
psql_q "ALTER TABLE postbox.outbox SET (autovacuum_enabled = off); ANALYZE postbox.outbox"
# the index for relay.shards = 4, as a relay starting with that count creates it (an index build
# also refreshes the table's row count, so it comes before the backlog)
while read -r ddl; do
    [[ -n $ddl ]] || continue
    say "shard index: $ddl"
    psql_q "$ddl"
done <<<"$(psql_q "SELECT postbox.shard_index_ddl(4)")"
[[ -z $(psql_q "SELECT postbox.shard_index_ddl(4)") ]] || fail "the shard index is still missing after its DDL ran"
# shards 0, 1 and 2 of 4 get the backlog, shard 3 nothing
psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', 'agg-' || (g % 20000), 'created.v1',
               jsonb_build_object('seq', g, 'pad', repeat('x', 200))
        FROM generate_series(1, 2 * $N) g
        WHERE postbox.shard_of('order', 'agg-' || (g % 20000), 4) <> 3
        ORDER BY g LIMIT $N"
stats_empty() {
    [[ $(psql_q "SELECT reltuples <= 0 FROM pg_class WHERE oid = 'postbox.outbox'::regclass") == t ]] ||
        fail "the planner statistics of postbox.outbox were refreshed; the test proves nothing"
}
stats_empty
say "$(psql_q "SELECT count(*) FROM postbox.outbox") pending rows, statistics still say the outbox is empty"

# measure NAME TYPES STMT ARGS: runs STMT under EXPLAIN (ANALYZE, BUFFERS), rolled back, after a
# first run (rolled back too) that warmed the session's caches: the functions plan their
# statements at their first call, reading the catalogs; sets BUF (shared buffers hit + read),
# MS (execution time) and ROWS (rows returned)
measure() {
    local name=$1 types=$2 stmt=$3 args=$4 json
    json=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f - <<EOF
BEGIN;
PREPARE s($types) AS $stmt;
SAVEPOINT warm;
\o /dev/null
EXECUTE s($args);
\o
ROLLBACK TO warm;
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE s($args);
ROLLBACK;
EOF
    ) || fail "$name: the statement failed"
    read -r BUF MS ROWS < <(python3 -c 'import json,sys
p = json.load(sys.stdin)[0]
print(p["Plan"]["Shared Hit Blocks"] + p["Plan"]["Shared Read Blocks"], p["Execution Time"], p["Plan"]["Actual Rows"])' <<<"$json")
    say "$name: $ROWS rows, $BUF buffers, $MS ms"
}
claim() { measure "claim $*" 'int, int, int[], int8multirange' "$CLAIM" "$1, $2, '$3', '$4'"; }
wake() { measure "wake $1" 'int' "$WAKE" "$1"; }
bounded() { # BOUND WHAT
    ((BUF <= $1)) && return 0
    [[ ${PB_CLAIM_REPORT:-0} == 1 ]] || fail "$2 touched $BUF buffers (bound $1) over a backlog of $N rows"
    say "OVER BOUND: $2 touched $BUF buffers (bound $1)"
    OVER=1
}
OVER=0

claim $BATCH 1 '{}' '{}'
bounded $BOUND "a claim of $BATCH"
((ROWS == BATCH)) || fail "the claim returned $ROWS rows, expected $BATCH"
wake $BATCH
bounded 20 "a wake with no event waiting"

claim $BATCH 1 '{}' "{[1,$((2 * BATCH))]}"
bounded $((BOUND + 3 * 2 * BATCH)) "a claim of $BATCH behind $((2 * BATCH)) ids in flight"

# 300 events wait for their retry, 100 of them due; the events behind them are parked
psql_q "UPDATE postbox.outbox SET waiting = true, attempts = 1,
               next_attempt_at = now() + CASE WHEN id % 3 = 0 THEN interval '-1 s' ELSE interval '1 h' END
        WHERE id IN (SELECT id FROM postbox.outbox ORDER BY id LIMIT 300 OFFSET 100)"
claim $BATCH 1 '{}' '{}'
bounded $BOUND "a claim of $BATCH with events waiting"
wake $BATCH
bounded $((WRITE * 100 + 100)) "a wake of the 100 due events"
stats_empty

claim $BATCH 4 '{1}' '{}'
bounded $BOUND "a claim of $BATCH from shard 1 of 4"
((ROWS == BATCH)) || fail "the sharded claim returned $ROWS rows, expected $BATCH"
claim $BATCH 4 '{0,2,3}' '{}'
bounded $BOUND "a claim of $BATCH from shards 0, 2, 3 of 4"
claim $BATCH 4 '{3}' '{}'
((ROWS == 0)) || fail "the claim of the empty shard 3 returned $ROWS rows"
bounded 50 "a claim of shard 3 of 4, empty while shards 0, 1, 2 hold the backlog,"
stats_empty
((OVER == 0)) || fail "some statements were over their bounds (above)"
say "every claim and wake was bounded by the batch size"
