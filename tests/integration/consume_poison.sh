#!/usr/bin/env bash
# A poison message: the handler of type bad.v1 always fails (division by zero), the one of
# good.v1 works. With consume.max_attempts=3 and backoff 100 ms..500 ms, the bad message (first
# in the queue) is tried 3 times while every good message flows past it; then it lands in
# postbox.inbox_dead with its error and attempts = 3, its inbox_failures row is gone, and the
# queue ends empty.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=poison-test
GOOD_SQL="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
BAD_SQL="SELECT 1 / ((\$1::jsonb->>'amount')::int * 0)"
N_GOOD=400

pb_init
use_least_privilege # relay and consumer as members of postbox_relay / postbox_consumer
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL);
        GRANT SELECT, INSERT, UPDATE ON balance TO pb_it_consumer" # the handler's own grant
setup_queue '#'

# the poison message first, then the good ones (account g<i % 10>, amount i)
publish bad.v1 poison-1 bad.v1 '{"account": "bad", "amount": 13}'
for ((i = 1; i <= N_GOOD / 2; i++)); do
    publish good.v1 "good-$i" good.v1 "{\"account\": \"g$((i % 10))\", \"amount\": $i}"
done
start_consumer --set "handlers.bad.v1=$BAD_SQL" --set "handlers.good.v1=$GOOD_SQL" \
    --set consume.max_attempts=3 --set consume.backoff_base=100ms --set consume.backoff_cap=500ms
# more good messages while the bad one is being retried
for ((i = N_GOOD / 2 + 1; i <= N_GOOD; i++)); do
    publish good.v1 "good-$i" good.v1 "{\"account\": \"g$((i % 10))\", \"amount\": $i}"
done
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 &&
               $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") == $N_GOOD ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "after 60 s: $(psql_q "SELECT count(*) FROM postbox.inbox_dead") dead, $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") processed"; }
wait_until '[[ $(queue_count) == 0 ]]' 10 || fail "the queue still holds $(queue_count) message(s)"
stop_consumer
grep -E 'poison-1|totals' "$CONSUMER_LOG" | sed 's/^/  log: /'

inq=$(queue_count)
want=$((N_GOOD * (N_GOOD + 1) / 2))
got=$(psql_q "SELECT coalesce(sum(amount), 0) FROM balance WHERE account LIKE 'g%'")
badbal=$(psql_q "SELECT count(*) FROM balance WHERE account = 'bad'")
bad_mismatch=$(psql_q "SELECT count(*) FROM (SELECT 'g' || (i % 10) AS account, sum(i) AS s FROM generate_series(1, $N_GOOD) i GROUP BY 1) e
                          FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s")
attempts_logged=$(grep -c 'message poison-1 (bad.v1) attempt [0-9]* failed' "$CONSUMER_LOG" || true)
failures=$(psql_q "SELECT count(*) FROM postbox.inbox_failures")
dead_row=$(psql_q "SELECT message_id, message_type, attempts, error FROM postbox.inbox_dead")
good_after=$(psql_q "SELECT count(*) FROM postbox.inbox i, postbox.inbox_dead d
                      WHERE i.message_id LIKE 'good-%' AND i.processed_at <= d.dead_at")
say "good messages: sum of balances $got (want $want), accounts off: $bad_mismatch; 'bad' has a balance row: $badbal"
say "good messages committed before the poison message went dead: $good_after of $N_GOOD"
say "inbox_dead: $dead_row"
say "failed attempts logged: $attempts_logged; inbox_failures rows: $failures; messages left in the queue: $inq"

((got == want && bad_mismatch == 0)) || fail "good messages: balances sum to $got, expected $want ($bad_mismatch accounts differ)"
((badbal == 0)) || fail "the failing handler's work was committed"
IFS='|' read -r d_id d_type d_att d_err <<<"$dead_row"
[[ $d_id == poison-1 && $d_type == bad.v1 ]] || fail "inbox_dead holds '$dead_row', expected poison-1 of type bad.v1"
((d_att == 3)) || fail "inbox_dead attempts = $d_att, expected 3 (consume.max_attempts)"
[[ $d_err == *"division by zero"* ]] || fail "inbox_dead error '$d_err' does not carry the handler's error"
((attempts_logged == 2)) || fail "$attempts_logged retried failures logged for poison-1, expected 2 (then the third moves it)"
((failures == 0)) || fail "$failures inbox_failures row(s) left: $(psql_q "SELECT * FROM postbox.inbox_failures")"
((good_after > 0)) || fail "no good message was handled before the poison message went dead: it blocked the queue"
((inq == 0)) || fail "$inq message(s) left in the queue (not acknowledged)"
# a redelivery of the dead message is a duplicate, not a new failure
start_consumer --set "handlers.bad.v1=$BAD_SQL" --set "handlers.good.v1=$GOOD_SQL" --set consume.max_attempts=3
publish bad.v1 poison-1 bad.v1 '{"account": "bad", "amount": 13}'
wait_until 'grep -q "duplicate message poison-1" "$CONSUMER_LOG"' 30 ||
    fail "a redelivery of the dead message was not acknowledged as a duplicate"
stop_consumer
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 ]] || fail "the dead message was dead-lettered again"
((0 == $(queue_count))) || fail "the redelivered dead message was not acknowledged"

# once the handler is fixed, `dlq --inbox replay` republishes the dead message and it is handled
"$POSTBOX_BIN" dlq --inbox replay --consumer poison-test >"$PB_TMP/replay.out" 2>&1 ||
    { cat "$PB_TMP/replay.out" >&2; fail "dlq --inbox replay failed"; }
say "replay: $(cat "$PB_TMP/replay.out")"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "the replayed dead letter is still in inbox_dead"
start_consumer --set "handlers.bad.v1=$GOOD_SQL" --set "handlers.good.v1=$GOOD_SQL"
wait_until '[[ $(psql_q "SELECT coalesce(max(amount), 0) FROM balance WHERE account = '"'bad'"'") == 13 ]]' 30 ||
    fail "the replayed message was not handled: balance of 'bad' is $(psql_q "SELECT amount FROM balance WHERE account = 'bad'")"
stop_consumer
[[ $(psql_q "SELECT processed_at IS NOT NULL FROM postbox.inbox WHERE message_id = 'poison-1'") == t ]] ||
    fail "the replayed message's inbox row is not marked processed"
say "after the replay: balance of 'bad' = 13, inbox row processed"
say PASS
