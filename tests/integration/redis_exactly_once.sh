#!/usr/bin/env bash
# The inbox's end-to-end exactly-once acceptance with Redis Streams: producer transactions ->
# postbox.outbox -> postbox relay (redis sink, XADD) -> a stream -> postbox consume (consumer
# group, XREADGROUP / XAUTOCLAIM / XACK) -> a SQL handler adding each event's amount to an account
# balance. 20,000 events over 200 accounts in 10 producer transactions, with rolled-back producer
# transactions (amounts of 1,000,000 that must never take effect) in between, while the relay is
# killed with SIGKILL 7 times and the consumer 8 times (restarted at once; a killed consumer's
# entries are claimed by the next one after redis.claim_idle), and redis-server is stopped and
# started once (append-only file on, so the streams survive). The test runs its own redis-server
# (scripts/services with a services directory and port of its own), never the shared one.
# At the end: nothing pending in the outbox, no entry pending in the group and none left
# undelivered, every balance equals the sum of its account's committed events, the inbox holds
# each committed event exactly once and counts the duplicates it absorbed (Redis keeps the
# relay's republished copies). Finally the group is destroyed and created again: the whole stream
# comes back, every entry is a duplicate for the inbox and no balance changes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
# A command that fails outside fail() (psql while PostgreSQL refuses a connection, say) ends the
# test through set -e without a word: name it (only where set -e makes it end the test: in the
# test's own shell, not in the exit handler).
set -E
trap '_pb_err=$?; [[ $- != *e* ]] || ((BASH_SUBSHELL)) || printf "[%s] FAIL: line %s: \"%s\" exited with status %s\n" "$PB_TEST" "$LINENO" "$BASH_COMMAND" "$_pb_err" >&2' ERR

# our own redis-server; the shared one is never stopped
E2E_DIR=/tmp/pb-redis-e2e-svc POSTBOX_REDIS_PORT=${PB_E2E_REDIS_PORT:-26391}
own_redis() { POSTBOX_SERVICES_DIR=$E2E_DIR POSTBOX_REDIS_PORT=$POSTBOX_REDIS_PORT services "$@" redis; }
own_redis stop >/dev/null 2>&1 || true
rm -rf "$E2E_DIR"
own_redis start >/dev/null || fail "cannot start our own redis-server on port $POSTBOX_REDIS_PORT"
# with PB_KEEP_TMP=1 the server's data (append-only file) and log stay in $PB_TMP/redis-svc
on_exit 'own_redis stop >/dev/null 2>&1; [[ ${PB_KEEP_TMP:-0} != 1 ]] || cp -a "$E2E_DIR" "$PB_TMP/redis-svc"; rm -rf "$E2E_DIR"'
export POSTBOX_REDIS_URL=redis://127.0.0.1:$POSTBOX_REDIS_PORT/0
source "$(dirname "$0")/redis_lib.sh"
[[ $(redis_cli CONFIG GET appendonly | tail -1) == yes ]] || fail "our redis-server runs without appendonly"

export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=balances
export POSTBOX_CONSUME_HANDLER="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"
export POSTBOX_RELAY_RECONNECT_CAP=2s POSTBOX_CONSUME_RECONNECT_CAP=2s
STREAM=pb:$PB_TEST:account GROUP=postbox_balances
export POSTBOX_REDIS_STREAMS=$STREAM
# a killed consumer's entries are claimed by the next one after this
export POSTBOX_REDIS_CLAIM_IDLE=2s
N_ACC=200 N_TX=10 PER_TX=2000 ROLLBACK_PER_TX=500
RELAY_BATCH=50
: >"$CONSUMER_LOG"

outbox_count() { psql_q "SELECT count(*) FROM postbox.outbox_all"; }
# entries of the group pending (delivered, not acknowledged) plus not yet delivered (lag)
group_pending() { redis_cli XPENDING "$STREAM" "$GROUP" | head -1; }
group_backlog() {
    local info lag
    info=$(redis_cli --raw XINFO GROUPS "$STREAM" 2>/dev/null) || { echo -1; return; }
    lag=$(awk 'prev == "lag" { print; exit } { prev = $0 }' <<<"$info")
    [[ -n $lag ]] || { echo -1; return; }
    echo $(($(group_pending) + lag))
}
gave_up_lines() { grep -c 'gave up waiting for sequence' "$CONSUMER_LOG" || true; }

