#!/usr/bin/env bash
# The redis source never holds an entry larger than consume.max_message_size (issue 26): eight
# entries with a 64 MiB payload, written by redis-cli with the fields the relay writes, among 48
# small entries and 12 of 700 KiB, one aggregate, all in the stream before the consumer starts
# (consume.max_message_size = 1 MiB, consume.batch_bytes = 4 MiB). Each huge entry goes to
# postbox.inbox_dead with its size and the limit in the reason and no body, and is acknowledged;
# every other entry is handled exactly once, in stream order (the 700 KiB ones take several
# batches: what a read delivers beyond batch_bytes is handed out by the next receive); the
# consumer's peak RSS (VmHWM) stays under 100 MiB (reading the entries whole took 586 MiB), and
# no batch holds more than 6 of the 700 KiB entries (consume.batch_bytes). Then the same for a
# huge entry claimed from a dead consumer and one pending on the consumer's own name.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
STREAM=pb:$PB_TEST:events GROUP=postbox_huge-test
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=huge-test POSTBOX_REDIS_STREAMS=$STREAM
HUGE=$((64 * 1024 * 1024)) MID=$((700 * 1024)) LIMIT=$((1024 * 1024)) RSS_MAX_KB=$((100 * 1024))
on_exit 'redis_cli DEL "$STREAM" >/dev/null' # 512 MiB of the shared server

pb_init
psql_q "CREATE TABLE handled (n bigserial PRIMARY KEY, message_id text NOT NULL, bytes int NOT NULL,
                              tx bigint NOT NULL DEFAULT txid_current())"
HANDLER="INSERT INTO handled (message_id, bytes) VALUES (\$3::jsonb->>'message_id', octet_length(\$1))"

small() { # FROM TO
    local i
    for ((i = $1; i <= $2; i++)); do
        printf 'XADD %s MAXLEN ~ 1000 * event_id small-%d event_type small.v1 aggregate_type test aggregate_id a-1 payload "{\\"n\\": %d}" headers {} created_at 2026-12-01T00:00:00.000000Z\n' \
            "$STREAM" "$i" "$i"
    done | redis_cli >/dev/null || fail "redis-cli XADD of small entries failed"
}
big() { # ID TYPE BYTES: the payload last, from stdin (redis-cli -x)
    head -c "$3" /dev/zero | tr '\0' x |
        redis_cli -x XADD "$STREAM" MAXLEN '~' 1000 '*' event_id "$1" event_type "$2" \
            aggregate_type test aggregate_id a-1 headers '{}' created_at 2026-12-01T00:00:00.000000Z \
            payload >/dev/null || fail "redis-cli XADD of $1 failed"
}

small 1 20
for i in 1 2 3 4 5 6 7 8; do
    big "huge-$i" huge.v1 "$HUGE"
    small $((20 + i)) $((20 + i))
done
for i in $(seq 1 12); do big "mid-$i" mid.v1 "$MID"; done
small 29 48
say "stream: $(redis_cli XLEN "$STREAM") entries, $(redis_cli MEMORY USAGE "$STREAM") bytes in redis"

start_consumer --set "consume.handler=$HANDLER" --set consume.max_message_size=$LIMIT \
    --set consume.batch_bytes=$((4 * 1024 * 1024))
wait_until '[[ $(psql_q "SELECT count(*) FROM handled") == 60 &&
               $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 8 ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM handled") of 60 handled, $(psql_q "SELECT count(*) FROM postbox.inbox_dead") of 8 dead"; }
wait_until '[[ $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 10 ||
    fail "the group still has $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) entries pending"
hwm_kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$CONSUMER_PID/status")
stop_consumer

