#!/usr/bin/env bash
# `postbox dlq --inbox replay` with the redis source: a poison message published by the relay
# lands in postbox.inbox_dead; a replay while redis cannot be reached changes nothing; once the
# handler is fixed, the replay adds the message again to the stream it was read from (the full
# name in redis.streams, not redis.stream_prefix put before it once more) with the event's
# created_at and aggregate_sequence, deletes the dead letter, and the consumer handles it
# exactly once.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
STREAM=${POSTBOX_REDIS_STREAM_PREFIX}acct GROUP=postbox_dlq-redis
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=dlq-redis POSTBOX_REDIS_STREAMS=$STREAM
BAD_SQL="SELECT 1 / 0 WHERE \$1::jsonb ? 'x'"
GOOD_SQL="INSERT INTO seen (account, amount, agg) VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint, \$2::jsonb->>'aggregate_id')"

pb_init
psql_q "CREATE TABLE seen (account text, amount bigint, agg text)"
psql_q "SELECT postbox.enqueue('acct', 'a1', 'bad.v1', '{\"account\": \"a1\", \"amount\": 7, \"x\": 1}')" >/dev/null
relay_drain 60
(($(stream_len "$STREAM") == 1)) || fail "the relay did not add the event to $STREAM: $(redis_streams | tr '\n' ' ')"
dead() { psql_q "SELECT count(*) FROM postbox.inbox_dead"; }

start_consumer --set "handlers.bad.v1=$BAD_SQL" --set consume.max_attempts=2 \
    --set consume.backoff_base=100ms --set consume.backoff_cap=200ms
wait_until '[[ $(dead) == 1 ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the poison message did not reach inbox_dead"; }
wait_until '[[ $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 10 || fail "the dead message was not acknowledged"
stop_consumer
dead_row=$(psql_q "SELECT message_type, routing_key FROM postbox.inbox_dead")
[[ $dead_row == "bad.v1|$STREAM" ]] || fail "unexpected dead letter: $dead_row"

# no broker to confirm: the dead letter stays
rc=0
"$POSTBOX_BIN" --set redis.url=redis://127.0.0.1:1/0 --set redis.timeout=500ms dlq --inbox replay \
    --consumer dlq-redis >"$PB_TMP/replay0.out" 2>&1 || rc=$?
say "replay without redis: exit $rc: $(tr '\n' ' ' <"$PB_TMP/replay0.out")"
((rc != 0)) || fail "the replay without redis exited 0"
[[ $(dead) == 1 ]] || fail "the dead letter was deleted although redis confirmed nothing"

"$POSTBOX_BIN" dlq --inbox replay --consumer dlq-redis >"$PB_TMP/replay.out" 2>&1 ||
    { cat "$PB_TMP/replay.out" >&2; fail "dlq --inbox replay failed"; }
say "replay: $(tr '\n' ' ' <"$PB_TMP/replay.out")"
streams=$(redis_streams | tr '\n' ' ')
[[ $streams == "$STREAM " ]] || fail "the test's keys after the replay are '$streams', expected only $STREAM"
(($(stream_len "$STREAM") == 2)) || fail "$STREAM holds $(stream_len "$STREAM") entries after the replay, expected 2"
[[ $(dead) == 0 ]] || fail "the replayed dead letter is still in inbox_dead"
# the copy keeps the event's created_at and aggregate_sequence
fields() { redis_cli --raw XRANGE "$STREAM" - + | awk -v k="$1" 'prev == k { print } { prev = $0 }'; }
stamps=$(fields created_at | sort -u | wc -l) seqs=$(fields aggregate_sequence | tr '\n' ' ')
((stamps == 1)) || fail "the replayed entry's created_at differs: $(fields created_at | tr '\n' ' ')"
[[ $seqs == "1 1 " ]] || fail "aggregate_sequence of the entries: '$seqs', expected '1 1 '"

start_consumer --set "handlers.bad.v1=$GOOD_SQL"
wait_until '[[ $(psql_q "SELECT count(*) FROM seen") -ge 1 && $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the replayed message was not handled"; }
sleep 1 # room for a second delivery, which must not take effect
stop_consumer
seen=$(psql_q "SELECT account, amount, agg FROM seen")
[[ $seen == "a1|7|a1" ]] || fail "the handler's work after the replay: '$seen', expected one row a1|7|a1"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") == 1 ]] ||
    fail "the replayed message's inbox row is not the one processed row"
[[ $(dead) == 0 ]] || fail "the replayed message went dead again"
say "ok: kept while redis was unreachable, replayed to $STREAM, handled once, inbox_dead empty"
