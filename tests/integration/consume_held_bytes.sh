#!/usr/bin/env bash
# What the consumer holds back is bounded in bytes (consume.max_held_bytes), not only in count:
# the first message of aggregate A fails (and goes to inbox_dead after its retries) while 60
# messages of 8 MiB of A queue up behind it. Once it holds 64 MiB the consumer takes no new
# messages (they wait at RabbitMQ, in order); its peak RSS stays under max_held_bytes + 64 MiB,
# and once the failed one is dead every message takes effect, in order, once.
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
export POSTBOX_CONSUME_CONSUMER=held-bytes POSTBOX_CONSUME_MAX_HELD_BYTES=$((64 << 20))
export POSTBOX_CONSUME_BATCH_BYTES=$((16 << 20)) POSTBOX_CONSUME_MAX_MESSAGE_SIZE=$((16 << 20))
# the failing message stays held for its one retry 20 s later: time for the 60 messages to be
# published behind it even on a busy machine (at 4 s, a slow publisher let it die first)
export POSTBOX_CONSUME_MAX_ATTEMPTS=2 POSTBOX_CONSUME_BACKOFF_BASE=20s POSTBOX_CONSUME_BACKOFF_CAP=20s
export POSTBOX_AMQP_PREFETCH=100
export POSTBOX_CONSUME_HANDLER="SELECT on_message(\$2::jsonb)"
N=60
# under AddressSanitizer freed blocks wait in a quarantine (256 MiB by default) before their
# memory is reused, which would count in the RSS measured here
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0
setup_queue '#'
pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, k int NOT NULL);
        CREATE FUNCTION on_message(h jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
        BEGIN
            IF h->>'fail' = '1' THEN RAISE EXCEPTION 'failing on purpose'; END IF;
            INSERT INTO effects (k) VALUES ((h->>'k')::int);
        END \$\$"
head -c $((8 << 20)) /dev/zero | tr '\0' 'x' >"$PB_TMP/body"

start_consumer
wait_until 'grep -q "consuming queue" "$CONSUMER_LOG"' 10 || fail "the consumer did not start"
publish order.step.v1 a-0 step.v1 '{}' --header aggregate_type=order --header aggregate_id=A \
    --header fail=1 --header k=0
for ((k = 1; k <= N; k++)); do
    publish order.step.v1 "a-$k" step.v1 "@$PB_TMP/body" --header aggregate_type=order \
        --header aggregate_id=A --header "k=$k"
done
say "published 1 failing message and $N of 8 MiB behind it"
effects() { psql_q "SELECT count(*) FROM effects"; }
wait_until '(($(effects) == N))' 180 || fail "only $(effects) of $N messages took effect"
hwm_kb=$(awk '/^VmHWM/ { print $2 }' "/proc/$CONSUMER_PID/status")
bound_kb=$(((POSTBOX_CONSUME_MAX_HELD_BYTES >> 10) + (64 << 10)))
paused=$(grep -c 'taking no new messages until held ones go on' "$CONSUMER_LOG" || true)
say "peak RSS $((hwm_kb >> 10)) MiB (bound $((bound_kb >> 10)) MiB); $paused lines about the byte bound"
((hwm_kb < bound_kb)) || fail "the consumer's peak RSS $((hwm_kb >> 10)) MiB passed max_held_bytes + 64 MiB"
((paused > 0)) || fail "the byte bound was never reached"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE message_id = 'a-0'") == 1 ]] ||
    fail "the failing message is not in inbox_dead"
disorder=$(psql_q "SELECT count(*) FROM (SELECT k < lag(k) OVER (ORDER BY n) AS back FROM effects) s WHERE back")
((disorder == 0)) || fail "$disorder effects out of order"
[[ $(psql_q "SELECT count(DISTINCT k) FROM effects") == "$N" ]] || fail "a message took effect twice"
stop_consumer
say "PASS"
