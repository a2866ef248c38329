#!/usr/bin/env bash
# RabbitMQ stopped for 10 s while the relay publishes 20,000 events and started again: the relay
# recovers by itself, everything arrives (durable queue, persistent messages), and the failed
# attempts are visible in attempts/last_error.
source "$(dirname "$0")/lib.sh"

N_AGG=100 PER_AGG=200
# whatever happens, leave RabbitMQ running for the tests after this one
on_exit 'services start amqp >/dev/null 2>&1 || echo "[broker_outage] could not restart RabbitMQ" >&2'

pb_init
setup_queue '#'
for ((k = 1; k <= PER_AGG; k += 50)); do enqueue_seq $N_AGG $k $((k + 49)); done
total=$((N_AGG * PER_AGG))

start_relay --set relay.batch_size=200
wait_until '(( $(published_count) > 0 ))' 60 || fail "the relay published nothing within 60 s"
say "stopping RabbitMQ; published so far: $(published_count)"
services stop amqp || fail "scripts/services stop amqp failed"
at_stop=$(published_count)
say "RabbitMQ stopped; published $at_stop, pending $(pending_count)"
((at_stop < total)) || fail "everything was published before RabbitMQ went down; nothing tested"
sleep 10
pid_alive "$RELAY_PID" || fail "the relay exited while RabbitMQ was down"
during=$(published_count)
say "after 10 s without RabbitMQ: published $during"
services start amqp || fail "scripts/services start amqp failed"
say "RabbitMQ started again"
t0=$(date +%s)
wait_until '(( $(pending_count) == 0 ))' 300 || fail "still $(pending_count) pending 300 s after RabbitMQ came back"
say "drained $(($(date +%s) - t0)) s after RabbitMQ came back"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"

retried=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE attempts > 0 AND last_error IS NOT NULL")
maxatt=$(psql_q "SELECT coalesce(max(attempts), 0) FROM postbox.outbox_all")
say "rows with attempts > 0 and last_error: $retried (max attempts $maxatt); dead letters: $(dead_count)"
psql_q "SELECT attempts, left(last_error, 160) FROM postbox.outbox_all WHERE last_error IS NOT NULL ORDER BY id LIMIT 3" | sed 's/^/  retried: /'
grep -Ei 'wait|reconnect|cannot reach|lost|retry' "$PB_RELAY_LOG" | head -5 | sed 's/^/  log: /' || true

drain_queue "$PB_TMP/got" $total 3000 300
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
((retried > 0)) || fail "no row shows a failed attempt (attempts > 0 and last_error) after the outage"
[[ $(dead_count) == 0 ]] || fail "events were dead-lettered because of a 10 s outage"