# On a failure: where the committed events without an inbox row are (in the stream? pending, on
# which consumer?), what the consumers logged about them, and the group's consumers.
diagnose_missing() {
    local f=$PB_TMP/missing.txt dump=$PB_TMP/stream.txt id ev
    psql_q "SELECT o.id, o.event_id, o.aggregate_id, o.sequence FROM postbox.outbox_all o
              WHERE NOT EXISTS (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)
              ORDER BY o.id" >"$f" 2>/dev/null || return 0
    [[ -s $f ]] || return 0
    printf -- '---- %d committed events without an inbox row, outbox ids %s..%s (all in %s) ----\n' \
        "$(wc -l <"$f")" "$(head -1 "$f" | cut -d'|' -f1)" "$(tail -1 "$f" | cut -d'|' -f1)" "$f" >&2
    redis_cli --raw XRANGE "$STREAM" - + >"$dump" 2>/dev/null || true
    head -3 "$f" | while IFS='|' read -r id ev _; do
        printf 'outbox id %s, event %s: %s cop(y/ies) in the stream; log lines:\n' "$id" "$ev" \
            "$(grep -c "^$ev\$" "$dump" || true)" >&2
        grep -h "$ev" "$CONSUMER_LOG" "$PB_RELAY_LOG" | cut -c1-240 | head -4 >&2 || true
    done
    printf 'consumer log: %s "gave up waiting for sequence" lines (consume.gap_timeout), %s claims\n' \
        "$(gave_up_lines)" "$(grep -c 'claimed entry .* of stream' "$CONSUMER_LOG" || true)" >&2
    grep -h 'gave up waiting for sequence' "$CONSUMER_LOG" | cut -c1-200 | head -3 >&2 || true
    printf 'group: pending %s; consumers:\n' "$(group_pending)" >&2
    redis_cli XINFO CONSUMERS "$STREAM" "$GROUP" 2>&1 | paste - - - - - - | head -20 >&2 || true
}
dup_lines() { grep -c 'duplicate message' "$CONSUMER_LOG" || true; }

pb_init
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL)"
start_consumer # creates the stream and the group
wait_until '[[ $(group_backlog) != -1 ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer did not create its group"; }
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
    say "step $1: SIGKILL consumer $2 ms after the producer commit: inbox $consumer_i0 -> $i during its run, committed events $o, while consuming: $busy; group pending $(group_pending)"
    consumer_i0=$i
}

for ((s = 1; s <= N_TX; s++)); do
    if ((s % 3 == 1)); then produce_rolled_back; fi
    if ((s == 5)); then
        kill_consumer_now $s 0
        produce_committed
        sleep_ms $((RANDOM % 60))
        say "step $s: stopping our redis-server (published $(published_count), pending $(pending_count), inbox $(inbox_count), stream $(stream_len "$STREAM"))"
        own_redis stop >/dev/null || fail "scripts/services stop redis failed"
        produce_committed # the producers go on while the broker is down
        s=$((s + 1))
        sleep 1
        own_redis start >/dev/null || fail "scripts/services start redis failed"
        wait_until '[[ $(redis_cli PING 2>&1) == PONG ]]' 30 || fail "redis-server still loading its append-only file after 30 s"
        say "step $s: redis-server started again; the stream kept $(stream_len "$STREAM") entries; group pending $(group_pending); outbox pending $(pending_count)"
        start_consumer
        continue
    fi
    produce_committed
    t_commit=$(date +%s%N)
    ((s == N_TX)) && break
    ms=$((RANDOM % 60))
    sleep_ms $ms
    kill_relay_now $s $ms
    start_relay --set relay.batch_size=$RELAY_BATCH
    # the consumer is killed while it works: once its inbox moved past where its run began, a
    # few milliseconds later (a fixed delay missed it: it handles a step's 2,000 events in
    # about 200 ms)
    for ((w = 0; w < 300 && $(inbox_count) <= consumer_i0; w++)); do sleep_ms 10; done
    sleep_ms $((RANDOM % 30))
    kill_consumer_now $s $((($(date +%s%N) - t_commit) / 1000000))
    start_consumer
    sleep_ms $((200 + RANDOM % 400))
