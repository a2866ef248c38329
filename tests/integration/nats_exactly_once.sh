#!/usr/bin/env bash
# The inbox's end-to-end exactly-once acceptance with NATS JetStream in place of RabbitMQ:
# producer transactions -> postbox.outbox -> postbox relay (nats sink) -> JetStream stream ->
# postbox consume (durable pull consumer) -> a SQL handler adding each event's amount to an
# account balance. 20,000 events over 200 accounts in 10 producer transactions, with rolled-back
# producer transactions (amounts of 1,000,000 that must never take effect) in between, while the
# relay is killed with SIGKILL 8 times and the consumer 9 times (restarted at once), and
# nats-server is stopped and started once (its JetStream data kept). At the end: nothing pending,
# the consumer has nothing pending or unacknowledged, every balance equals the sum of its
# account's committed events, the inbox holds each committed event exactly once. Finally the
# whole stream is replayed through a fresh durable consumer: every message is a duplicate for
# the inbox and no balance changes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/nats_lib.sh"

export POSTBOX_CONSUME_CONSUMER=balances
export POSTBOX_CONSUME_HANDLER="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
export POSTBOX_RELAY_RECONNECT_CAP=2s POSTBOX_CONSUME_RECONNECT_CAP=2s
# a killed consumer's unacknowledged messages come back after ack_wait
export POSTBOX_NATS_ACK_WAIT=3s
DURABLE=postbox_balances
N_ACC=200 N_TX=10 PER_TX=2000 ROLLBACK_PER_TX=500
RELAY_BATCH=50
: >"$CONSUMER_LOG"
on_exit 'services start nats >/dev/null 2>&1 || echo "[nats_exactly_once] could not restart nats-server" >&2'

outbox_count() { psql_q "SELECT count(*) FROM postbox.outbox_all"; }
# messages the durable consumer has not delivered yet plus those not acknowledged
consumer_backlog() {
    local info p a
    info=$(nats_tool consumer-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$DURABLE" 2>/dev/null) || { echo -1; return; }
    p=${info#*pending=}; p=${p%% *}
    a=${info#*ack_pending=}; a=${a%% *}
    echo $((p + a))
}
dup_lines() { grep -c 'duplicate message' "$CONSUMER_LOG" || true; }

pb_init
use_least_privilege # relay and consumer as members of postbox_relay / postbox_consumer
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL);
        GRANT SELECT, INSERT, UPDATE ON balance TO pb_it_consumer" # the handler's own grant
start_consumer # creates the stream and the durable consumer
wait_until '[[ $(consumer_backlog) != -1 ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer did not create its durable consumer"; }
start_relay --set relay.batch_size=$RELAY_BATCH

relay_kills=0 consumer_kills=0 relay_busy=0 consumer_busy=0
relay_p0=0 consumer_i0=0
t_start=$(date +%s)

kill_consumer_now() { # STEP MS
    pid_alive "$CONSUMER_PID" || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer exited by itself before step $1"; }
    kill_consumer
    local i o busy=no
    i=$(inbox_count); o=$(outbox_count)
    consumer_kills=$((consumer_kills + 1))
    if ((i > consumer_i0 && i < o)); then busy=yes; consumer_busy=$((consumer_busy + 1)); fi
    say "step $1: SIGKILL consumer $2 ms after the producer commit: inbox $consumer_i0 -> $i during its run, committed events $o, while consuming: $busy"
    consumer_i0=$i
}

for ((s = 1; s <= N_TX; s++)); do
    if ((s % 3 == 1)); then produce_rolled_back; fi
    if ((s == 5)); then
        kill_consumer_now $s 0
        produce_committed
        sleep_ms $((RANDOM % 60))
        say "step $s: stopping nats-server (published $(published_count), pending $(pending_count), inbox $(inbox_count), stream $(stream_count))"
        services stop nats || fail "scripts/services stop nats failed"
        produce_committed # the producers go on while the broker is down
        s=$((s + 1))
        sleep 1
        services start nats || fail "scripts/services start nats failed"
        say "step $s: nats-server started again; the stream kept $(stream_count) message(s); pending $(pending_count)"
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
    kill_consumer_now $s $ms2
    start_consumer
    sleep_ms $((200 + RANDOM % 400))
done
total=$(outbox_count)
say "producers done after $(($(date +%s) - t_start)) s: $total committed events; $relay_kills relay kills ($relay_busy while publishing), $consumer_kills consumer kills ($consumer_busy while consuming)"

wait_until '(( $(pending_count) == 0 ))' 120 || fail "still $(pending_count) events pending 120 s after the producers finished"
wait_until '(( $(inbox_count) >= total ))' 120 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "only $(inbox_count) of $total events in the inbox 120 s after the producers finished"; }
wait_until '[[ $(consumer_backlog) == 0 ]]' 60 || fail "the durable consumer still has $(consumer_backlog) message(s) pending or unacknowledged"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
stop_consumer

in_stream=$(stream_count)
dups=$(dup_lines)
relay_dup_acks=$(relay_duplicate_acks)
rows=$(inbox_count)
processed=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'balances' AND processed_at IS NOT NULL")
missing=$(psql_q "SELECT count(*) FROM postbox.outbox_all o WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)")
unknown=$(psql_q "SELECT count(*) FROM postbox.inbox i WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.outbox_all o WHERE o.event_id::text = i.message_id)")
off_query="SELECT count(*) FROM (SELECT payload->>'account' AS account, sum((payload->>'amount')::bigint) AS s
                                  FROM postbox.outbox_all GROUP BY 1) e
            FULL JOIN balance b USING (account) WHERE b.amount IS DISTINCT FROM e.s"
