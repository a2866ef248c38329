#!/usr/bin/env bash
# cdc capture, crashes and the slot's confirmed position.
#
# 1. The cdc relay killed with SIGKILL at 5 random points of its progress while relaying 20,000
#    events (200 transactions of 100), restarted each time: every event arrives at least once, first
#    occurrences keep per-aggregate order; duplicates are reported. After each kill, every
#    transaction that the slot's confirmed_flush_lsn covers must be marked published (the relay
#    marks rows only after the broker confirmed them): the slot never runs ahead of the broker.
# 2. RabbitMQ frozen (SIGSTOP on its Erlang VM) while the relay streams: events committed after
#    WAL position L reach the relay (the walsender's sent_lsn passes them) but the slot's
#    confirmed_flush_lsn stays <= L and the relay reports none of them published; after SIGCONT
#    they arrive and confirmed_flush_lsn passes them.
# With PB_CDC_BROKER=nats (cdc_kill_nats.sh) part 1 runs, with 80,000 events, against a JetStream
# stream instead: the NATS sink publishes asynchronously, and the relay decodes the next batch
# meanwhile. With PB_CDC_BROKER=redis (cdc_kill_redis.sh) part 1 runs against Redis Streams.
source "$(dirname "$0")/lib.sh"
BROKER=${PB_CDC_BROKER:-amqp}
[[ $BROKER != nats ]] || source "$(dirname "$0")/nats_lib.sh"
[[ $BROKER != redis ]] || source "$(dirname "$0")/redis_lib.sh"

N_AGG=100 TXNS=200 KILLS=5
BATCH=${PB_KILL_BATCH:-100}
# JetStream acknowledges without a disk sync: that relay needs a longer stream to stay busy for
# all the kills
if [[ $BROKER != amqp ]]; then TXNS=800 BATCH=${PB_KILL_BATCH:-50}; fi
# A Redis relay of the release build, its start done (the slot's backlog decoded), published the
# last 23,000 events between two polls of the published count (kill 4 then found nothing left,
# kill 5 nothing at all): batches of 10 pace it at a round trip to Redis and a mark per 10 events
# for the kills; the drain after them runs with batches of 50.
DRAIN_BATCH=$BATCH
[[ $BROKER != redis ]] || BATCH=${PB_KILL_BATCH:-10}
total=$((N_AGG * TXNS))
pb_init
use_least_privilege --set relay.capture=cdc # the relay: postbox_relay, REPLICATION
[[ $BROKER != amqp ]] || setup_queue '#'
cdc_use_slot
# The slot must exist before the events are written, or they are not in its stream.
cdc_create_slot
psql_q "CREATE TABLE txn_lsn (k int PRIMARY KEY, lsn pg_lsn)"
# transaction k: seq k of every aggregate; txn_lsn.k: a WAL position after its commit
for ((k = 1; k <= TXNS; k++)); do
    echo "SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1', jsonb_build_object('seq', $k))) FROM generate_series(1, $N_AGG) a;"
    echo "INSERT INTO txn_lsn VALUES ($k, pg_current_wal_lsn());"
done >"$PB_TMP/fill.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/fill.sql" >/dev/null || fail "enqueue failed"
[[ $(psql_q 'SELECT count(*) FROM postbox.outbox_all') == "$total" ]] || fail "enqueue failed"

