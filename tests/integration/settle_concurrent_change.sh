#!/usr/bin/env bash
# Settling keeps exactly the rows it deletes. While the relay holds a claimed batch, another
# session deletes one of its rows and changes another, and commits only once the relay's settle
# waits for them: the deleted row must not reach postbox.outbox_published, and the changed one
# must arrive there as it now is. (A copy read from the table under the settle's snapshot, instead
# of the DELETE's RETURNING, would keep the deleted row and the old values.)
source "$(dirname "$0")/lib.sh"

pb_init
for i in 1 2 3 4 5; do
    psql_q "SELECT postbox.enqueue('order', 'o-$i', 'order.created.v1', '{\"n\": $i}')" >/dev/null
done
gone=$(psql_q "SELECT id FROM postbox.outbox ORDER BY id LIMIT 1 OFFSET 1")
changed=$(psql_q "SELECT id FROM postbox.outbox ORDER BY id LIMIT 1 OFFSET 3")
gone_event=$(psql_q "SELECT event_id FROM postbox.outbox WHERE id = $gone")

# the other session: both changes, then it sleeps with them uncommitted
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "BEGIN;
    DELETE FROM postbox.outbox WHERE id = $gone;
    UPDATE postbox.outbox SET last_error = 'changed meanwhile' WHERE id = $changed;
    SELECT pg_sleep(4); COMMIT;" >/dev/null 2>"$PB_TMP/other.err" &
other=$!
for ((i = 0; i < 100; i++)); do
    [[ $(psql_q "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event = 'PgSleep'") == 1 ]] && break
    sleep 0.05
done
((i < 100)) || fail "the other session did not reach its sleep: $(cat "$PB_TMP/other.err")"
say "rows $gone (deleted) and $changed (changed) are held by another session, uncommitted"

t0=$(date +%s%N)
relay_drain 60 --set relay.sink=stdout --set relay.on_publish=mark
waited_ms=$((($(date +%s%N) - t0) / 1000000))
wait "$other" || fail "the other session failed: $(cat "$PB_TMP/other.err")"
say "the relay drained in $waited_ms ms"

# the race happened: the relay published the row the other session was deleting, and its settle
# had to wait for that session
grep -q "$gone_event" "$PB_RELAY_OUT" || fail "the relay did not claim row $gone before it was deleted"
((waited_ms >= 2000)) || fail "the settle did not wait for the other session ($waited_ms ms)"

kept=$(psql_q "SELECT string_agg(id::text, ',' ORDER BY id) FROM postbox.outbox_published")
say "history: $kept"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE id = $gone") == 0 ]] ||
    fail "row $gone, deleted by the other session, was kept in the history"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published") == 4 ]] ||
    fail "expected the 4 rows the settle deleted in the history, got: $kept"
[[ $(psql_q "SELECT last_error FROM postbox.outbox_published WHERE id = $changed") == 'changed meanwhile' ]] ||
    fail "row $changed was kept with its values from before the other session's change"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "rows left in the outbox"
