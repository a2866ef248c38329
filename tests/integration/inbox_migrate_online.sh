#!/usr/bin/env bash
# The online migration of an inbox holding rows (README, "Partitioned storage", *Migration*;
# sql/025_inbox_online_migration.sql). An inbox of N_OLD rows (UUIDv7 ids of the last 10 days
# and UUIDv4 ids without a time; one in ten a dead message with its inbox_dead row, the others
# handled) is partitioned by `init --partition-by '1 day'` while the relay publishes new events
# and a consumer started before the migration handles them:
#   - init renames the inbox postbox.inbox_legacy beside the partitioned inbox; rows claimed
#     before it by commit_inbox_first are marked done or released after it; copies of old
#     messages published before, during and after the move are duplicates (the handled ones
#     keep their one effect, the dead ones get none); every new event is handled once, in order
#     per aggregate
#   - the consumer's janitor moves the legacy rows in batches; while rows of another consumer
#     are held (a session locks them), the migration cannot end: `postbox check` reports it in
#     progress and `postbox purge` runs; the consumer (with its janitor, mid-migration) and the
#     relay are killed with SIGKILL and started again
#   - once the rows are free the migration ends: the legacy table is gone, every old row is in
#     the partitioned inbox with its columns (the dead ones still without processed_at), the old
#     times in inbox_migrated, the ids without a time in inbox_untimed
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
unset POSTBOX_TEST_PARTITION_BY
# the retention (7 days by default) would purge old rows while the test counts them; `postbox
# purge` does at the end
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=mig POSTBOX_CONSUME_RETENTION=30d
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (id, agg, seq)
    VALUES (\$3::jsonb->>'message_id', \$1::jsonb->>'agg', (\$1::jsonb->>'seq')::bigint)"
N_OLD=30000 N_OTHER=200 N_AGG=20 N_SEQ=60
pb_init
use_least_privilege
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, id text NOT NULL, agg text, seq bigint);
        GRANT INSERT ON effects TO pb_it_consumer; GRANT USAGE ON SEQUENCE effects_n_seq TO pb_it_consumer" >/dev/null

say "an inbox of $N_OLD rows of consumer mig and $N_OTHER of another, received over 10 days"
# old ids: k % 4 = 0 a UUIDv4 (no time), else a UUIDv7 of k minutes * 0.48 back (10 days). The
# purge at the end takes what is older than 9 days then: rows k * 28.8 s old are 28.8 s apart, so
# one crossed that boundary during a slow run between the purge and the count of what it should
# have taken (2,700 of 2,701). The ages within 15 minutes of 9 days move 30 minutes back: no row
# is within 15 minutes of the boundary as long as the test runs (ctest stops it at 10).
psql_q "CREATE TABLE old_ids AS
        SELECT k, CASE WHEN k % 4 = 0 THEN gen_random_uuid()::text
                       ELSE substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3)
                            || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12) END AS id,
               k % 10 = 0 AS dead, now() - age AS at
        FROM generate_series(1, $N_OLD) k,
             LATERAL (SELECT k * interval '28.8 seconds'
                             + CASE WHEN k * interval '28.8 seconds' > interval '9 days' - interval '15 minutes'
                                    THEN interval '30 minutes' ELSE interval '0' END AS age) a,
             LATERAL (SELECT lpad(to_hex((extract(epoch FROM now() - age) * 1000)::bigint), 12, '0') AS h,
                             md5(k::text || random()::text) AS r) x;
        INSERT INTO postbox.inbox (consumer, message_id, message_type, received_at, processed_at)
        SELECT 'mig', id, 'old.v1', at, CASE WHEN NOT dead THEN at END FROM old_ids;
        INSERT INTO postbox.inbox_dead (consumer, message_id, message_type, body, error, attempts)
        SELECT 'mig', id, 'old.v1', '\\x7b7d', 'test', 5 FROM old_ids WHERE dead;
        INSERT INTO effects (id) SELECT id FROM old_ids WHERE NOT dead ORDER BY k;
        INSERT INTO postbox.inbox (consumer, message_id, processed_at)
        SELECT 'other', 'other-' || k, now() FROM generate_series(1, $N_OTHER) k;
        -- commit_inbox_first: rows claimed before the migration, settled after it
        INSERT INTO postbox.inbox (consumer, message_id, processed_at)
        VALUES ('mig', 'straddle-done', NULL), ('mig', 'straddle-release', NULL)" >/dev/null
