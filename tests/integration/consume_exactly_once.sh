#!/usr/bin/env bash
# The inbox's main acceptance, end to end: producer transactions -> postbox.outbox -> postbox relay
# -> RabbitMQ -> postbox consume -> a SQL handler that adds each event's amount to an account
# balance. 20,000 events over 200 accounts with varied amounts are enqueued in 10 producer
# transactions while the relay and the consumer run, with 4 rolled-back producer transactions
# (amounts of 1,000,000, which must never take effect) in between. Meanwhile the relay is killed
# with SIGKILL 7 times, the consumer 8 times (restarted at once), and RabbitMQ is stopped and
# started once while the queue holds messages (durable queue, persistent messages). At the end:
# nothing pending, queue empty, every balance equals the sum of its account's committed events
# (from postbox.outbox), the inbox holds each committed event exactly once, and the consumers'
# logs show the duplicates the inbox absorbed (relay republishes and redeliveries); at least one
# is required (forced by hand when the run produced none).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=balances
export POSTBOX_CONSUME_HANDLER="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
# quick reconnects after the broker restart, and quick retries of the events whose publish failed
# in the restart (they hold back their account's later events, which keep their order)
export POSTBOX_RELAY_RECONNECT_CAP=2s POSTBOX_CONSUME_RECONNECT_CAP=2s
export POSTBOX_RELAY_BACKOFF_BASE=200ms POSTBOX_RELAY_BACKOFF_CAP=2s
N_ACC=200 N_TX=10 PER_TX=2000 ROLLBACK_PER_TX=500
RELAY_BATCH=50
total=$((N_TX * PER_TX))
: >"$CONSUMER_LOG"
on_exit 'services start amqp >/dev/null 2>&1 || echo "[consume_exactly_once] could not restart RabbitMQ" >&2'

outbox_count() { psql_q "SELECT count(*) FROM postbox.outbox_all"; }

# One committed producer transaction of PER_TX deposits: random accounts, amounts -500..1499.
# One rolled-back producer transaction: its events must never take effect.

pb_init
use_least_privilege # relay and consumer as members of postbox_relay / postbox_consumer
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL);
        GRANT SELECT, INSERT, UPDATE ON balance TO pb_it_consumer" # the handler's own grant
# the queue exists and is bound before the relay publishes (the consumer's declaration matches it)
setup_queue '#'
start_consumer
start_relay --set relay.batch_size=$RELAY_BATCH

# Steps 1-4 and 7-9: a producer transaction, then SIGKILL the relay 0-60 ms after its commit
# (while it publishes the new events) and the consumer 50-300 ms later (while it consumes them),
# each restarted at once. Step 5: the consumer is killed and left down, a producer transaction
# fills the queue, RabbitMQ is stopped while the relay works, another producer transaction
# commits while the broker is down (step 6), RabbitMQ starts again, then the consumer. Step 10:
# a last transaction, undisturbed. Rolled-back transactions precede steps 1, 4, 7 and 10.
relay_kills=0 consumer_kills=0 relay_busy=0 consumer_busy=0
relay_p0=0 consumer_i0=0
t_start=$(date +%s)

kill_consumer_now() { # STEP WHEN
    pid_alive "$CONSUMER_PID" || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer exited by itself before step $1"; }
    kill_consumer
    local i o busy=no
    i=$(inbox_count); o=$(outbox_count)
    consumer_kills=$((consumer_kills + 1))
    if ((i > consumer_i0 && i < o)); then busy=yes; consumer_busy=$((consumer_busy + 1)); fi
    say "step $1: SIGKILL consumer $2: inbox $consumer_i0 -> $i during its run, committed events $o, while consuming: $busy"
    consumer_i0=$i
}

for ((s = 1; s <= N_TX; s++)); do
    if ((s % 3 == 1)); then produce_rolled_back; fi
    if ((s == 5)); then
        kill_consumer_now $s "before the producer commit, left down until RabbitMQ is back"
        produce_committed
        sleep_ms $((RANDOM % 60))
        say "step $s: stopping RabbitMQ (published $(published_count), pending $(pending_count), inbox $(inbox_count), queue $(queue_count))"
        services stop amqp || fail "scripts/services stop amqp failed"
        produce_committed # the producers go on while the broker is down
        s=$((s + 1))      # (that was step 6's transaction)
        sleep 1
        services start amqp || fail "scripts/services start amqp failed"
        inq=$(queue_count)
        say "step $s: RabbitMQ started again; the queue kept $inq message(s); pending $(pending_count)"
        ((inq > 0)) || say "note: the queue was empty after the restart (the relay had not published the step's events before the stop)"
        start_consumer
        continue
    fi
    produce_committed
    ((s == N_TX)) && break
    ms=$((RANDOM % 60))
    sleep_ms $ms
    kill_relay_now $s $ms
    start_relay --set relay.batch_size=$RELAY_BATCH
    ms2=$((50 + RANDOM % 250))
    sleep_ms $((ms2 - ms))
    kill_consumer_now $s "$ms2 ms after the producer commit"
    start_consumer
    sleep_ms $((200 + RANDOM % 400))
done
total=$(outbox_count)
say "producers done after $(($(date +%s) - t_start)) s: $total committed events; $relay_kills relay kills ($relay_busy while publishing), $consumer_kills consumer kills ($consumer_busy while consuming)"

