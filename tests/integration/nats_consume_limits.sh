#!/usr/bin/env bash
# The NATS consumer under consume.max_message_size: a body above it is not kept, goes to
# postbox.inbox_dead with its size and is acknowledged; a body with a NUL byte goes there whole
# with the offset, never cut for the handler; the other messages flow, with consume.batch_bytes
# asked of the server in each pull.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

export POSTBOX_CONSUME_CONSUMER=nats-limits
SUBJECT=${POSTBOX_NATS_SUBJECT_PREFIX}m.v1
HANDLER="INSERT INTO seen (message_id, len) VALUES (\$3::jsonb->>'message_id', octet_length(\$1))"
DURABLE=postbox_nats-limits
consumer_pending() { # messages not delivered yet plus those not acknowledged
    local info p a
    info=$(nats_tool consumer-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$DURABLE" 2>/dev/null) || { echo -1; return; }
    p=${info#*pending=}; p=${p%% *}
    a=${info#*ack_pending=}; a=${a%% *}
    echo $((p + a))
}
pb_init
psql_q "CREATE TABLE seen (message_id text PRIMARY KEY, len int NOT NULL)"

start_consumer --set "consume.handler=$HANDLER" # creates the stream and the durable consumer
wait_until 'nats_tool stream-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" >/dev/null 2>&1' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer did not create the stream"; }
stop_consumer
python3 -c 'import sys; sys.stdout.write("{\"big\": \"" + "x" * 199989 + "\"}")' >"$PB_TMP/big.json"
printf 'abcde\0fghij' >"$PB_TMP/nul.bin"
nats_tool publish "$POSTBOX_NATS_URL" "$SUBJECT" big-1 m.v1 "@$PB_TMP/big.json" >/dev/null
nats_tool publish "$POSTBOX_NATS_URL" "$SUBJECT" nul-1 m.v1 "@$PB_TMP/nul.bin" >/dev/null
for ((i = 1; i <= 30; i++)); do nats_tool publish "$POSTBOX_NATS_URL" "$SUBJECT" "ok-$i" m.v1 '{"n": 1}' >/dev/null; done

start_consumer --set "consume.handler=$HANDLER" --set consume.max_message_size=100000 --set consume.batch_bytes=2048
wait_until '[[ $(psql_q "SELECT count(*) FROM seen") == 30 && $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 2 ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM seen") handled, $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead"; }
wait_until '[[ $(consumer_pending) == 0 ]]' 20 || fail "messages are still unacknowledged: $(consumer_pending)"
stop_consumer
big=$(psql_q "SELECT error || ' | body ' || octet_length(body) FROM postbox.inbox_dead WHERE message_id = 'big-1'")
nul=$(psql_q "SELECT error || ' | body ' || encode(body, 'hex') FROM postbox.inbox_dead WHERE message_id = 'nul-1'")
say "big-1: $big"
say "nul-1: $nul"
[[ $big == *"200000 bytes"*"consume.max_message_size"*"| body 0" ]] || fail "the oversized message's dead letter: $big"
[[ $nul == *"NUL byte at offset 5"*"| body 616263646500666768696a" ]] || fail "the NUL-byte message's dead letter: $nul"
[[ $(psql_q "SELECT count(*) FROM seen WHERE message_id IN ('big-1', 'nul-1')") == 0 ]] || fail "a refused message reached the handler"
say "ok"