n_handled=$(psql_q "SELECT count(*) FROM old_ids WHERE NOT dead")
n_dead=$(psql_q "SELECT count(*) FROM old_ids WHERE dead")

# copies K_FROM K_TO: the old messages k in [K_FROM, K_TO] published again (outbox rows with
# their ids), each its own aggregate (no sequence number)
copies() {
    psql_q "INSERT INTO postbox.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
            SELECT id::uuid, 'old', id, 'old.v1', '{}' FROM old_ids WHERE k BETWEEN $1 AND $2" >/dev/null ||
        fail "cannot publish copies $1-$2"
}
# new_events SEQ_FROM SEQ_TO: one producer transaction, events seq of every aggregate agg-N
new_events() {
    psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1',
                                         jsonb_build_object('agg', 'agg-' || a, 'seq', s)))
            FROM generate_series($1, $2) s, generate_series(1, $N_AGG) a" >/dev/null ||
        fail "cannot enqueue events $1-$2"
}
legacy_rows() { psql_q "SELECT coalesce(postbox.inbox_legacy_rows(), -1)"; }

setup_queue '#'
start_consumer
start_relay --set relay.batch_size=100
new_events 1 10
copies 1 400 # before the migration: duplicates by the single table
wait_until "(( \$(psql_q 'SELECT count(*) FROM effects WHERE agg IS NOT NULL') == $((N_AGG * 10)) ))" 60 ||
    fail "the first events were not handled"

