#!/usr/bin/env bash
# A committed business transaction produces exactly one message, a rolled-back one none.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue '#'
psql_q "CREATE SCHEMA shop; CREATE TABLE shop.orders (id text PRIMARY KEY, total numeric NOT NULL)"

committed=$(psql_q "BEGIN;
    INSERT INTO shop.orders VALUES ('o-1', 42);
    SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '{\"id\": \"o-1\", \"total\": 42}'::jsonb,
                           '{\"trace_id\": \"t-1\"}'::jsonb);
    COMMIT;")
rolled_back=$(psql_q "BEGIN;
    INSERT INTO shop.orders VALUES ('o-2', 7);
    SELECT postbox.enqueue('order', 'o-2', 'order.created.v1', '{\"id\": \"o-2\", \"total\": 7}'::jsonb);
    ROLLBACK;")
say "committed event $committed, rolled-back event $rolled_back"
[[ $committed =~ ^[0-9a-f-]{36}$ ]] || fail "enqueue did not return an event id: '$committed'"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_all") == 1 ]] || fail "the outbox should hold exactly one row"
[[ $(psql_q "SELECT count(*) FROM shop.orders") == 1 ]] || fail "shop.orders should hold exactly one row"

relay_drain 60
drain_queue "$PB_TMP/got" 1 1500 60
n=$(wc -l <"$PB_TMP/got")
say "messages in the queue: $n"
sed 's/^/  message: /' "$PB_TMP/got"
((n == 1)) || fail "expected exactly 1 message, got $n"
IFS=$'\t' read -r mid mtype rkey aggt aggid body <"$PB_TMP/got"
[[ $mid == "$committed" ]] || fail "message_id '$mid' is not the committed event id '$committed'"
[[ $mtype == order.created.v1 ]] || fail "type property '$mtype', expected order.created.v1"
[[ $rkey == order.order.created.v1 ]] || fail "routing key '$rkey', expected order.order.created.v1"
[[ $aggt == order && $aggid == o-1 ]] || fail "headers aggregate_type/aggregate_id '$aggt'/'$aggid', expected order/o-1"
[[ $body == *'"o-1"'* && $body == *42* ]] || fail "body does not carry the payload: $body"
[[ $(pending_count) == 0 ]] || fail "the event is still pending"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE event_id = '$committed'") == 1 ]] ||
    fail "the committed event is not in postbox.outbox_published"
