#!/usr/bin/env bash
# Issue 29: a RabbitMQ quorum queue (the shared RabbitMQ is a single node: a quorum queue of one
# member, the same queue type and protocol a cluster uses). postbox consume declares its queue
# with amqp.queue_type = quorum and the bounds it supports on quorum queues (x-max-length,
# x-message-ttl, x-dead-letter-exchange); the declaration is checked with rabbitmqctl. A steady
# producer commits 300 transactions, one event of each of 40 aggregates each (12,000 events,
# numbered per aggregate), about 20 a second; they flow relay (poll capture, publisher confirms)
# -> quorum queue -> postbox consume while the relay and the consumer are each SIGKILLed 4 times
# mid-stream and restarted at once. At the end: every event took effect exactly once, every
# aggregate in order, the queue is empty. The queue is deleted at exit.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh"
source "$(dirname "$0")/cluster_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do
    [[ $_v == POSTBOX_CONSUME_HANDLER ]] || unset "$_v"
done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_AMQP_QUEUE_TYPE=quorum POSTBOX_CONSUME_CONSUMER=ordered
export POSTBOX_AMQP_QUEUE_MAX_LENGTH=1000000 POSTBOX_AMQP_QUEUE_MESSAGE_TTL=1h
export POSTBOX_AMQP_QUEUE_DEAD_LETTER_EXCHANGE=pb.$PB_TEST.dlx POSTBOX_AMQP_ALLOW_UNLIMITED=false
export POSTBOX_RELAY_RECONNECT_CAP=1s POSTBOX_CONSUME_RECONNECT_CAP=1s
export POSTBOX_RELAY_BACKOFF_BASE=200ms POSTBOX_RELAY_BACKOFF_CAP=2s
N_AGG=40 N_TX=300 KILLS=4
total=$((N_AGG * N_TX))
: >"$CONSUMER_LOG"

setup_queue none # no queue or exchange of an earlier run
on_exit 'amqp_tool delete "$POSTBOX_AMQP_URL" "$PB_QUEUE" || echo "[$PB_TEST] could not delete queue $PB_QUEUE" >&2'
queue_line() { services rabbitmqctl list_queues -q --no-table-headers name type arguments 2>/dev/null | awk -v q="$PB_QUEUE" '$1 == q'; }

pb_init
create_effects
start_consumer # declares the quorum queue and binds it
wait_until '[[ -n $(queue_line) ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer did not declare queue $PB_QUEUE"; }
q=$(queue_line)
say "declared: $q"
[[ $q == *quorum* ]] || fail "queue $PB_QUEUE is not a quorum queue: $q"
for arg in x-max-length x-message-ttl x-dead-letter-exchange; do
    [[ $q == *"$arg"* ]] || fail "queue $PB_QUEUE was declared without $arg: $q"
done
start_relay --set relay.batch_size=100
t_start=$(now_ms)
start_producer

relay_kills=0 consumer_kills=0 relay_busy=0 consumer_busy=0 relay_p0=0 consumer_e0=0
for ((k = 1; k <= KILLS; k++)); do
    wait_produced $((N_TX * k / (KILLS + 1)))
    pid_alive "$RELAY_PID" || fail "the relay exited by itself before kill $k"
    kill_relay
    p=$(published_count) pend=$(pending_count)
    relay_kills=$((relay_kills + 1))
    if ((p > relay_p0 && pend > 0)); then relay_busy=$((relay_busy + 1)); fi
    say "kill $k: SIGKILL relay; published $relay_p0 -> $p during its run, pending $pend"
    relay_p0=$p
    start_relay --set relay.batch_size=100
    sleep_ms $((100 + RANDOM % 300))
    pid_alive "$CONSUMER_PID" || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer exited by itself before kill $k"; }
    kill_consumer
    e=$(effects)
    consumer_kills=$((consumer_kills + 1))
    if ((e > consumer_e0 && e < total)); then consumer_busy=$((consumer_busy + 1)); fi
    say "kill $k: SIGKILL consumer; effects $consumer_e0 -> $e during its run"
    consumer_e0=$e
    start_consumer
done
finish_stream '[[ $(queue_count) == 0 ]]' 'echo "$(queue_count) message(s) in the queue"'
say "$total events published in $publish_ms ms; $relay_kills relay kills ($relay_busy while publishing), $consumer_kills consumer kills ($consumer_busy while consuming)"
say "effects $n ($distinct distinct) of $total; out of order $out_of_order; committed events without an inbox row: $missing; duplicates absorbed by the inbox: $dups"
check_effects
((relay_busy >= 2)) || fail "only $relay_busy of $relay_kills relay kills hit a relay with work in hand"
((consumer_busy >= 2)) || fail "only $consumer_busy of $consumer_kills consumer kills hit a consumer with work in hand"