done
total=$(outbox_count)
say "producers done after $(($(date +%s) - t_start)) s: $total committed events; $relay_kills relay kills ($relay_busy while publishing), $consumer_kills consumer kills ($consumer_busy while consuming)"

wait_until '(( $(pending_count) == 0 ))' 120 || fail "still $(pending_count) events pending 120 s after the producers finished"
wait_until '(( $(inbox_count) >= total ))' 120 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; diagnose_missing; fail "only $(inbox_count) of $total events in the inbox 120 s after the producers finished"; }
wait_until '[[ $(group_backlog) == 0 ]]' 60 || fail "the group still has $(group_backlog) entries pending or undelivered ($(group_pending) pending)"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
stop_consumer

in_stream=$(stream_len "$STREAM")
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
claims=$(grep -c 'claimed entry .* of stream' "$CONSUMER_LOG" || true)
say "committed events $total; rolled-back events in the outbox: $rolled; the stream holds $in_stream entries ($((in_stream - total)) copies added again by killed relays)"
say "balances: sum expected $sum_expected, actual $sum_actual; accounts off: $off"
say "inbox: $rows rows ($processed processed), committed events without an inbox row: $missing, inbox rows not in the outbox: $unknown"
say "duplicates absorbed by the inbox: $dups; entries claimed from dead consumers (XAUTOCLAIM): $claims; group pending at the end: $(group_pending)"

((rolled == 0)) || fail "events of rolled-back producer transactions are in the outbox"
((off == 0)) || fail "$off account balance(s) differ from the sum of their committed events (sum $sum_actual, expected $sum_expected)"
((sum_actual == sum_expected)) || fail "total balance $sum_actual, expected $sum_expected"
((missing == 0)) || { diagnose_missing; fail "$missing committed event(s) never took effect"; }
# the consumer claims a killed consumer's entries within seconds: no aggregate may wait out
# consume.gap_timeout (1 min) and go on without its missing entries (which then came too late)
gave_up=$(gave_up_lines)
((gave_up == 0)) || { diagnose_missing; fail "$gave_up aggregate(s) gave up waiting for a missing entry (consume.gap_timeout)"; }
((unknown == 0)) || fail "$unknown inbox row(s) for events that were never committed"
((rows == total && processed == total)) || fail "inbox: $rows rows ($processed processed), expected $total"
((in_stream >= total)) || fail "the stream holds $in_stream entries for $total events"
((dups >= in_stream - total)) || fail "the inbox absorbed $dups duplicates, but the stream holds $((in_stream - total)) extra copies"
((claims >= 1)) || fail "no killed consumer's entries were claimed (XAUTOCLAIM)"
[[ $(group_pending) == 0 ]] || fail "$(group_pending) entries left pending in the group"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] || fail "messages were dead-lettered: $(psql_q "SELECT error FROM postbox.inbox_dead LIMIT 3")"
((relay_kills >= 3 && consumer_kills >= 3)) || fail "only $relay_kills relay and $consumer_kills consumer kills"
((relay_busy >= 3)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
((consumer_busy >= 3)) || fail "only $consumer_busy of $consumer_kills consumer kills hit a consumer with work in hand"
check_in_order "$CONSUMER_LOG"

# replay: the group destroyed and created again from the start of the stream
redis_cli XGROUP DESTROY "$STREAM" "$GROUP" >/dev/null || fail "XGROUP DESTROY failed"
before=$dups
start_consumer
wait_until '(( $(dup_lines) >= before + in_stream ))' 180 || fail "replay: only $(($(dup_lines) - before)) of $in_stream entries came back as duplicates"
wait_until '[[ $(group_backlog) == 0 ]]' 60 || fail "replay: $(group_backlog) entries left"
stop_consumer
off=$(psql_q "$off_query")
say "replay of the whole stream through a new group: $(($(dup_lines) - before)) duplicates absorbed; accounts off: $off; inbox rows $(inbox_count)"
((off == 0)) || fail "the replay changed $off balance(s)"
[[ $(inbox_count) == "$total" ]] || fail "the replay changed the inbox"