say "init --partition-by '1 day' while the relay publishes and the consumer handles"
(for ((s = 11; s <= 40; s += 5)); do new_events $s $((s + 4)); sleep 0.3; done) &
PRODUCER=$!
sleep 0.2
out=$("$POSTBOX_BIN" init --partition-by '1 day' 2>&1) || fail "init --partition-by failed: $out"
[[ $out == *"postbox.inbox holds rows: it is postbox.inbox_legacy now"* ]] || fail "init did not say the inbox migrates: $out"
[[ $(psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.inbox'::regclass") == p ]] || fail "postbox.inbox is not partitioned"
# rows of the other consumer held by a session: the migration cannot end while they are
PGAPPNAME=pb_it_hold psql_q "BEGIN; SELECT count(*) FROM (SELECT 1 FROM postbox.inbox_legacy
                                                          WHERE consumer = 'other' FOR UPDATE) x;
                             SELECT pg_sleep(300); COMMIT" >/dev/null 2>&1 &
HOLDER=$!
PB_PIDS+=("$HOLDER")
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                           WHERE a.application_name = 'pb_it_hold' AND l.relation = 'postbox.inbox_legacy'::regclass\") == 1 ]]" 10 ||
    fail "the holding session did not lock the other consumer's rows"
# commit_inbox_first's done and a failed handler's release, as the consumer's role, find rows
# claimed before the migration wherever they are
settle() {
    psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_CONSUMER_DSN" -c "SELECT postbox.inbox_row_settle('mig', '$1', $2)"
}
[[ $(settle straddle-done true) == 1 && $(settle straddle-release false) == 1 ]] ||
    fail "commit_inbox_first's done or a release did not find its row during the migration"
[[ $(psql_q "SELECT string_agg(message_id || ':' || (processed_at IS NOT NULL), ' ') FROM postbox.inbox
             WHERE message_id LIKE 'straddle-%'") == straddle-done:true ]] ||
    fail "the settled rows are not as settled: $(psql_q "SELECT * FROM postbox.inbox WHERE message_id LIKE 'straddle-%'")"
copies 401 1200 # during the move, to the consumer started before the migration
(($(legacy_rows) == N_OLD + N_OTHER)) || say "(the janitor moved rows already: $(legacy_rows) left)"
# the copies move their rows at once (the trigger); the janitor looks every 10 s
wait_until "grep -q 'postbox.inbox_legacy holds rows: moving them' '$CONSUMER_LOG'" 30 ||
    fail "the consumer's janitor did not start the move"
wait_until "(( \$(legacy_rows) < $((N_OLD + N_OTHER - 1200)) ))" 30 || fail "the consumer's janitor does not move the legacy rows"

say "SIGKILL of the consumer (its janitor mid-migration) and of the relay, $(legacy_rows) rows left"
kill_consumer
kill_relay
# the killed janitor's batch in flight is rolled back when its backend ends
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'postbox janitor' AND datname = current_database()\") == 0 ]]" 30 ||
    fail "the killed consumer's janitor still has a backend"
left=$(legacy_rows)
((left >= N_OTHER)) || fail "the legacy table holds $left rows, fewer than the $N_OTHER held"
out=$("$POSTBOX_BIN" check --all 2>&1) || true
grep -q "the online migration of postbox.inbox is in progress: postbox.inbox_legacy holds $left rows" <<<"$out" ||
    fail "postbox check does not report the migration: $out"
out=$("$POSTBOX_BIN" purge --older-than 30d --inbox-only 2>&1) || fail "postbox purge failed during the migration: $out"
copies 1201 1600 # while nobody consumes
start_consumer
start_relay --set relay.batch_size=100
wait "$PRODUCER" || fail "a producer transaction failed during the migration"
wait_until "(( \$(legacy_rows) == $N_OTHER ))" 120 || fail "the restarted consumer did not move the rows ($(legacy_rows) left)"
[[ $(psql_q "SELECT to_regclass('postbox.inbox_legacy') IS NOT NULL") == t ]] || fail "the legacy table went while rows were held"

say "the held rows freed: the migration ends"
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pb_it_hold'" >/dev/null
wait "$HOLDER" 2>/dev/null || true
wait_until "[[ \$(psql_q \"SELECT to_regclass('postbox.inbox_legacy') IS NULL\") == t ]]" 60 ||
    fail "postbox.inbox_legacy was not dropped ($(legacy_rows) rows left)"
grep -q 'the inbox migration is over: postbox.inbox_legacy is empty and dropped' "$CONSUMER_LOG" ||
    fail "the janitor did not log the end of the migration"
[[ $(psql_q "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'postbox.inbox'::regclass AND NOT tgisinternal") == 0 ]] ||
    fail "the trigger of the migration is left on postbox.inbox"
copies 1601 2000 # after the move
new_events 41 $N_SEQ

total_new=$((N_AGG * N_SEQ))
want=$((n_handled + total_new))
settled() { [[ $(psql_q "SELECT count(*) FROM effects") == "$want" && $(pending_count) == 0 && $(queue_count) == 0 ]]; }
wait_until settled 120 || fail "$(psql_q 'SELECT count(*) FROM effects') effects of $want; $(pending_count) pending, $(queue_count) queued"
sleep 1 # a copy handled twice would add an effect now
stop_consumer
stop_relay

say "every message handled once, in order; every old row in the partitioned inbox"
[[ $(psql_q "SELECT count(*) FROM effects") == "$want" ]] || fail "$(psql_q 'SELECT count(*) FROM effects') effects, expected $want"
twice=$(psql_q "SELECT count(*) FROM (SELECT id FROM effects GROUP BY id HAVING count(*) > 1) x")
((twice == 0)) || fail "$twice messages took effect more than once"
dead_run=$(psql_q "SELECT count(*) FROM effects e JOIN old_ids o ON o.id = e.id WHERE o.dead")
((dead_run == 0)) || fail "$dead_run copies of dead messages were handled"
unordered=$(psql_q "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY agg ORDER BY n) AS prev
                                          FROM effects WHERE agg IS NOT NULL) x WHERE seq <> prev + 1")
((unordered == 0)) || fail "$unordered new events out of order in their aggregate"
[[ $(psql_q "SELECT count(DISTINCT agg) || '/' || min(seq) || '/' || max(seq) FROM effects WHERE agg IS NOT NULL") == "$N_AGG/1/$N_SEQ" ]] ||
    fail "the new events are not all there: $(psql_q "SELECT count(*) FROM effects WHERE agg IS NOT NULL") of $total_new"
dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
((dups >= 2000)) || fail "only $dups duplicates logged: the 2000 copies were not all taken for duplicates"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox i JOIN old_ids o ON o.id = i.message_id
             WHERE i.consumer = 'mig' AND (i.processed_at IS NULL) = o.dead AND i.received_at = o.at
               AND i.message_type = 'old.v1'") == "$N_OLD" ]] ||
    fail "the old rows did not keep their columns in the partitioned inbox: $(psql_q "
        SELECT count(*), count(*) FILTER (WHERE (i.processed_at IS NULL) <> o.dead),
               count(*) FILTER (WHERE i.received_at <> o.at),
               count(*) FILTER (WHERE i.message_type IS DISTINCT FROM 'old.v1')
        FROM postbox.inbox i JOIN old_ids o ON o.id = i.message_id WHERE i.consumer = 'mig'")"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'other'") == "$N_OTHER" ]] || fail "the other consumer's rows are not all there"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE consumer = 'mig'") == "$n_dead" ]] || fail "inbox_dead changed"
where=$(psql_q "SELECT string_agg(p || ':' || n, ' ' ORDER BY p) FROM (
                  SELECT i.tableoid::regclass::text AS p, count(*) AS n FROM postbox.inbox i
                  JOIN old_ids o ON o.id = i.message_id WHERE i.consumer = 'mig'
                  GROUP BY 1) x")
untimed=$(psql_q "SELECT count(*) FROM old_ids WHERE k % 4 = 0")
[[ $where == *"postbox.inbox_untimed:$untimed"* && $where != *inbox_default* ]] ||
    fail "the old rows are not where their ids send them: $where"
[[ $where == *"postbox.inbox_migrated:"* ]] || fail "no old row in inbox_migrated: $where"
out=$("$POSTBOX_BIN" check --all 2>&1) || true
grep -q 'inbox_migration' <<<"$out" && fail "postbox check still reports a migration: $out"
grep -q 'has no key on' <<<"$out" && fail "postbox check finds an inbox partition without its key: $out"
out=$("$POSTBOX_BIN" purge --older-than 9d --inbox-only 2>&1) || fail "postbox purge failed: $out"
gone=$(psql_q "SELECT count(*) FROM old_ids o WHERE NOT EXISTS (
                   SELECT 1 FROM postbox.inbox i WHERE i.consumer = 'mig' AND i.message_id = o.id)")
want_gone=$(psql_q "SELECT count(*) FROM old_ids WHERE at < now() - interval '9 days' AND NOT dead")
near=$(psql_q "SELECT count(*) FROM old_ids WHERE at BETWEEN now() - interval '9 days' - interval '1 minute'
                                                      AND now() - interval '9 days' + interval '1 minute'")
((near == 0)) || fail "$near old rows within a minute of the purge's 9-day boundary: the count would depend on when it runs"
((gone == want_gone && gone > 0)) || fail "postbox purge took $gone old rows, expected the $want_gone handled ones older than 9 days: $out"
say "PASS: $N_OLD old rows moved online; 2000 copies duplicates; $total_new new events once, in order"