want=$( (seq -f 'small-%g' 1 28; seq -f 'mid-%g' 1 12; seq -f 'small-%g' 29 48) | paste -sd,)
got=$(psql_q "SELECT string_agg(message_id, ',' ORDER BY n) FROM handled")
mids=$(psql_q "SELECT count(*) FROM handled WHERE message_id LIKE 'mid-%' AND bytes = $MID")
# one transaction per batch: 4 MiB take 6 of them (a batch ends once it reaches the bytes)
most=$(psql_q "SELECT max(c) FROM (SELECT count(*) AS c FROM handled WHERE message_id LIKE 'mid-%' GROUP BY tx) b")
dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE message_id LIKE 'huge-_' AND message_type = 'huge.v1'
                 AND octet_length(body) = 0 AND error LIKE '%$HUGE bytes%consume.max_message_size ($LIMIT bytes)%'")
say "handled in order: $([[ $got == "$want" ]] && echo yes || echo no), 700 KiB bodies whole: $mids of 12, at most $most in a batch"
say "dead letters with the size and the limit and no body: $dead of 8; e.g. $(psql_q "SELECT error FROM postbox.inbox_dead LIMIT 1")"
say "consumer peak RSS (VmHWM): $((hwm_kb / 1024)) MiB (limit $((RSS_MAX_KB / 1024)) MiB)"
((hwm_kb < RSS_MAX_KB)) || fail "the consumer's peak RSS was $((hwm_kb / 1024)) MiB"
[[ $got == "$want" ]] || fail "handled: $got; expected $want"
((mids == 12)) || fail "only $mids of the 700 KiB entries reached the handler whole"
((most <= 6)) || fail "$most entries of 700 KiB in one batch: consume.batch_bytes (4 MiB) not kept"
((dead == 8)) || fail "dead letters: $(psql_q "SELECT message_id || ': ' || error || ' body ' || octet_length(body) FROM postbox.inbox_dead")"

# the other ways in: a huge entry pending on a dead consumer (claimed with XCLAIM after
# redis.claim_idle) and one pending on the consumer's own name (read again at start with
# XREADGROUP ... 0) are read within the same bounds
big huge-9 huge.v1 "$HUGE"
redis_cli XREADGROUP GROUP "$GROUP" ghost COUNT 1 STREAMS "$STREAM" '>' >/dev/null || fail "XREADGROUP failed"
big huge-10 huge.v1 "$HUGE"
redis_cli XREADGROUP GROUP "$GROUP" huge-self COUNT 1 STREAMS "$STREAM" '>' >/dev/null || fail "XREADGROUP failed"
small 49 50
start_consumer --set "consume.handler=$HANDLER" --set consume.max_message_size=$LIMIT \
    --set redis.claim_idle=1s --set redis.consumer_name=huge-self
wait_until '[[ $(psql_q "SELECT count(*) FROM handled") == 62 &&
               $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 10 &&
               $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 30 s: $(psql_q "SELECT count(*) FROM handled") of 62 handled, $(psql_q "SELECT count(*) FROM postbox.inbox_dead") of 10 dead, $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) pending"; }
hwm_kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$CONSUMER_PID/status")
stop_consumer
dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE message_id IN ('huge-9', 'huge-10')
                 AND octet_length(body) = 0 AND error LIKE '%$HUGE bytes%consume.max_message_size ($LIMIT bytes)%'")
claimed=$(grep -c 'claimed entry .*message huge-9' "$CONSUMER_LOG" || true)
own=$(grep -c '1 entries of stream .* were pending on this consumer' "$CONSUMER_LOG" || true)
say "claimed and own pending huge entries: $dead of 2 dead-lettered (huge-9 claimed: $claimed, huge-10 read again: $own), peak RSS $((hwm_kb / 1024)) MiB"
((hwm_kb < RSS_MAX_KB)) || fail "the consumer's peak RSS was $((hwm_kb / 1024)) MiB"
((dead == 2 && claimed == 1 && own == 1)) || fail "dead letters: $(psql_q "SELECT message_id || ': ' || error FROM postbox.inbox_dead WHERE message_id IN ('huge-9', 'huge-10')")"
[[ $(psql_q "SELECT string_agg(message_id, ',' ORDER BY n) FROM handled WHERE n > 60") == small-49,small-50 ]] ||
    fail "after the restart: $(psql_q "SELECT string_agg(message_id, ',' ORDER BY n) FROM handled WHERE n > 60")"
