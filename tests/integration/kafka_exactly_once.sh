#!/usr/bin/env bash
# End-to-end exactly-once with Kafka: producer transactions -> postbox.outbox -> postbox relay
# (kafka sink) -> topic -> postbox consume (kafka source, consumer group) -> a SQL handler adding
# each event's amount to an account balance. 20,000 events over 200 accounts in 10 producer
# transactions, with rolled-back producer transactions (amounts of 1,000,000 that must never
# take effect) in between, while the relay and the consumer are each SIGKILLed 9 times
# (restarted at once). A second consumer of the same group runs throughout: every kill and
# restart of the first rebalances the group, revoking and assigning partitions of both. At the end: nothing pending, the group's committed offsets are at the end
# of the topic, every balance equals the sum of its account's committed events, the inbox holds
# each committed event exactly once. Finally the whole topic is read again by a new consumer
# group: every message is a duplicate for the inbox and no balance changes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

export POSTBOX_CONSUME_SOURCE=kafka
export POSTBOX_CONSUME_CONSUMER=balances
export POSTBOX_CONSUME_HANDLER="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
export POSTBOX_RELAY_RECONNECT_CAP=2s POSTBOX_CONSUME_RECONNECT_CAP=2s
TOPIC=$(kafka_topic account)
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.balances
# A killed member stays in its group until its session times out, and the next one joins only
# then: a short session keeps each restart to a few seconds (librdkafka's default is 45 s).
GROUP_OPTS=(--set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500)
N_ACC=200 N_TX=10 PER_TX=2000 ROLLBACK_PER_TX=500
RELAY_BATCH=50
# each produce request waits 20 ms for more (a common linger.ms): a transaction's 2,000 events
# take the relay long enough for a kill to find it at work
RELAY_OPTS=(--set relay.batch_size=$RELAY_BATCH --set kafka.linger.ms=20)
: >"$CONSUMER_LOG"

outbox_count() { psql_q "SELECT count(*) FROM postbox.outbox_all"; }
group_lag() { kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "$POSTBOX_KAFKA_GROUP" "$TOPIC" 2>/dev/null || echo -1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
dup_lines() { cat "$CONSUMER_LOG" "$CONSUMER2_LOG" | grep -c 'duplicate message' || true; }
CONSUMER2_LOG=$PB_TMP/consumer2.log
: >"$CONSUMER2_LOG"
start_consumer2() { # the second member of the group, never killed
    "$POSTBOX_BIN" "${GROUP_OPTS[@]}" consume >>"$CONSUMER2_LOG" 2>&1 &
    CONSUMER2_PID=$!
    PB_PIDS+=("$CONSUMER2_PID")
}

pb_init
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL)"
produce_committed # the topic exists before the consumer subscribes
start_relay "${RELAY_OPTS[@]}"
start_consumer "${GROUP_OPTS[@]}"
start_consumer2
wait_until 'grep -q "partitions\{0,1\} assigned" "$CONSUMER_LOG"' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer got no partition within 60 s"; }

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

for ((s = 2; s <= N_TX; s++)); do
    if ((s % 3 == 1)); then produce_rolled_back; fi
    p_before=$(published_count)
    produce_committed
    # killed once it has settled part of this transaction's events and a random 0-40 ms more
    # (a fixed delay after the commit finds a fast relay done with all of them)
    t0=$(now_ms)
    while (($(published_count) <= p_before)) && (($(now_ms) - t0 < 10000)); do sleep 0.01; done
    sleep_ms $((RANDOM % 40))
    kill_relay_now $s $(($(now_ms) - t0))
    start_relay "${RELAY_OPTS[@]}"
    # the consumer needs a few seconds to join its group again: kill it once it is consuming
    before=$(inbox_count)
    wait_until '(( $(inbox_count) > before ))' 30 || true
    ms2=$((100 + RANDOM % 400))
    sleep_ms $ms2
    kill_consumer_now $s $ms2
    start_consumer "${GROUP_OPTS[@]}"
done
total=$(outbox_count)
say "producers done after $(($(date +%s) - t_start)) s: $total committed events; $relay_kills relay kills ($relay_busy while publishing), $consumer_kills consumer kills ($consumer_busy while consuming)"

