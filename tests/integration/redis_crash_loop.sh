#!/usr/bin/env bash
# An entry that kills every consumer that takes it (here: a handler that never returns, and the
# consumer SIGKILLed while it runs) is dead-lettered by its delivery count: with
# consume.max_attempts = 2 it is claimed from the dead consumer (XAUTOCLAIM after
# redis.claim_idle) and handed out alone, its delivery count reaching 3 on the third consumer,
# which moves it to postbox.inbox_dead without running the handler and acknowledges it. The
# other entries (other aggregates, behind it in the stream) are handled once each and none is
# dead-lettered with it; nothing is left pending in the group.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
STREAM=pb:$PB_TEST:events GROUP=postbox_crash-test
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=crash-test POSTBOX_REDIS_STREAMS=$STREAM
export POSTBOX_CONSUME_MAX_ATTEMPTS=2 POSTBOX_REDIS_CLAIM_IDLE=1s POSTBOX_CONSUME_BATCH_SIZE=1
export POSTBOX_CONSUME_RECONNECT_CAP=1s
GOOD_SQL="INSERT INTO done (id) VALUES (\$1::jsonb->>'id')"
HANG_SQL="SELECT pg_sleep(600)"
N_GOOD=20

pb_init
psql_q "CREATE TABLE done (id text PRIMARY KEY)"
redis_cli XADD "$STREAM" '*' event_id killer-1 event_type hang.v1 aggregate_type test aggregate_id k-1 \
    payload '{"id": "killer"}' headers '{}' >/dev/null || fail "XADD failed"
for ((i = 1; i <= N_GOOD; i++)); do
    printf 'XADD %s * event_id good-%d event_type good.v1 aggregate_type test aggregate_id g-%d payload "{\\"id\\": \\"g%d\\"}" headers {}\n' \
        "$STREAM" "$i" "$i" "$i"
done | redis_cli >/dev/null || fail "XADD of the good entries failed"

hanging() { psql_q "SELECT count(*) FROM pg_stat_activity WHERE datname = '$PB_DB' AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()"; }
for ((k = 1; k <= 2; k++)); do
    start_consumer --set "handlers.hang.v1=$HANG_SQL" --set "handlers.good.v1=$GOOD_SQL"
    wait_until '(( $(hanging) == 1 ))' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "consumer $k never ran the hanging handler"; }
    kill_consumer
    # the killed consumer's backend would sleep on, holding the entry's uncommitted inbox row
    psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$PB_DB' AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()" >/dev/null
    say "consumer $k killed in the hanging handler; entry pending: $(redis_cli XPENDING "$STREAM" "$GROUP" - + 1 | tr '\n' ' ')"
done
start_consumer --set "handlers.hang.v1=$HANG_SQL" --set "handlers.good.v1=$GOOD_SQL"
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 && $(psql_q "SELECT count(*) FROM done") == $N_GOOD ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead, $(psql_q "SELECT count(*) FROM done") of $N_GOOD done"; }
wait_until '[[ $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 10 ||
    fail "$(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) entries left pending in the group"
(($(hanging) == 0)) || fail "the third consumer ran the hanging handler again"
stop_consumer
dead=$(psql_q "SELECT message_id, message_type, attempts, error FROM postbox.inbox_dead")
say "dead letter: $dead"
[[ $dead == "killer-1|hang.v1|2|delivered 3 times"* ]] || fail "unexpected dead letter: $dead"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") == "$N_GOOD" ]] ||
    fail "inbox: $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") processed, expected $N_GOOD"
grep -q 'claimed entry .*(message killer-1, delivered 3 times)' "$CONSUMER_LOG" || fail "no claim of the entry with its delivery count logged"
