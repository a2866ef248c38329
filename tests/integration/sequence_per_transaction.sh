#!/usr/bin/env bash
# The numbering of schema 23 (sql/023_numbering_per_transaction.sql): counted in a
# transaction-local slot, the aggregate's row written about once per transaction. It keeps the
# numbering's promises:
#   1. concurrent producers (pgbench, 8 clients, least-privilege role) of few aggregates, several
#      events per transaction, a savepoint rolled back in each, some transactions rolled back:
#      per aggregate the committed numbers are 1..n, and in commit order (as a test_decoding slot,
#      like the cdc relay, sees them) they come 1, 2, 3, ...: each transaction's numbers follow
#      the previous transaction's of the aggregate
#   2. ROLLBACK TO SAVEPOINT after some events, with the aggregate opened before or inside it
#   3. one aggregate with 5,000 events in a transaction writes its row at most 3 times before
#      commit; a 20,000-row INSERT ... SELECT over 4 aggregates numbers 1..5,000 in id order
#   4. postbox.emit and the outbox share the counter inside a transaction
#   5. a transaction of 400 aggregates (more than the slots), 3 events each
#   6. SET CONSTRAINTS ALL IMMEDIATE, before and between events
#   7. a concurrent producer of the aggregate waits at its first event for the first transaction
#      and continues its numbering
#   8. a slot lost between events (RESET ALL) is refused at commit, nothing is numbered twice
source "$(dirname "$0")/lib.sh"

SLOT=pb_sequence_per_tx
pb_init
use_least_privilege
psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT pg_drop_replication_slot('$SLOT') FROM pg_replication_slots WHERE slot_name = '$SLOT'" >/dev/null
on_exit "psql -XAtq -d '$POSTBOX_PG_DSN' -c \"SELECT pg_drop_replication_slot('$SLOT')\" >/dev/null 2>&1"
psql_q "SELECT 1 FROM pg_create_logical_replication_slot('$SLOT', 'test_decoding')" >/dev/null

# per aggregate of type $1: "aggregates gapless counter-rows" where gapless counts those numbered
# 1..n (in id order unless $2 = any: concurrent transactions take ids before they wait for the
# aggregate's row) and counter-rows those whose row says n
numbered() {
    psql_q "SELECT count(*), count(*) FILTER (WHERE n = hi AND lo = 1 AND d = n AND (ordered OR '${2:-}' = 'any')),
                   count(*) FILTER (WHERE hi = (SELECT last_sequence FROM postbox.aggregate_sequences s
                                                WHERE s.aggregate_type = '$1' AND s.aggregate_id = a.aggregate_id))
            FROM (SELECT aggregate_id, count(*) AS n, min(sequence) AS lo, max(sequence) AS hi,
                         count(DISTINCT sequence) AS d, bool_and(sequence = rn) AS ordered
                  FROM (SELECT aggregate_id, sequence,
                               row_number() OVER (PARTITION BY aggregate_id ORDER BY id) AS rn
                        FROM postbox.outbox WHERE aggregate_type = '$1') r
                  GROUP BY aggregate_id) a" | tr '|' ' '
}

# ---- 1. concurrent producers ----
cat >"$PB_TMP/tx.sql" <<'EOF'
\set a random(1, 4)
\set k random(1, 6)
BEGIN;
SELECT count(postbox.enqueue('pt', :a::text, 'e.v1', '{}')) FROM generate_series(1, :k);
SAVEPOINT s;
SELECT count(postbox.enqueue('pt', :a::text, 'e.v1', '{"undone": true}')) FROM generate_series(1, 2);
SELECT count(postbox.enqueue('pt', (:a + 10)::text, 'e.v1', '{"undone": true}')) FROM generate_series(1, 2);
ROLLBACK TO SAVEPOINT s;
INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'pt', (:a + 10)::text, 'e.v1', '{}' FROM generate_series(1, :k);
SELECT postbox.enqueue('pt', :a::text, 'e.v1', '{}');
\if :k = 6
ROLLBACK;
\else
COMMIT;
\endif
EOF
out=$(pgbench -n -c 8 -j 2 -t 150 -f "$PB_TMP/tx.sql" "$PB_PRODUCER_DSN" 2>&1) || fail "pgbench failed: $out"
read -r aggs gapless counters <<<"$(numbered pt any)"
undone=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE payload ? 'undone'")
total=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'pt'")
say "8 clients, 1,200 transactions: $total events over $aggs aggregates, $gapless numbered 1..n, $counters counter rows right, $undone rolled-back events"
((aggs == 8 && gapless == 8 && counters == 8 && undone == 0 && total > 1000)) ||
    fail "concurrent producers: $gapless of $aggs aggregates gapless, $counters counters right, $undone rolled-back events kept"
# commit order: each committed insert of the outbox, in the order the slot streams them
psql_q "SELECT data FROM pg_logical_slot_get_changes('$SLOT', NULL, NULL) WHERE data LIKE 'table postbox.outbox: INSERT:%'" |
    sed -n "s/.* aggregate_type\[text\]:'pt' aggregate_id\[text\]:'\([0-9]*\)' .* sequence\[bigint\]:\([0-9]*\).*/\1 \2/p" >"$PB_TMP/commit-order"