wait_until '(( $(pending_count) == 0 ))' 120 || fail "still $(pending_count) events pending 120 s after the producers finished"
wait_until '(( $(inbox_count) >= total ))' 120 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "only $(inbox_count) of $total events in the inbox 120 s after the producers finished"; }
wait_until '[[ $(group_lag) == 0 ]]' 60 || fail "group $POSTBOX_KAFKA_GROUP: $(group_lag) message(s) past its committed offsets"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
stop_consumer
kill -TERM "$CONSUMER2_PID"
wait_until '! pid_alive "$CONSUMER2_PID"' 60 || fail "the second consumer still runs 60 s after SIGTERM"
rc2=0
wait "$CONSUMER2_PID" || rc2=$?
((rc2 == 0)) || { tail -n 20 "$CONSUMER2_LOG" >&2; fail "the second consumer exited with $rc2"; }
revokes=$(grep -c 'partitions\{0,1\} revoked' "$CONSUMER2_LOG" || true)
handled2=$(grep -o 'totals: processed [0-9]*' "$CONSUMER2_LOG" | tail -1 | grep -o '[0-9]*$')
say "the second consumer: ${handled2:-0} messages handled, partitions revoked from it $revokes times"
((revokes >= 3)) || { tail -n 30 "$CONSUMER2_LOG" >&2; fail "the second consumer saw only $revokes rebalances"; }
((${handled2:-0} > 0)) || fail "the second consumer handled nothing"

# postbox status asks the cluster for the group's committed offsets: nothing left
status=$("$POSTBOX_BIN" status 2>/dev/null) || true
grep -q "consumer group \"$POSTBOX_KAFKA_GROUP\": lag 0$" <<<"$status" ||
    fail "postbox status does not show lag 0 for group $POSTBOX_KAFKA_GROUP: $(grep -A6 '^kafka' <<<"$status")"
say "postbox status: $(grep 'consumer group' <<<"$status")"

in_topic=$(kafka_tool count "$POSTBOX_KAFKA_BROKERS" "$TOPIC")
dups=$(dup_lines)
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
say "committed events $total; rolled-back events in the outbox: $rolled; the topic holds $in_topic message(s) (the relay's republishes after kills included)"
say "balances: sum expected $sum_expected, actual $sum_actual; accounts off: $off"
say "inbox: $rows rows ($processed processed), committed events without an inbox row: $missing, inbox rows not in the outbox: $unknown; duplicates absorbed by the inbox: $dups"

((rolled == 0)) || fail "events of rolled-back producer transactions are in the outbox"
((off == 0)) || fail "$off account balance(s) differ from the sum of their committed events (sum $sum_actual, expected $sum_expected)"
((sum_actual == sum_expected)) || fail "total balance $sum_actual, expected $sum_expected"
((missing == 0)) || fail "$missing committed event(s) never took effect"
((unknown == 0)) || fail "$unknown inbox row(s) for events that were never committed"
((rows == total && processed == total)) || fail "inbox: $rows rows ($processed processed), expected $total"
((in_topic >= total)) || fail "the topic holds $in_topic messages for $total events"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "messages were dead-lettered: $(psql_q "SELECT error FROM postbox.inbox_dead LIMIT 3")"
((relay_kills >= 3 && consumer_kills >= 3)) || fail "only $relay_kills relay and $consumer_kills consumer kills"
((relay_busy >= 3)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
((consumer_busy >= 3)) || fail "only $consumer_busy of $consumer_kills consumer kills hit a consumer with work in hand"
check_in_order "$CONSUMER_LOG" "$CONSUMER2_LOG"

# replay: a new consumer group reads the whole topic again
before=$dups
METRICS_PORT=$(free_port)
start_consumer "${GROUP_OPTS[@]}" --set kafka.group=pb.$PB_KAFKA_RUN.replay --set metrics.listen=127.0.0.1:$METRICS_PORT
wait_until '(( $(dup_lines) >= before + in_topic ))' 180 || fail "replay: only $(($(dup_lines) - before)) of $in_topic messages came back as duplicates"
# /metrics: the consumer lag of each partition (librdkafka's view), 0 once it caught up
lag_sum() { curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" |
    awk '/^postbox_consumer_lag_messages\{/ { n++; s += $2 } END { if (n) print s; else print -1 }'; }
wait_until '[[ $(lag_sum) == 0 ]]' 30 || fail "replay: /metrics shows consumer lag $(lag_sum) (-1: no series)"
say "replay: /metrics shows $(curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" | grep -c '^postbox_consumer_lag_messages{') partition lag series, all 0"
stop_consumer
off=$(psql_q "$off_query")
say "replay of the whole topic through a new consumer group: $(($(dup_lines) - before)) duplicates absorbed; accounts off: $off; inbox rows $(inbox_count)"
((off == 0)) || fail "the replay changed $off balance(s)"
[[ $(inbox_count) == "$total" ]] || fail "the replay changed the inbox"
