#!/usr/bin/env bash
# The consumer's PostgreSQL connection killed (pg_terminate_backend) 4 times while it consumes
# 10,000 events (outbox -> relay -> queue, amounts over 100 accounts): it reconnects by itself,
# acknowledges nothing it did not commit, and in the end every balance is exactly the sum of the
# events, the inbox holds each event once and the queue is empty.
# The consumer runs two lanes (consume.lanes=2), so both connections and the lane failure path
# are exercised.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=db-outage
# pg_sleep(0.3 ms) per message bounds the rate (< 3,300/s), so the terminations fall while
# messages are being consumed, however fast the machine
export POSTBOX_CONSUME_HANDLER="WITH pace AS (SELECT pg_sleep(0.0003))
    INSERT INTO balance (account, amount)
    SELECT \$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint FROM pace
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
N=10000 N_ACC=100 KILLS=4

# every backend of the test database but this psql session: with the relay stopped, the consumer's
# (it connects without an application_name)
terminate_others() {
    psql_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
}

pb_init
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL)"
setup_queue '#'
psql_q "SELECT count(postbox.enqueue('account', 'acct-' || (i % $N_ACC), 'deposit.v1',
                 jsonb_build_object('account', 'acct-' || (i % $N_ACC), 'amount', (i * 7919) % 1000 - 300)))
          FROM generate_series(1, $N) i" >/dev/null
relay_drain 120
inq=$(queue_count)
((inq == N)) || fail "the relay put $inq message(s) in the queue, expected $N"

start_consumer --set consume.reconnect_cap=1s --set consume.batch_size=50 --set consume.lanes=2
t0=$(date +%s)
for ((k = 1; k <= KILLS; k++)); do
    # kill points spread over the run: after k/(KILLS+1) of the messages, plus a random bit
    target=$((N * k / (KILLS + 1) + RANDOM % (N / (4 * (KILLS + 1)))))
    wait_until '(( $(inbox_count) >= target ))' 120 || fail "the consumer did not reach $target inbox rows"
    before=$(inbox_count)
    killed=$(terminate_others)
    say "termination $k at $before inbox rows (target $target): $killed backend(s) terminated"
    ((killed >= 1)) || fail "no consumer backend to terminate"
    ((before < N)) || fail "the consumer finished before termination $k; the test tested less than intended"
done
wait_until '(( $(inbox_count) >= N ))' 120 || fail "only $(inbox_count) of $N messages handled 120 s after the last termination"
wait_until '[[ $(queue_count) == 0 ]]' 30 || fail "the queue still holds $(queue_count) message(s)"
stop_consumer
say "consumed $N messages in $(($(date +%s) - t0)) s with $KILLS terminations"
grep -Ei 'postgresql|reconnect|lost|terminat' "$CONSUMER_LOG" | head -12 | sed 's/^/  log: /' || true
grep -o 'totals: .*' "$CONSUMER_LOG" | tail -n 1 | sed 's/^/  consumer /'

inq=$(queue_count)
rows=$(inbox_count)
processed_rows=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL")
missing=$(psql_q "SELECT count(*) FROM postbox.outbox_all o WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)")
off=$(psql_q "SELECT count(*) FROM (SELECT payload->>'account' AS account, sum((payload->>'amount')::bigint) AS s
                                      FROM postbox.outbox_all GROUP BY 1) e
                FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s")
reconnects=$(grep -c 'consumer "db-outage" writing its inbox' "$CONSUMER_LOG" || true)
say "inbox rows $rows (processed $processed_rows), events without an inbox row $missing, accounts whose balance is off $off"
say "connections to PostgreSQL made: $reconnects; messages left in the queue: $inq; dead: $(psql_q "SELECT count(*) FROM postbox.inbox_dead")"
((off == 0)) || fail "$off account balance(s) differ from the sum of their events"
((rows == N && processed_rows == N && missing == 0)) || fail "inbox: $rows rows ($processed_rows processed), $missing events missing; expected $N"
((inq == 0)) || fail "$inq message(s) left in the queue"
((reconnects >= 2)) || fail "the consumer connected to PostgreSQL $reconnects time(s): the terminations went unnoticed?"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "messages were dead-lettered because of lost connections"