off=$(psql_q "$off_query")
sum_expected=$(psql_q "SELECT sum((payload->>'amount')::bigint) FROM postbox.outbox_all")
sum_actual=$(psql_q "SELECT sum(amount) FROM balance")
rolled=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE payload ? 'rolled_back'")
say "committed events $total; rolled-back events in the outbox: $rolled; stream holds $in_stream message(s)"
say "balances: sum expected $sum_expected, actual $sum_actual; accounts off: $off"
say "inbox: $rows rows ($processed processed), committed events without an inbox row: $missing, inbox rows not in the outbox: $unknown"
say "relay republishes dropped by JetStream (duplicate acks): $relay_dup_acks; duplicates absorbed by the inbox: $dups"

((rolled == 0)) || fail "events of rolled-back producer transactions are in the outbox"
((off == 0)) || fail "$off account balance(s) differ from the sum of their committed events (sum $sum_actual, expected $sum_expected)"
((sum_actual == sum_expected)) || fail "total balance $sum_actual, expected $sum_expected"
((missing == 0)) || fail "$missing committed event(s) never took effect"
((unknown == 0)) || fail "$unknown inbox row(s) for events that were never committed"
((rows == total && processed == total)) || fail "inbox: $rows rows ($processed processed), expected $total"
((in_stream == total)) || fail "the stream holds $in_stream messages for $total events (JetStream dedup by Nats-Msg-Id)"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "messages were dead-lettered: $(psql_q "SELECT error FROM postbox.inbox_dead LIMIT 3")"
((relay_kills >= 3 && consumer_kills >= 3)) || fail "only $relay_kills relay and $consumer_kills consumer kills"
((relay_busy >= 3)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
((consumer_busy >= 3)) || fail "only $consumer_busy of $consumer_kills consumer kills hit a consumer with work in hand"
check_in_order "$CONSUMER_LOG"

# replay: a fresh durable consumer delivers the whole stream again
nats_tool delete-consumer "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" "$DURABLE" || fail "nats-tool delete-consumer failed"
before=$dups
start_consumer
wait_until '(( $(dup_lines) >= before + total ))' 180 || fail "replay: only $(($(dup_lines) - before)) of $total messages came back as duplicates"
wait_until '[[ $(consumer_backlog) == 0 ]]' 60 || fail "replay: $(consumer_backlog) message(s) left"
stop_consumer
off=$(psql_q "$off_query")
say "replay of the whole stream through a new durable consumer: $(($(dup_lines) - before)) duplicates absorbed; accounts off: $off; inbox rows $(inbox_count)"
((off == 0)) || fail "the replay changed $off balance(s)"
[[ $(inbox_count) == "$total" ]] || fail "the replay changed the inbox"
