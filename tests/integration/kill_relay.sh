#!/usr/bin/env bash
# The relay killed with SIGKILL at 5 random points of its progress while relaying 20,000 events, restarted each
# time: every event arrives at least once, first occurrences keep per-aggregate order, nothing is
# left pending; the number of duplicates is reported. Transactions that enqueue and roll back are
# mixed into the fill: none of their events may arrive.
# With PB_KILL_BROKER=redis (redis_kill_relay.sh) the events go to Redis Streams, read back with
# redis-cli; with PB_KILL_BROKER=kafka (kafka_kill_relay.sh, kafka_cdc_kill.sh) to Kafka, read
# back by kafka-tool, a plain librdkafka consumer. With PB_KILL_CAPTURE=cdc the relay captures
# the events through logical replication.
source "$(dirname "$0")/lib.sh"
BROKER=${PB_KILL_BROKER:-amqp} CAPTURE=${PB_KILL_CAPTURE:-poll}
[[ $BROKER != redis ]] || source "$(dirname "$0")/redis_lib.sh"
[[ $BROKER != kafka ]] || source "$(dirname "$0")/kafka_lib.sh"

N_AGG=100 PER_AGG=${PB_KILL_PER_AGG:-200} KILLS=5
# Smaller batches than the default make more commits, so more kill points fall between a
# broker confirm and the commit, and keep the relay busy across all five kills.
BATCH=${PB_KILL_BATCH:-100}
DRAIN_BATCH=$BATCH
# Redis answers an XADD pipeline in well under a millisecond: smaller batches still, or the
# relay is done before the third kill
[[ $BROKER != redis ]] || BATCH=${PB_KILL_BATCH:-20} DRAIN_BATCH=$BATCH
# and more events: at batch 20 the Redis relay still moved 2,500-3,100 events between two polls
# of the published count (about 50 ms apart under the sanitizer build), more than a kill's share
# of 20,000, so the fifth kill found nothing left; with 100,000 every share stays above 10,000
[[ $BROKER != redis ]] || PER_AGG=${PB_KILL_PER_AGG:-1000}
# the Kafka sink (the mock keeps nothing on disk) likewise; its drain may go faster
[[ $BROKER != kafka ]] || BATCH=${PB_KILL_BATCH:-20} DRAIN_BATCH=200
KILL_ARGS=(--set relay.batch_size=$BATCH)
# The cdc relay reads its backlog from the stream, with no claim per batch: against the Kafka
# mock it outran the polls of the published count on a loaded machine (from below kill 4's
# target to 19,600 of 20,000 between two polls, so kill 5 found nothing left). Each batch waits
# for its delivery reports, so lingering 20 ms per produce request caps the relay at about
# BATCH events per 20 ms (1,000/s) whatever the machine's speed: a poll that comes late sees at
# most that much more. The drain runs at full speed.
[[ $BROKER != kafka || $CAPTURE != cdc ]] || KILL_ARGS+=(--set kafka.linger.ms=${PB_KILL_LINGER_MS:-20})
pb_init
# the relay runs as a member of postbox_relay (with cdc: REPLICATION and the publication)
if [[ $CAPTURE == cdc ]]; then use_least_privilege --set relay.capture=cdc; else use_least_privilege; fi
[[ $BROKER != amqp ]] || setup_queue '#'
CAPTURE_ARGS=()
if [[ $CAPTURE == cdc ]]; then
    cdc_use_slot
    cdc_create_slot # before the events are written, or they are not in its stream
    CAPTURE_ARGS=(--capture cdc)
fi
rolled_back() { # events enqueued in a transaction that rolls back (payload marker "rolled_back")
    psql_q "BEGIN; SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1', '{\"rolled_back\": true}'))
              FROM generate_series(1, $N_AGG) a; ROLLBACK;" >/dev/null
}
if [[ $CAPTURE == cdc ]]; then
    # one transaction per seq (100 events): a restarted cdc relay decodes an unconfirmed
    # transaction from its start, and one of 5,000 events would cost it most of its run
    psql_q "DO \$\$ BEGIN
              FOR k IN 1..$PER_AGG LOOP
                FOR a IN 1..$N_AGG LOOP
                  PERFORM postbox.enqueue('order', 'agg-' || a, 'created.v1', jsonb_build_object('seq', k));
                END LOOP;
                COMMIT;
              END LOOP;
            END \$\$"
    rolled_back
else
    for ((k = 1; k <= PER_AGG; k += 50)); do
        enqueue_seq $N_AGG $k $((k + 49))
        rolled_back
    done
fi
total=$((N_AGG * PER_AGG))
[[ $(psql_q 'SELECT count(*) FROM postbox.outbox_all') == "$total" ]] || fail "enqueue failed"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
busy_kills=0
for ((i = 1; i <= KILLS; i++)); do
    p0=$(published_count)
    pending=$(pending_count)
    # Each kill falls once the relay has published a random 30-90 % of its share of what is
    # left (the pending events over the kills to come and the final drain), so every kill hits
    # a relay in the middle of its work however fast the machine and the broker are.
    share=$((pending / (KILLS - i + 2)))
    target=$((p0 + (share * (30 + RANDOM % 61) / 100 > 0 ? share * (30 + RANDOM % 61) / 100 : 1)))
    t0=$(now_ms)
    start_relay "${KILL_ARGS[@]}" "${CAPTURE_ARGS[@]}"
    # step: the largest move of the count between two polls, how finely this kill could aim
    p=$p0 step=0
    while ((p < target)) && pid_alive "$RELAY_PID" && (($(now_ms) - t0 < 60000)); do
        sleep 0.02
        p1=$(published_count)
        step=$((p1 - p > step ? p1 - p : step)) p=$p1
    done
    ms=$(($(now_ms) - t0))
    p1=$(published_count)
    pid_alive "$RELAY_PID" || fail "the relay exited by itself before kill $i"
    kill_relay
    p2=$(published_count)
    pending=$(pending_count)
    busy=no
    if ((p1 > p0 && pending > 0)); then busy=yes; busy_kills=$((busy_kills + 1)); fi
    say "kill $i after ${ms} ms: published $p0 -> $p1 (at kill, target $target, largest step between polls $step) -> $p2 (after), pending $pending, while publishing: $busy"
done
# Every kill must hit a relay that was publishing with work left; one may miss when its target
# was reached in the relay's first commit.
say "$busy_kills of $KILLS kills hit the relay while it was publishing"
((busy_kills >= KILLS - 1)) || fail "only $busy_kills of $KILLS kills hit a publishing relay; the test did not test much"

relay_drain 300 --set relay.batch_size=$DRAIN_BATCH "${CAPTURE_ARGS[@]}"
pending=$(pending_count)
((pending == 0)) || fail "$pending event(s) left pending"
((total == $(published_count))) || fail "published rows: $(published_count), expected $total (dead letters: $(dead_count))"

if [[ $BROKER == redis ]]; then
    drain_redis "$PB_TMP/got" $total
elif [[ $BROKER == kafka ]]; then
    drain_topic "$PB_TMP/got" "$(kafka_topic order)" $total 3000 300
else
    drain_queue "$PB_TMP/got" $total 3000 300
fi
! grep -q rolled_back "$PB_TMP/got" || fail "events of a rolled-back transaction arrived"
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
say "duplicates after $KILLS SIGKILLs: $(duplicates_in "$PB_TMP/got")"