# rows of transactions whose commit the slot's confirmed position covers, not marked published
check_confirmed_published() { # WHEN
    local r covered unpub confirmed
    r=$(psql_q "SELECT s.confirmed_flush_lsn, count(DISTINCT t.k), count(o.id) FILTER (WHERE o.published_at IS NULL)
                  FROM pg_replication_slots s
                  LEFT JOIN txn_lsn t ON t.lsn <= s.confirmed_flush_lsn
                  LEFT JOIN postbox.outbox o ON (o.payload ->> 'seq')::int = t.k
                 WHERE s.slot_name = '$POSTBOX_CDC_SLOT'
                 GROUP BY s.confirmed_flush_lsn")
    IFS='|' read -r confirmed covered unpub <<<"$r"
    say "$1: slot confirmed at $confirmed, covering $covered of $TXNS transactions; unpublished events among them: $unpub"
    ((unpub == 0)) || fail "the slot's confirmed position ($confirmed) covers $unpub event(s) that the relay has not marked published (broker-confirmed)"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
busy_kills=0
for ((i = 1; i <= KILLS; i++)); do
    p0=$(published_count)
    pending=$(pending_count)
    # Each kill falls once the relay has published a random 30-90 % of its share of what is
    # left (the pending events over the kills to come and the final drain), so every kill hits
    # a relay in the middle of its work however long its start (the slot's backlog) takes.
    share=$((pending / (KILLS - i + 2)))
    step=$((share * (30 + RANDOM % 61) / 100))
    target=$((p0 + (step > 0 ? step : 1)))
    t0=$(now_ms)
    start_relay --capture cdc --set relay.batch_size=$BATCH
    while (($(published_count) < target)) && pid_alive "$RELAY_PID" && (($(now_ms) - t0 < 60000)); do
        sleep 0.02
    done
    ms=$(($(now_ms) - t0))
    p1=$(published_count)
    pid_alive "$RELAY_PID" || fail "the relay exited by itself before kill $i"
    kill_relay
    p2=$(published_count)
    pending=$(pending_count)
    busy=no
    if ((p1 > p0 && pending > 0)); then busy=yes; busy_kills=$((busy_kills + 1)); fi
    say "kill $i after ${ms} ms: published $p0 -> $p1 (at kill) -> $p2 (after), pending $pending, while publishing: $busy"
    check_confirmed_published "after kill $i"
done
say "$busy_kills of $KILLS kills hit the relay while it was publishing"
((busy_kills >= KILLS - 1)) || fail "only $busy_kills of $KILLS kills hit a publishing relay; the test did not test much"

relay_drain 300 --capture cdc --set relay.batch_size=$DRAIN_BATCH
pending=$(pending_count)
((pending == 0)) || fail "$pending event(s) left pending"
((total == $(published_count))) || fail "published rows: $(published_count), expected $total (dead letters: $(dead_count))"
check_confirmed_published "after the drain"

if [[ $BROKER == nats ]]; then
    drain_stream "$PB_TMP/got" $total 3000 300
elif [[ $BROKER == redis ]]; then
    drain_redis "$PB_TMP/got" $total
else
    drain_queue "$PB_TMP/got" $total 3000 300
fi
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
say "duplicates after $KILLS SIGKILLs: $(duplicates_in "$PB_TMP/got")"
[[ $BROKER == amqp ]] || exit 0 # part 2 freezes RabbitMQ

# ---- 2. the broker frozen ------------------------------------------------------------------
beam=$(services status amqp | awk '$1 == "amqp" && $2 == "running" { print $4 }')
[[ $beam =~ ^[0-9]+$ && $(cat "/proc/$beam/comm" 2>/dev/null) == beam.smp ]] ||
    fail "cannot find RabbitMQ's Erlang VM (services status: $(services status amqp))"
start_cdc_relay --set log.level=debug
sleep 1.5 # caught up and idle; its idle confirms move the slot to the current WAL position
on_exit "kill -CONT $beam 2>/dev/null"
kill -STOP "$beam"
say "RabbitMQ's Erlang VM (pid $beam) stopped"
L=$(psql_q "SELECT pg_current_wal_lsn()")
psql_q "SELECT count(postbox.enqueue('frozen', 'f-' || (i % 10), 'frozen.v1', jsonb_build_object('seq', i))) FROM generate_series(1, 100) i" >/dev/null
psql_q "SELECT count(postbox.emit('frozen', 'e-' || (i % 10), 'frozen.v1', jsonb_build_object('seq', i))) FROM generate_series(1, 50) i" >/dev/null
L2=$(psql_q "SELECT pg_current_wal_lsn()")
sent_lsn() { psql_q "SELECT coalesce(max(r.sent_lsn), '0/0') FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = '$POSTBOX_CDC_SLOT'"; }
wait_until 'lsn_le "$L2" "$(sent_lsn)"' 10 || fail "the walsender did not send the new transactions (sent_lsn $(sent_lsn), commits end at $L2)"
sleep 3
C=$(slot_confirmed_lsn)
unpub=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE aggregate_type = 'frozen' AND published_at IS NULL")
logged=$(grep -c 'published event .*(frozen.v1)' "$PB_RELAY_LOG" || true)
say "broker frozen 3 s: WAL before the commits $L, after $L2, sent to the relay up to $(sent_lsn); slot confirmed at $C; frozen.v1 events: $unpub of 100 rows unpublished, $logged reported published"
lsn_le "$C" "$L" || fail "the slot's confirmed position $C ran ahead of $L although the broker confirmed nothing after it"
((unpub == 100 && logged == 0)) || fail "events were reported published while the broker was frozen"
pid_alive "$RELAY_PID" || fail "the relay exited while the broker was frozen"
kill -CONT "$beam"
say "RabbitMQ resumed"
wait_until '(($(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE aggregate_type = '"'frozen'"' AND published_at IS NULL") == 0))' 60 ||
    fail "the frozen.v1 events were not published within 60 s of SIGCONT"
wait_until 'lsn_le "$L2" "$(slot_confirmed_lsn)"' 30 || fail "the slot's confirmed position $(slot_confirmed_lsn) did not pass $L2 after the broker came back"
say "slot confirmed at $(slot_confirmed_lsn) (>= $L2)"
stop_relay
drain_queue "$PB_TMP/got2" 150 2000 60
n=$(awk -F'\t' '$2 == "frozen.v1"' "$PB_TMP/got2" | cut -f1 | sort -u | wc -l)
((n == 150)) || fail "$n of the 150 frozen.v1 events arrived"
stats=$(check_order "$PB_TMP/got2") || fail "per-aggregate order broken: $stats"
say "after the freeze: $stats"