streamed=$(wc -l <"$PB_TMP/commit-order")
((streamed == total)) || fail "the slot streamed $streamed events of aggregate type pt, the outbox has $total"
bad=$(awk '{ if ($2 != last[$1] + 1) print "aggregate " $1 ": " $2 " after " last[$1]; last[$1] = $2 }' "$PB_TMP/commit-order" | head -3)
[[ -z $bad ]] || fail "numbers not in commit order: $bad"
say "in commit order every aggregate's numbers come 1, 2, 3, ..."

# ---- 2. savepoints ----
psql_q "BEGIN;
        SELECT postbox.enqueue('sp', 'a', 'e.v1', '{}') FROM generate_series(1, 3);
        SAVEPOINT s1;
        SELECT postbox.enqueue('sp', 'a', 'e.v1', '{\"undone\": true}') FROM generate_series(1, 4);
        SELECT postbox.enqueue('sp', 'b', 'e.v1', '{\"undone\": true}') FROM generate_series(1, 4);
        ROLLBACK TO SAVEPOINT s1;
        SELECT postbox.enqueue('sp', 'a', 'e.v1', '{}');
        SAVEPOINT s2;
        SELECT postbox.enqueue('sp', 'c', 'e.v1', '{}');
        RELEASE SAVEPOINT s2;
        SAVEPOINT s3;
        SELECT postbox.enqueue('sp', 'b', 'e.v1', '{}') FROM generate_series(1, 2);
        SAVEPOINT s4;
        SELECT postbox.enqueue('sp', 'b', 'e.v1', '{\"undone\": true}');
        ROLLBACK TO SAVEPOINT s4;
        SELECT postbox.enqueue('sp', 'b', 'e.v1', '{}');
        COMMIT;
        SELECT postbox.enqueue('sp', x, 'e.v1', '{}') FROM unnest('{a,b,c}'::text[]) x;" >/dev/null
