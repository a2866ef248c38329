#!/usr/bin/env bash
# The redis source with a poison entry, the entries written by redis-cli (another producer than
# postbox, with the fields the sink writes): the handler of type bad.v1 always fails, the one of
# good.v1 works. With consume.max_attempts=3 and backoff 100 ms..500 ms the bad entry (first in
# the stream) is handed out again after each failure (requeue: claimed back by the consumer)
# until its third attempt, while the good entries flow past it; then it lands in
# postbox.inbox_dead with attempts = 3 and is acknowledged: nothing is left pending in the group,
# every good entry took effect once, and the handler saw the entry's fields as headers. Then
# consume --drain waits for entries a dead consumer holds and for undelivered ones.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
STREAM=pb:$PB_TEST:events GROUP=postbox_poison-test
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=poison-test POSTBOX_REDIS_STREAMS=$STREAM
GOOD_SQL="INSERT INTO balance (account, amount, agg)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint, \$2::jsonb->>'aggregate_id')
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount, agg = EXCLUDED.agg"
BAD_SQL="SELECT 1 / ((\$1::jsonb->>'amount')::int * 0)"
N_GOOD=400

pb_init
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL, agg text)"

xadd() { # ID TYPE AGGREGATE PAYLOAD
    redis_cli XADD "$STREAM" MAXLEN '~' 100000 '*' event_id "$1" event_type "$2" aggregate_type test \
        aggregate_id "$3" payload "$4" headers '{"trace": "t-1"}' created_at 2026-12-01T00:00:00.000000Z \
        >/dev/null || fail "redis-cli XADD failed"
}
good() { # FROM TO
    local i
    for ((i = $1; i <= $2; i++)); do
        printf 'XADD %s * event_id good-%d event_type good.v1 aggregate_type test aggregate_id a-%d payload "{\\"account\\": \\"g%d\\", \\"amount\\": %d}" headers {} created_at 2026-12-01T00:00:00Z\n' \
            "$STREAM" "$i" $((i % 10)) $((i % 10)) "$i"
    done | redis_cli >/dev/null || fail "redis-cli XADD of good entries failed"
}

xadd poison-1 bad.v1 bad-1 '{"account": "bad", "amount": 13}'
good 1 $((N_GOOD / 2))
start_consumer --set "handlers.bad.v1=$BAD_SQL" --set "handlers.good.v1=$GOOD_SQL" \
    --set consume.max_attempts=3 --set consume.backoff_base=100ms --set consume.backoff_cap=500ms
good $((N_GOOD / 2 + 1)) $N_GOOD
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 &&
               $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") == $N_GOOD ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead, $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") processed"; }
wait_until '[[ $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 10 ||
    fail "the group still has $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) entries pending"
stop_consumer

want=$((N_GOOD * (N_GOOD + 1) / 2))
got=$(psql_q "SELECT coalesce(sum(amount), 0) FROM balance WHERE account LIKE 'g%'")
off=$(psql_q "SELECT count(*) FROM (SELECT 'g' || (i % 10) AS account, sum(i) AS s FROM generate_series(1, $N_GOOD) i GROUP BY 1) e
                FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s")
attempts_logged=$(grep -c 'message poison-1 (bad.v1) attempt [0-9]* failed' "$CONSUMER_LOG" || true)
dead_row=$(psql_q "SELECT message_id, message_type, attempts, routing_key FROM postbox.inbox_dead")
aggs=$(psql_q "SELECT count(*) FROM balance WHERE agg ~ '^a-[0-9]$'")
say "good entries: sum of balances $got (want $want), accounts off: $off; aggregate_id seen in the headers by $aggs accounts"
say "poison entry: $attempts_logged failed attempts logged, dead letter: $dead_row"
((off == 0 && got == want)) || fail "balances of the good entries are wrong"
((aggs == 10)) || fail "the handler did not see aggregate_id among the headers"
[[ $dead_row == "poison-1|bad.v1|3|$STREAM" ]] || fail "unexpected dead letter: $dead_row"
((attempts_logged == 2)) || fail "expected 2 logged retries before the dead letter, got $attempts_logged"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_failures") == 0 ]] || fail "inbox_failures rows left"
[[ $(psql_q "SELECT count(*) FROM balance WHERE account = 'bad'") == 0 ]] || fail "the poison entry took effect"

# consume --drain: a ghost consumer holds 3 entries (claimed after redis.claim_idle) and 5 are not
# delivered yet; the drain ends only once all 8 are handled and nothing is pending in the group
good 1001 1008
redis_cli XREADGROUP GROUP "$GROUP" ghost COUNT 3 STREAMS "$STREAM" '>' >/dev/null || fail "XREADGROUP failed"
rc=0
timeout 60 "$POSTBOX_BIN" --set "handlers.good.v1=$GOOD_SQL" --set redis.claim_idle=1s consume --drain \
    >>"$CONSUMER_LOG" 2>&1 || rc=$?
((rc == 0)) || { tail -n 20 "$CONSUMER_LOG" >&2; fail "consume --drain exited with $rc"; }
left=$(redis_cli XPENDING "$STREAM" "$GROUP" | head -1)
handled=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE message_id LIKE 'good-100_'")
say "consume --drain: $handled of 8 late entries handled (3 of them claimed from a dead consumer), $left pending in the group"
((handled == 8 && left == 0)) || fail "consume --drain ended with $handled of 8 handled and $left pending"
