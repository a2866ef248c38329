#!/usr/bin/env bash
# cdc capture without a growing outbox table:
# 1. postbox.emit() (a transactional logical message, no row): every emitted event of a committed
#    transaction arrives once, with its payload, routing key (destination) and per-aggregate
#    order; rolled-back ones never do; postbox.outbox stays empty (count 0 before and after).
#    The headers are checked on a second slot relayed to the stdout sink, which prints them.
#    Messages with another prefix and non-transactional postbox messages are ignored.
# 2. cdc.delete_after_insert=true with postbox.enqueue(): the row is deleted by the transaction
#    that inserted it; every event arrives and the table stays empty throughout.
source "$(dirname "$0")/lib.sh"

N_AGG=10 TXNS=100 PER_TXN=10
total=$((TXNS * PER_TXN))
pb_init
setup_queue '#'
cdc_use_slot
SLOT2=pb_${PB_TEST}_out
on_exit "cdc_drop_slot_on_exit $SLOT2"
outbox_rows() { psql_q "SELECT count(*) FROM postbox.outbox"; }

start_cdc_relay --set relay.batch_size=50
# the second slot, read after the fact by the stdout sink
psql_q "SELECT pg_create_logical_replication_slot('$SLOT2', 'pgoutput')" >/dev/null
before=$(outbox_rows)
((before == 0)) || fail "postbox.outbox holds $before rows before the test"

# transaction t: events k = (t-1)*PER_TXN+1 .. t*PER_TXN, aggregate em-(k % N_AGG); every 7th
# event has a destination (its routing key); every 9th transaction is rolled back, until TXNS
# transactions are committed.
committed=0 t=0
while ((committed < TXNS)); do
    t=$((t + 1))
    echo "BEGIN;"
    echo "SELECT count(postbox.emit('order', 'em-' || (k % $N_AGG), 'emitted.v1',
              jsonb_build_object('seq', k, 'txn', $t, 'text', 'é \"q\" ' || k),
              jsonb_build_object('trace', 'tr-' || k, 'n', k),
              CASE WHEN k % 7 = 0 THEN 'custom.key.' || k END))
          FROM generate_series(($t - 1) * $PER_TXN + 1, $t * $PER_TXN) k;"
    if ((t % 9 == 0)); then echo "ROLLBACK;"; else echo "COMMIT;"; committed=$((committed + 1)); fi
    # ignored: another prefix, and a non-transactional message with the relay's prefix
    if ((t == 5)); then
        echo "SELECT pg_logical_emit_message(true, 'other', 'not an event');"
        echo "SELECT pg_logical_emit_message(false, 'postbox', '{\"event_id\": \"00000000-0000-4000-8000-000000000000\"}');"
    fi
done >"$PB_TMP/emit.sql"
say "emitting $total events in $TXNS committed transactions, rolling back $((t - TXNS)) more"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/emit.sql" >/dev/null || fail "postbox.emit failed"
wait_until '(($(queue_count) >= total))' 60 || fail "only $(queue_count) of $total emitted events arrived within 60 s"
sleep 1
after=$(outbox_rows)
say "postbox.outbox rows: $before before, $after after $total emitted events"
((after == 0)) || fail "postbox.outbox holds $after rows after postbox.emit"
stop_relay
grep -q 'ignoring a non-transactional "postbox" message' "$PB_RELAY_LOG" ||
    fail "the non-transactional postbox message was not reported as ignored"