got=$(psql_q "SELECT string_agg(aggregate_id || ':' || seqs, ' ' ORDER BY aggregate_id)
              FROM (SELECT aggregate_id, string_agg(sequence::text, ',' ORDER BY id) AS seqs
                    FROM postbox.outbox WHERE aggregate_type = 'sp' GROUP BY aggregate_id) s")
counters=$(psql_q "SELECT string_agg(aggregate_id || ':' || last_sequence, ' ' ORDER BY aggregate_id)
                   FROM postbox.aggregate_sequences WHERE aggregate_type = 'sp'")
[[ $got == "a:1,2,3,4,5 b:1,2,3,4 c:1,2" && $counters == "a:5 b:4 c:2" ]] ||
    fail "savepoints rolled back: numbers $got, counters $counters (expected a:1..5 b:1..4 c:1,2)"
say "savepoints rolled back: $got"

# ---- 3. one row write per transaction; a large INSERT ... SELECT ----
writes=$(psql_q "BEGIN;
                 SELECT count(postbox.enqueue('w', 'one', 'e.v1', '{}')) FROM generate_series(1, 5000) \\g /dev/null
                 SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'postbox.aggregate_sequences'::regclass;
                 COMMIT;")
((writes <= 3)) || fail "5,000 events of one aggregate wrote its row $writes times before commit"
psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
            SELECT 'bulk', (i % 4)::text, 'e.v1', jsonb_build_object('i', i) FROM generate_series(0, 19999) i"
read -r aggs gapless counters <<<"$(numbered bulk)"
((aggs == 4 && gapless == 4 && counters == 4)) || fail "INSERT ... SELECT of 20,000 rows: $gapless of $aggs gapless, $counters counters"
wrong=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'bulk' AND sequence <> (payload ->> 'i')::bigint / 4 + 1")
((wrong == 0)) || fail "$wrong rows of the INSERT ... SELECT numbered out of their order"
read -r n c <<<"$(psql_q "SELECT count(*), max(last_sequence) FROM postbox.aggregate_sequences WHERE aggregate_type = 'w'" | tr '|' ' ')"
((n == 1 && c == 5000)) || fail "5,000 events of one aggregate: counter $c"
say "5,000 events of one aggregate: $writes row writes before commit; INSERT ... SELECT of 20,000 numbered 1..5000 x 4"

# ---- 4. emit and the outbox, one counter ----
psql_q "BEGIN;
        SELECT postbox.enqueue('mix', 'm', 'e.v1', '{}');
        SELECT postbox.emit('mix', 'm', 'e.v1', '{}');
        SELECT postbox.enqueue('mix', 'm', 'e.v1', '{}');
        SELECT postbox.emit('mix', 'm', 'e.v1', '{}');
        SELECT postbox.emit('mix', 'm', 'e.v1', '{}');
        COMMIT;
        SELECT postbox.emit('mix', 'm', 'e.v1', '{}');" >/dev/null
rows=$(psql_q "SELECT string_agg(sequence::text, ',' ORDER BY id) FROM postbox.outbox WHERE aggregate_type = 'mix'")
emitted=$(psql_q "SELECT data FROM pg_logical_slot_get_changes('$SLOT', NULL, NULL) WHERE data LIKE 'message: transactional: 1 prefix: postbox,%'" |
    sed -n 's/^[^{]*\({.*}\)$/\1/p' | jq -r 'select(.aggregate_type == "mix") | .sequence' | paste -sd,)
counter=$(psql_q "SELECT last_sequence FROM postbox.aggregate_sequences WHERE aggregate_type = 'mix'")
[[ $rows == 1,3 && $emitted == 2,4,5,6 && $counter == 6 ]] ||
    fail "emit and enqueue in one transaction: rows $rows, emitted $emitted, counter $counter"
say "emit and enqueue share the counter: rows $rows, emitted $emitted"

# ---- 5. more aggregates than slots ----
psql_q "BEGIN;
        SELECT count(postbox.enqueue('many', (i % 400)::text, 'e.v1', '{}')) FROM generate_series(0, 1199) i;
        COMMIT;
        SELECT count(postbox.enqueue('many', (i % 400)::text, 'e.v1', '{}')) FROM generate_series(0, 399) i;" >/dev/null
read -r aggs gapless counters <<<"$(numbered many)"
((aggs == 400 && gapless == 400 && counters == 400)) || fail "400 aggregates in one transaction: $gapless of $aggs gapless, $counters counters"
say "400 aggregates x 3 events in one transaction, then 1 each: numbered 1..4"

# ---- 6. SET CONSTRAINTS ALL IMMEDIATE ----
psql_q "BEGIN;
        SET CONSTRAINTS ALL IMMEDIATE;
        SELECT count(postbox.enqueue('imm', (i % 2)::text, 'e.v1', '{}')) FROM generate_series(1, 7) i;
        SET CONSTRAINTS ALL DEFERRED;
        SELECT count(postbox.enqueue('imm', (i % 2)::text, 'e.v1', '{}')) FROM generate_series(1, 5) i;
        SET CONSTRAINTS ALL IMMEDIATE;
        SELECT count(postbox.enqueue('imm', (i % 2)::text, 'e.v1', '{}')) FROM generate_series(1, 3) i;
        COMMIT;
        SELECT count(postbox.enqueue('imm', (i % 2)::text, 'e.v1', '{}')) FROM generate_series(1, 2) i;" >/dev/null
read -r aggs gapless counters <<<"$(numbered imm)"
((aggs == 2 && gapless == 2 && counters == 2)) || fail "SET CONSTRAINTS ALL IMMEDIATE: $gapless of $aggs gapless, $counters counters"
say "SET CONSTRAINTS ALL IMMEDIATE between events: numbered 1..n"

# ---- 7. a second transaction of the aggregate waits, then continues ----
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" \
    -c "BEGIN" -c "SELECT count(postbox.enqueue('wait', 'w', 'e.v1', '{\"tx\": 1}')) FROM generate_series(1, 3)" \
    -c "SELECT pg_sleep(2)" -c "SELECT count(postbox.enqueue('wait', 'w', 'e.v1', '{\"tx\": 1}')) FROM generate_series(1, 2)" \
    -c "COMMIT" >/dev/null &
first=$!
PB_PIDS+=("$first")
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND state = 'active' AND datname = current_database() AND pid <> pg_backend_pid()\") == 1 ]]" 10 ||
    fail "the first transaction did not start"
t0=$(date +%s%N)
psql_q "BEGIN; SELECT count(postbox.enqueue('wait', 'w', 'e.v1', '{\"tx\": 2}')) FROM generate_series(1, 2); COMMIT;" >/dev/null
waited=$((($(date +%s%N) - t0) / 1000000))
wait "$first" || fail "the first transaction failed"
got=$(psql_q "SELECT string_agg((payload ->> 'tx') || ':' || sequence, ',' ORDER BY sequence) FROM postbox.outbox WHERE aggregate_type = 'wait'")
[[ $got == 1:1,1:2,1:3,1:4,1:5,2:6,2:7 ]] || fail "two transactions of one aggregate: $got"
((waited >= 500)) || fail "the second transaction did not wait for the first ($waited ms)"
say "the second transaction waited $waited ms and numbered after the first: $got"

# ---- 8. a lost slot is refused ----
out=$(psql -XAtq -d "$POSTBOX_PG_DSN" -c "BEGIN" -c "SELECT postbox.enqueue('lost', 'l', 'e.v1', '{}') FROM generate_series(1, 4)" \
          -c "RESET ALL" -c "SELECT postbox.enqueue('lost', 'l', 'e.v1', '{}')" -c "COMMIT" 2>&1 || true)
grep -q 'numbering of aggregate (lost, l) in this transaction was lost' <<<"$out" || fail "RESET ALL between events: $out"
n=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'lost'")
((n == 0)) || fail "the refused transaction left $n events"
say "a slot lost between events is refused at commit"
say "ok"
