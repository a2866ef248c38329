#!/usr/bin/env bash
# The consumer bounds its memory and never cuts a body: a body above consume.max_message_size is
# not kept, goes to postbox.inbox_dead with its size in the reason and is acked; a body with a
# NUL byte (which the handler's text parameter would end there) goes to inbox_dead whole with
# the offset in the reason; the other messages flow; a batch holds consume.batch_bytes of
# bodies at most (plus the one message that reached it).
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=limits-test
HANDLER="INSERT INTO seen (message_id, txid, len) VALUES (\$3::jsonb->>'message_id', txid_current(), octet_length(\$1))"

pb_init
psql_q "CREATE TABLE seen (message_id text PRIMARY KEY, txid bigint NOT NULL, len int NOT NULL)"
setup_queue '#'

# 40 messages of about 300 bytes, one of 200 000 bytes, one with a NUL byte at offset 5
body300=$(printf '{"pad": "%0290d"}' 0)
python3 -c 'import sys; sys.stdout.write("{\"big\": \"" + "x" * 199989 + "\"}")' >"$PB_TMP/big.json"
printf 'abcde\0fghij' >"$PB_TMP/nul.bin"
publish m.v1 big-1 m.v1 "@$PB_TMP/big.json"
publish m.v1 nul-1 m.v1 "@$PB_TMP/nul.bin"
for ((i = 1; i <= 40; i++)); do publish m.v1 "ok-$i" m.v1 "$body300"; done

start_consumer --set "consume.handler=$HANDLER" --set consume.max_message_size=100000 \
    --set consume.batch_bytes=1024 --set consume.batch_size=200 --set consume.batch_wait=200ms
wait_until '[[ $(psql_q "SELECT count(*) FROM seen") == 40 && $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 2 ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM seen") handled, $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead"; }
wait_until '[[ $(queue_count) == 0 ]]' 10 || fail "the queue still holds $(queue_count) message(s): the dead ones were not acked"
stop_consumer

big=$(psql_q "SELECT error || ' | body ' || octet_length(body) || ' | attempts ' || attempts FROM postbox.inbox_dead WHERE message_id = 'big-1'")
nul=$(psql_q "SELECT error || ' | body ' || encode(body, 'hex') FROM postbox.inbox_dead WHERE message_id = 'nul-1'")
say "big-1: $big"
say "nul-1: $nul"
[[ $big == *"200000 bytes"*"consume.max_message_size"*"| body 0 | attempts 0" ]] ||
    fail "the oversized message's dead letter does not say its size, or kept its body: $big"
[[ $nul == *"NUL byte at offset 5"*"| body 616263646500666768696a" ]] ||
    fail "the NUL-byte message's dead letter lacks the reason or its whole body: $nul"
[[ $(psql_q "SELECT count(*) FROM seen WHERE message_id IN ('big-1', 'nul-1')") == 0 ]] ||
    fail "a refused message reached the handler"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE message_id IN ('big-1', 'nul-1') AND processed_at IS NULL") == 2 ]] ||
    fail "the refused messages have no unprocessed inbox row (a redelivery would be dead-lettered again)"
grep -q 'big-1.*moved to inbox_dead.*200000 bytes' "$CONSUMER_LOG" || fail "the log does not say why big-1 went to inbox_dead"

# batches: below batch_bytes (1024) of bodies, plus the message that reached it
read -r batches widest < <(psql_q "SELECT count(*), max(b) FROM (SELECT sum(len) AS b FROM seen GROUP BY txid) s" | tr '|' ' ')
say "40 messages of ${#body300} bytes in $batches transactions, the largest with $widest bytes of bodies"
((widest <= 1024 + ${#body300})) || fail "a batch held $widest bytes of bodies, over consume.batch_bytes = 1024 plus one message"
((batches >= 10)) || fail "only $batches batches for 12000 bytes with consume.batch_bytes = 1024"

# a redelivery of a refused message is a duplicate, not a second dead letter
publish m.v1 nul-1 m.v1 "@$PB_TMP/nul.bin"
start_consumer --set "consume.handler=$HANDLER" --set consume.max_message_size=100000
wait_until '[[ $(queue_count) == 0 ]]' 30 || fail "the redelivered NUL message was not acked"
stop_consumer
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 2 ]] || fail "the redelivered refused message was dead-lettered again"
say "ok"