drain_queue "$PB_TMP/got" $total 1000 60
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
# content: each seq once, from a committed transaction, with its text, aggregate and routing key
res=$(awk -F'\t' -v nagg=$N_AGG -v per=$PER_TXN '
    function num(key,   s) {
        if (!match($6, "\"" key "\"[ ]*:[ ]*[0-9]+")) return -1
        s = substr($6, RSTART, RLENGTH); sub(/^.*:[ ]*/, "", s); return s + 0
    }
    function err(m) { bad++; if (bad <= 10) print m > "/dev/stderr" }
    {
        k = num("seq"); t = num("txn")
        if (k in seen) { err("seq " k " arrived twice"); next }
        seen[k] = 1; n++
        if (t % 9 == 0) err("seq " k " of rolled-back transaction " t " arrived")
        if (t != int((k - 1) / per) + 1) err("seq " k ": txn " t)
        if (index($6, "\"é \\\"q\\\" " k "\"") == 0) err("seq " k ": text wrong in " $6)
        if ($2 != "emitted.v1" || $4 != "order" || $5 != "em-" (k % nagg)) err("seq " k ": type/aggregate wrong: " $2 " " $4 " " $5)
        rk = (k % 7 == 0) ? "custom.key." k : "order.emitted.v1"
        if ($3 != rk) err("seq " k ": routing key " $3 ", expected " rk)
        if (length($1) != 36 || $1 !~ /^[0-9a-f]+-[0-9a-f]+-4[0-9a-f]+-[0-9a-f]+-[0-9a-f]+$/) err("seq " k ": message id " $1)
    }
    END { printf "%d events checked (payload, type, aggregate, routing key, message id), %d problems\n", n, bad; exit bad > 0 }' "$PB_TMP/got") ||
    fail "$res"
say "$res"

# headers, and the same events once more, through the second slot and the stdout sink
: >"$PB_RELAY_OUT"
relay_drain 60 --capture cdc --set relay.sink=stdout --set cdc.slot=$SLOT2
out=$(wc -l <"$PB_RELAY_OUT")
res=$(awk -v want=$total '
    function num(key,   s) {
        if (!match($0, "\"" key "\"[ ]*:[ ]*[0-9]+")) return -1
        s = substr($0, RSTART, RLENGTH); sub(/^.*:[ ]*/, "", s); return s + 0
    }
    {
        k = num("seq"); n++
        if (k in seen) { bad++; next }
        seen[k] = 1
        # jsonb prints {"n": K, "trace": "tr-K"}
        if (!match($0, "\"headers\":\\{\"n\": ?" k ", ?\"trace\": ?\"tr-" k "\"\\}")) { bad++; if (bad <= 5) print "headers wrong: " $0 > "/dev/stderr" }
    }
    END { printf "stdout sink: %d events, %d with wrong or missing headers or repeated\n", n, bad; exit (bad > 0 || n != want) }' "$PB_RELAY_OUT") ||
    fail "$res (expected $total events)"
say "$res"
((out == total)) || fail "the stdout sink printed $out events, expected $total"

# ---- 2. cdc.delete_after_insert with postbox.enqueue -----------------------------------------
setup_queue '#'
start_cdc_relay --set relay.batch_size=50 --set cdc.delete_after_insert=true
[[ $(psql_q "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'postbox.outbox'::regclass AND tgname = 'outbox_cdc_delete'") == 1 ]] ||
    fail "cdc.delete_after_insert=true did not install its trigger"
max_rows=0
for ((t = 1; t <= TXNS; t++)); do
    echo "SELECT count(postbox.enqueue('order', 'del-' || (k % $N_AGG), 'deleted.v1', jsonb_build_object('seq', k)))
            FROM generate_series(($t - 1) * $PER_TXN + 1, $t * $PER_TXN) k;"
done >"$PB_TMP/enqueue.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/enqueue.sql" >/dev/null &
producer=$!
PB_PIDS+=("$producer")
while pid_alive "$producer"; do
    r=$(outbox_rows)
    ((r > max_rows)) && max_rows=$r
    sleep 0.05
done
wait "$producer" || fail "postbox.enqueue failed"
wait_until '(($(queue_count) >= total))' 60 || fail "only $(queue_count) of $total events arrived within 60 s (delete_after_insert)"
sleep 1
after=$(outbox_rows)
say "delete_after_insert: postbox.outbox rows while enqueuing: at most $max_rows, after: $after"
((max_rows == 0 && after == 0)) || fail "postbox.outbox was not kept empty"
stop_relay
drain_queue "$PB_TMP/got3" $total 1000 60
stats=$(check_order "$PB_TMP/got3") || fail "per-aggregate order broken: $stats"
say "delete_after_insert: $stats"
n=$(awk -F'\t' '$2 == "deleted.v1"' "$PB_TMP/got3" | cut -f1 | sort -u | wc -l)
((n == total)) || fail "$n of $total deleted.v1 events arrived"
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
# back to the default: the trigger goes again
start_cdc_relay
stop_relay
[[ $(psql_q "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'postbox.outbox'::regclass AND tgname = 'outbox_cdc_delete'") == 0 ]] ||
    fail "the delete trigger stayed after a start with cdc.delete_after_insert=false"

# ---- 3. an emitted payload reaches the broker as PostgreSQL wrote it ----------------------------
# (numbers as jsonb keeps them: 0.1 and 1.50 unchanged, integers beyond int64 and exponents
# beyond a double kept, not rewritten nor refused)
setup_queue '#'
start_cdc_relay
NUM_PAYLOAD='{"amount": 0.1, "price": 1.50, "big": 123456789012345678901234567890, "tiny": 1e-400}'
psql_q "SELECT postbox.emit('order', 'num-1', 'numbers.v1', '$NUM_PAYLOAD'::jsonb)" >/dev/null
want=$(psql_q "SELECT '$NUM_PAYLOAD'::jsonb::text")
wait_until '(($(queue_count) >= 1))' 30 ||
    { tail -n 5 "$PB_RELAY_LOG" >&2; fail "the emitted event with large numbers did not arrive"; }
stop_relay
drain_queue "$PB_TMP/got4" 1 10 30
got=$(cut -f6 "$PB_TMP/got4")
[[ $got == "$want" ]] || fail "the payload changed on the way: PostgreSQL wrote $want, the broker got $got"
say "emitted numbers arrive as written: $got"
