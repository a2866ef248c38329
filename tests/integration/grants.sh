#!/usr/bin/env bash
# Least privilege: with the SQL of `postbox init --print-grants` applied, login roles that are
# only members of postbox_producer, postbox_relay and postbox_consumer (no superuser, no owner)
# do all their work, and nothing else:
# - producer: postbox.enqueue, libpostbox (producer_example), postbox.emit and a postbox.capture
#   trigger work; reading or changing outbox rows, the inbox or the keys is refused;
# - relay (poll): publishes every event; the inbox, the keys' writes and new outbox rows are refused;
# - consumer: runs a handler into a table granted to it and records the inbox; the outbox and
#   the emit key are refused.
source "$(dirname "$0")/lib.sh"
: "${POSTBOX_PRODUCER_EXAMPLE:?POSTBOX_PRODUCER_EXAMPLE must name the producer example binary}"

pb_init
use_least_privilege
setup_queue '#'
as_dsn() { # DSN SQL: runs SQL; psql's output and errors on stdout
    psql -XAtq -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>&1
}
refused() { # DSN SQL WHO: SQL must fail with "permission denied"
    local out
    if out=$(as_dsn "$1" "$2"); then fail "$3 may run: $2"; fi
    grep -q 'permission denied' <<<"$out" || fail "$3 running \"$2\": unexpected error: $out"
}
for r in pb_it_relay pb_it_consumer pb_it_producer; do
    [[ $(psql_q "SELECT rolsuper FROM pg_roles WHERE rolname = '$r'") == f ]] || fail "$r is a superuser"
done

# ---- producer ---------------------------------------------------------------------------------
psql_q "CREATE SCHEMA shop;
        CREATE TABLE shop.orders (id int PRIMARY KEY, status text);
        INSERT INTO shop.orders VALUES (1, 'new');
        GRANT USAGE ON SCHEMA shop TO postbox_producer; GRANT SELECT, UPDATE ON shop.orders TO postbox_producer;
        CREATE TRIGGER orders_paid AFTER UPDATE ON shop.orders FOR EACH ROW
            EXECUTE FUNCTION postbox.capture('order', 'id', 'order.paid.v1');" >/dev/null
out=$(as_dsn "$PB_PRODUCER_DSN" "SELECT postbox.enqueue('order', '1', 'created.v1', '{\"n\": 1}')") ||
    fail "the producer cannot call postbox.enqueue: $out"
out=$(as_dsn "$PB_PRODUCER_DSN" "UPDATE shop.orders SET status = 'paid' WHERE id = 1") ||
    fail "the producer's update through a postbox.capture trigger failed: $out"
"$POSTBOX_PRODUCER_EXAMPLE" "$PB_PRODUCER_DSN" >"$PB_TMP/producer.out" 2>&1 ||
    fail "libpostbox as the producer role failed: $(cat "$PB_TMP/producer.out")"
out=$(as_dsn "$PB_PRODUCER_DSN" "SELECT postbox.emit('order', '1', 'emitted.v1', '{}')") ||
    fail "the producer cannot call postbox.emit: $out"
refused "$PB_PRODUCER_DSN" "SELECT payload FROM postbox.outbox" "the producer"
refused "$PB_PRODUCER_DSN" "UPDATE postbox.outbox SET attempts = 0" "the producer"
refused "$PB_PRODUCER_DSN" "DELETE FROM postbox.outbox" "the producer"
refused "$PB_PRODUCER_DSN" "SELECT * FROM postbox.inbox" "the producer"
refused "$PB_PRODUCER_DSN" "SELECT * FROM postbox.emit_key" "the producer"
refused "$PB_PRODUCER_DSN" "SELECT * FROM postbox.dead_letters" "the producer"
n=$(psql_q "SELECT count(*) FROM postbox.outbox")
say "producer role: enqueue, capture trigger and libpostbox wrote $n events; reads and changes refused"
((n == 9)) || fail "expected 9 outbox rows (1 enqueue, 1 capture, 4 libpostbox, 3 libpostbox with times), found $n"

# ---- relay (poll) -------------------------------------------------------------------------------
refused "$PB_RELAY_DSN" "SELECT * FROM postbox.inbox" "the relay"
refused "$PB_RELAY_DSN" "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', 'b', 'c', '{}')" "the relay"
refused "$PB_RELAY_DSN" "UPDATE postbox.relay_lock_keys SET shard = 1" "the relay"
relay_drain 60 --set metrics.listen=127.0.0.1:$(free_port) --set metrics.sample_interval=100ms
grep -q 'permission denied' "$PB_RELAY_LOG" && fail "the relay met a refused privilege: $(grep 'permission denied' "$PB_RELAY_LOG" | head -3)"
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
# the drain leaves producer_example's event available in an hour, and the two later events of
# its aggregate behind it, for a later relay
[[ $(published_count) == 6 ]] || fail "the relay role published $(published_count) of the 6 events due"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox WHERE waiting AND attempts = 0 AND next_attempt_at > now()") == 3 ]] ||
    fail "the delayed event and the two behind it did not stay waiting"

# ---- consumer -----------------------------------------------------------------------------------
psql_q "CREATE TABLE shop.received (message_id text PRIMARY KEY, body jsonb);
        GRANT USAGE ON SCHEMA shop TO pb_it_consumer; GRANT INSERT ON shop.received TO pb_it_consumer" >/dev/null
refused "$PB_CONSUMER_DSN" "SELECT * FROM postbox.outbox" "the consumer"
refused "$PB_CONSUMER_DSN" "SELECT * FROM postbox.emit_key" "the consumer"
: >"$CONSUMER_LOG"
start_consumer --set consume.consumer=grants --set amqp.queue=$PB_QUEUE \
    --set "consume.handler=INSERT INTO shop.received VALUES (\$3::jsonb->>'message_id', \$1::jsonb)"
wait_until '(($(psql_q "SELECT count(*) FROM shop.received") >= 6))' 30 ||
    fail "the consumer role handled $(psql_q "SELECT count(*) FROM shop.received") of 6 messages: $(tail -5 "$CONSUMER_LOG")"
stop_consumer
grep -q 'permission denied' "$CONSUMER_LOG" && fail "the consumer met a refused privilege: $(grep 'permission denied' "$CONSUMER_LOG" | head -3)"
[[ $(inbox_count) == 6 ]] || fail "the inbox holds $(inbox_count) rows, expected 6"
say "ok: relay and consumer ran as members of postbox_relay / postbox_consumer; the roles' other reads and writes were refused"
