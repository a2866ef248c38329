#!/usr/bin/env bash
# The C producer API: tests/integration/producer_example.c enqueues 1 single event and a batch of
# 3 (aggregate_type 'producer-test') in a committed transaction and 2 more in a rolled-back one;
# exactly the 4 committed events must be in the outbox; then 3 with times (postbox_enqueue_timed,
# postbox_enqueue_batch_timed, aggregate_type 'producer-timed').
source "$(dirname "$0")/lib.sh"
: "${POSTBOX_PRODUCER_EXAMPLE:?POSTBOX_PRODUCER_EXAMPLE must name the producer example binary}"

pb_init
rc=0
"$POSTBOX_PRODUCER_EXAMPLE" "$POSTBOX_PG_DSN" >"$PB_TMP/producer.out" 2>&1 || rc=$?
sed 's/^/  producer: /' "$PB_TMP/producer.out"
((rc == 0)) || fail "the producer example exited with $rc"

n=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'producer-test'")
all=$(psql_q "SELECT count(*) FROM postbox.outbox")
say "rows with aggregate_type 'producer-test': $n (all rows: $all)"
psql_q "SELECT id, event_id, aggregate_id, event_type, payload, headers FROM postbox.outbox ORDER BY id" | sed 's/^/  row: /'
((n == 4)) || fail "expected exactly the 4 committed events, found $n"
((all == 7)) || fail "expected the 3 timed events and no other rows in the outbox, found $all rows"
# the times of the C API (schema version 16): available in an hour (waiting until then) and
# expiring in two; expiring in an hour; none
timed=$(psql_q "SELECT string_agg(format('%s/%s/%s', waiting,
                   round(extract(epoch FROM available_at - created_at) / 60),
                   round(extract(epoch FROM expires_at - created_at) / 60)), ' ' ORDER BY id)
                FROM postbox.outbox WHERE aggregate_type = 'producer-timed'")
say "timed events (waiting/available in min/expires in min): $timed"
[[ $timed == "t/60/120 f//60 f//" ]] || fail "the timed events: $timed"
# distinct event ids, in the order they were enqueued
[[ $(psql_q "SELECT count(DISTINCT event_id) FROM postbox.outbox") == 7 ]] || fail "event ids are not distinct"
# the ids the example printed (if it prints them) are the ones in the table
for id in $(grep -Eo '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}' "$PB_TMP/producer.out" | sort -u); do
    in_db=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE event_id = '$id'")
    say "printed event id $id: in the outbox $in_db time(s)"
done
