#!/usr/bin/env bash
# The producer's path of schema version 21 (sql/021_producer_cost.sql) keeps what it promised:
#   1. event ids are UUID version 7 (version digit, variant, the millisecond of their writing) for
#      every way of writing a row: postbox.enqueue, a plain INSERT, postbox.capture, the C library;
#      in one session they follow the id (publish) order
#   2. postbox.enqueue (now PL/pgSQL) returns the id of the row it wrote, with its times, and
#      keeps its access list
#   3. a multi-row INSERT into one aggregate is numbered 1..n in id order; a 50,000-event
#      transaction over 10 aggregates is numbered 1..5,000 per aggregate, without gaps or repeats
#   4. the wake-up (version 27): a committed event NOTIFYs postbox_outbox while a relay sleeps (holds
#      the sleep lock), unless postbox.notify = off (session, role or database), and not while no
#      relay sleeps, unless postbox.notify = always; a rolled-back one never does
source "$(dirname "$0")/lib.sh"
pb_init
psql_q "CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
        CREATE TRIGGER orders_changed AFTER INSERT ON orders FOR EACH ROW
            EXECUTE FUNCTION postbox.capture('order', 'id', 'order.created.v1');"

# ---- 1. version 7 ids, from every writer ----
before_ms=$(psql_q "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
psql_q "SELECT postbox.enqueue('ids', 'enqueue-' || i, 'id.v1', '{}') FROM generate_series(1, 500) i;
        INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
            SELECT 'ids', 'insert-' || i, 'id.v1', '{}' FROM generate_series(1, 500) i;
        INSERT INTO orders SELECT 'capture-' || i, 'new' FROM generate_series(1, 500) i;" >/dev/null
"$POSTBOX_PRODUCER_EXAMPLE" "$POSTBOX_PG_DSN" >"$PB_TMP/example.out" 2>&1 ||
    fail "the C producer example failed: $(cat "$PB_TMP/example.out")"
after_ms=$(psql_q "SELECT ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
read -r total bad_version bad_variant out_of_time c_api <<<"$(psql_q "
    SELECT count(*),
           count(*) FILTER (WHERE substr(event_id::text, 15, 1) <> '7'),
           count(*) FILTER (WHERE substr(event_id::text, 20, 1) NOT IN ('8', '9', 'a', 'b')),
           count(*) FILTER (WHERE ('x' || lpad(replace(left(event_id::text, 13), '-', ''), 16, '0'))::bit(64)::bigint
                                  NOT BETWEEN $before_ms AND $after_ms),
           count(*) FILTER (WHERE aggregate_type NOT IN ('ids', 'order'))
    FROM postbox.outbox" | tr '|' ' ')"
say "$total events ($c_api from the C library): $bad_version not version 7, $bad_variant with another variant, $out_of_time outside [$before_ms, $after_ms] ms"
((total >= 1501 && c_api >= 1)) || fail "expected 1,500 events and the C library's: $total, $c_api of it"
((bad_version == 0 && bad_variant == 0)) || fail "ids that are not UUID version 7: $bad_version, $bad_variant"
((out_of_time == 0)) || fail "$out_of_time ids do not carry the millisecond they were written in"
unordered=$(psql_q "SELECT count(*) FROM (SELECT event_id, lag(event_id) OVER (ORDER BY id) AS prev
                                           FROM postbox.outbox WHERE aggregate_type IN ('ids', 'order')) s
                    WHERE left(event_id::text, 13) < left(prev::text, 13)")
((unordered == 0)) || fail "$unordered ids of one session are earlier (ms) than the id before them"
distinct=$(psql_q "SELECT count(DISTINCT event_id) = count(*) FROM postbox.outbox")
[[ $distinct == t ]] || fail "repeated event ids"

# ---- 2. enqueue: the id of its row, its times, its access list ----
got=$(psql_q "CREATE TEMP TABLE e AS SELECT postbox.enqueue('ret', '1', 'ret.v1', '{\"a\": 1}', '{\"h\": \"x\"}', 'dest',
                                                   now() + interval '1 hour', now() + interval '2 hours') AS id;
              SELECT count(*) FROM e JOIN postbox.outbox o ON o.event_id = e.id
              WHERE o.payload = '{\"a\": 1}' AND o.headers ->> 'h' = 'x' AND o.destination = 'dest'
                AND o.waiting AND o.available_at > now() AND o.expires_at > o.available_at AND o.sequence = 1")
[[ $got == 1 ]] || fail "postbox.enqueue did not return the id of the row it wrote with its arguments ($got)"
lang=$(psql_q "SELECT l.lanname || ' ' || array_to_string(p.proconfig, ',')
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
               WHERE p.oid = 'postbox.enqueue(text,text,text,jsonb,jsonb,text,timestamptz,timestamptz)'::regprocedure")
[[ $lang == "plpgsql search_path=pg_catalog, postbox, pg_temp" ]] || fail "postbox.enqueue: $lang"
psql_q "SET client_min_messages = warning; DROP ROLE IF EXISTS pb_it_cost_writer; CREATE ROLE pb_it_cost_writer;
        GRANT USAGE ON SCHEMA postbox TO pb_it_cost_writer;
        GRANT INSERT, SELECT (id, event_id) ON postbox.outbox TO pb_it_cost_writer;"
on_exit "psql -XAtq -d '$POSTBOX_PG_DSN' -c 'DROP OWNED BY pb_it_cost_writer; DROP ROLE pb_it_cost_writer' >/dev/null 2>&1"
got=$(psql_q "SET ROLE pb_it_cost_writer; SELECT substr(postbox.enqueue('role', '1', 'r.v1', '{}')::text, 15, 1)")
[[ $got == 7 ]] || fail "a role with INSERT on the outbox could not enqueue: $got"

# ---- 3. numbering of multi-row statements and of a 50,000-event transaction ----
psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
            SELECT 'bulk', 'one', 'b.v1', jsonb_build_object('i', i) FROM generate_series(1, 1000) i"
wrong=$(psql_q "SELECT count(*) FROM (SELECT sequence, row_number() OVER (ORDER BY id) AS n,
                                             (payload ->> 'i')::bigint AS i
                                      FROM postbox.outbox WHERE aggregate_type = 'bulk') s
                WHERE sequence <> n OR i <> n")
((wrong == 0)) || fail "$wrong rows of a 1,000-row INSERT not numbered 1..1000 in id order"
t0=$(date +%s%N)
psql_q "BEGIN;
        INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload)
            SELECT 'hot', (i % 10)::text, 'h.v1', '{}' FROM generate_series(1, 25000) i;
        SELECT postbox.enqueue('hot', (i % 10)::text, 'h.v1', '{}') FROM generate_series(25001, 50000) i;
        COMMIT;" >/dev/null
say "50,000 events over 10 aggregates in one transaction: $((($(date +%s%N) - t0) / 1000000)) ms"
read -r aggs gapless counter <<<"$(psql_q "
    SELECT count(*), count(*) FILTER (WHERE n = 5000 AND lo = 1 AND hi = 5000 AND d = 5000 AND ordered),
           (SELECT count(*) FROM postbox.aggregate_sequences WHERE aggregate_type = 'hot' AND last_sequence = 5000)
    FROM (SELECT aggregate_id, count(*) AS n, min(sequence) AS lo, max(sequence) AS hi,
                 count(DISTINCT sequence) AS d,
                 bool_and(sequence = rn) AS ordered
          FROM (SELECT aggregate_id, sequence, row_number() OVER (PARTITION BY aggregate_id ORDER BY id) AS rn
                FROM postbox.outbox WHERE aggregate_type = 'hot') r
          GROUP BY aggregate_id) s" | tr '|' ' ')"
((aggs == 10 && gapless == 10 && counter == 10)) ||
    fail "50,000 events over 10 aggregates: $gapless of $aggs aggregates numbered 1..5000 in id order, $counter counters at 5000"

# ---- 4. the wake-up ----
notified() { # SQL...: the statements, each its own transaction, in a session that LISTENs
    local args=(-c "LISTEN postbox_outbox") s
    for s in "$@"; do args+=(-c "$s"); done
    psql -Xq -d "$POSTBOX_PG_DSN" "${args[@]}" -c "SELECT 1" 2>&1 | grep -c 'notification "postbox_outbox"' || true
}
n=$(notified "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')")
((n == 0)) || fail "a committed event sent $n notifications while no relay sleeps"
n=$(notified "SET postbox.notify = always" "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')")
((n == 1)) || fail "postbox.notify = always: a committed event sent $n notifications, not 1"
# a relay asleep: it holds the sleep lock (sql/027)
psql -XAtq -d "$POSTBOX_PG_DSN" -c "SET application_name = pb_it_sleeping_relay" \
    -c "SELECT pg_advisory_lock(hashtext('postbox.relay.asleep'), 0)" -c "SELECT pg_sleep(120)" >/dev/null &
PB_PIDS+=("$!")
# its backend would outlive the killed psql while it sleeps
on_exit "psql -XAtq -d '$POSTBOX_PG_DSN' -c \"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pb_it_sleeping_relay' AND datname = current_database()\" >/dev/null 2>&1"
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                             AND classid = hashtext('postbox.relay.asleep')::oid AND mode = 'ExclusiveLock'
                             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())\") == 1 ]]" 10 ||
    fail "the sleeping relay's stand-in did not take the sleep lock"
n=$(notified "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')")
((n == 1)) || fail "a committed event sent $n notifications, not 1, while a relay sleeps"
n=$(notified "BEGIN; SELECT postbox.enqueue('wake', '1', 'w.v1', '{}'); ROLLBACK")
((n == 0)) || fail "a rolled-back event sent $n notifications"
n=$(notified "SET postbox.notify = off" "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')" \
             "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('wake', '1', 'w.v1', '{}')")
((n == 0)) || fail "postbox.notify = off: $n notifications"
db=$(psql_q "SELECT current_database()")
psql_q "ALTER DATABASE $db SET postbox.notify = off"
n=$(notified "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')")
((n == 0)) || fail "postbox.notify = off for the database: $n notifications"
n=$(notified "SET postbox.notify = on" "SELECT postbox.enqueue('wake', '1', 'w.v1', '{}')")
((n == 1)) || fail "postbox.notify = on in a session of a database where it is off: $n notifications"
psql_q "ALTER DATABASE $db RESET postbox.notify"
seq=$(psql_q "SELECT string_agg(sequence::text, ',' ORDER BY id) FROM postbox.outbox WHERE aggregate_type = 'wake'")
[[ $seq == 1,2,3,4,5,6,7 ]] || fail "the wake-up events (one rolled back) are not numbered 1..7: $seq"
say "ok"