wait_until '(( $(pending_count) == 0 ))' 120 || fail "still $(pending_count) events pending 120 s after the producers finished"
wait_until '(( $(inbox_count) >= total ))' 120 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "only $(inbox_count) of $total events in the inbox 120 s after the producers finished"; }
wait_until '[[ $(queue_count) == 0 ]]' 60 || fail "the queue still holds $(queue_count) message(s)"
sleep 1 # let the consumer settle what it holds
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
stop_consumer

dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
forced=0
if ((dups == 0)); then
    # no natural duplicates this time: deliver 5 committed events twice more by hand
    say "no duplicates arose naturally; publishing 5 committed events twice more by hand"
    while IFS='|' read -r id type payload; do
        amqp_tool publish "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "account.$type" "$id" "$type" "$payload" 2 >/dev/null ||
            fail "amqp-tool publish failed"
    done < <(psql_q "SELECT event_id, event_type, payload::text FROM postbox.outbox_all ORDER BY id LIMIT 5")
    forced=10
    start_consumer
    wait_until '(( $(grep -c "duplicate message" "$CONSUMER_LOG") >= forced ))' 30 || fail "the forced duplicates were not absorbed"
    wait_until '[[ $(queue_count) == 0 ]]' 30 || fail "the queue still holds $(queue_count) message(s)"
    stop_consumer
    dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
fi

inq=$(queue_count)
rows=$(inbox_count)
processed=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'balances' AND processed_at IS NOT NULL")
missing=$(psql_q "SELECT count(*) FROM postbox.outbox_all o WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)")
unknown=$(psql_q "SELECT count(*) FROM postbox.inbox i WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.outbox_all o WHERE o.event_id::text = i.message_id)")
psql_q "SELECT payload->>'account' AS account, sum((payload->>'amount')::bigint) FROM postbox.outbox_all GROUP BY 1" >"$PB_TMP/expected"
off=$(psql_q "SELECT count(*) FROM (SELECT payload->>'account' AS account, sum((payload->>'amount')::bigint) AS s
                                      FROM postbox.outbox_all GROUP BY 1) e
                FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s")
psql_q "SELECT account, e.s AS expected, b.amount AS actual FROM (SELECT payload->>'account' AS account,
               sum((payload->>'amount')::bigint) AS s FROM postbox.outbox_all GROUP BY 1) e
          FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s LIMIT 5" | sed 's/^/  off: /'
sum_expected=$(psql_q "SELECT sum((payload->>'amount')::bigint) FROM postbox.outbox_all")
sum_actual=$(psql_q "SELECT sum(amount) FROM balance")
rolled=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE payload ? 'rolled_back'")
relay_starts=$(grep -c '^==== .* relay' "$PB_RELAY_LOG" || true)
consumer_starts=$(grep -c '^==== ' "$CONSUMER_LOG" || true)
# the totals line each consumer run logged last (periodic every 10 s and at exit; a killed run
# may have logged none): a lower bound of what the 'duplicate message' lines count
totals_dups=$(awk '/^==== / { s += d; d = 0 } /totals: / { t = $0; sub(/.*duplicates /, "", t); sub(/,.*/, "", t); d = t + 0 }
                   END { print s + d }' "$CONSUMER_LOG")
republished=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE attempts > 0")

say "committed events $total over $(wc -l <"$PB_TMP/expected") accounts; rolled-back events in the outbox: $rolled"
say "balances: sum expected $sum_expected, actual $sum_actual; accounts off: $off"
say "inbox: $rows rows ($processed processed), committed events without an inbox row: $missing, inbox rows not in the outbox: $unknown"
say "relay runs $relay_starts, consumer runs $consumer_starts, RabbitMQ restarted once; messages left in the queue: $inq"
say "duplicates absorbed by the inbox: $dups ('duplicate message' log lines over all consumer runs; the last totals line of each run adds up to $totals_dups, killed runs log none)$( ((forced)) && echo ", of which $forced forced by hand")"
grep -m 3 'duplicate message' "$CONSUMER_LOG" | sed 's/^/  log: /'

((rolled == 0)) || fail "events of rolled-back producer transactions are in the outbox"
((off == 0)) || fail "$off account balance(s) differ from the sum of their committed events (sum $sum_actual, expected $sum_expected)"
((sum_actual == sum_expected)) || fail "total balance $sum_actual, expected $sum_expected"
((missing == 0)) || fail "$missing committed event(s) never took effect"
((unknown == 0)) || fail "$unknown inbox row(s) for events that were never committed"
((rows == total && processed == total)) || fail "inbox: $rows rows ($processed processed), expected $total"
((inq == 0)) || fail "$inq message(s) left in the queue"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "messages were dead-lettered: $(psql_q "SELECT error FROM postbox.inbox_dead LIMIT 3")"
((relay_kills >= 3 && consumer_kills >= 3)) || fail "only $relay_kills relay and $consumer_kills consumer kills"
((relay_busy >= 3)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
((consumer_busy >= 3)) || fail "only $consumer_busy of $consumer_kills consumer kills hit a consumer with work in hand"
check_in_order "$CONSUMER_LOG"
((dups > 0)) || fail "no duplicate was absorbed"
