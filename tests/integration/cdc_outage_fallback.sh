#!/usr/bin/env bash
# cdc.on_excess_lag = poll during a broker outage: the relay reaches RabbitMQ through a forwarder
# of the test's own (tcp_proxy.py), and killing the forwarder is the outage. Producers write
# throughout (one transaction of an event per aggregate every ~20 ms, over 20 aggregates, seq 1,
# 2, ... each). With cdc.max_slot_lag_age = 3 s (the byte limit off), the relay must fall back
# while the broker is still down (the failed batch retried in place is given up, or, lost between
# batches, the wait for the broker watches the slot), drop its slot there and then, and once the
# broker is back publish by polling and return to cdc on a new slot. Then an outage found while
# the relay is idle (its stream closed while it waits for the broker), events committed during it:
# the relay judges the age by the oldest outbox row not relayed, and falls back too. Judged by the queue:
# per aggregate in order (check_order), every committed event arrived (check_all_arrived), the
# copies the fallback and the return publish again under the same event id counted.
# On a PostgreSQL of the test's own: the WAL of other tests would count in the slot's lag.
source "$(dirname "$0")/lib.sh"

N_AGG=20
OUTAGE_AFTER_FALLBACK_S=3
PROXY_PORT=$(free_port)
AMQP_PORT=$(sed -E 's|^amqp://[^@]*@[^:/]*:([0-9]+).*|\1|' <<<"$POSTBOX_AMQP_URL")
[[ $AMQP_PORT =~ ^[0-9]+$ ]] || fail "no port in POSTBOX_AMQP_URL ($POSTBOX_AMQP_URL)"
RELAY_URL=$(sed -E "s|^(amqp://[^@]*@[^:/]*:)[0-9]+|\1$PROXY_PORT|" <<<"$POSTBOX_AMQP_URL")
PROXY_PID=
start_proxy() {
    /usr/bin/python3 "$POSTBOX_SOURCE_DIR/tests/integration/tcp_proxy.py" "$PROXY_PORT" 127.0.0.1 "$AMQP_PORT" \
        >>"$PB_TMP/proxy.log" 2>&1 &
    PROXY_PID=$!
    PB_PIDS+=("$PROXY_PID")
    wait_until "grep -c forwarding '$PB_TMP/proxy.log' | grep -qx '$1'" 10 || fail "the forwarder did not start: $(cat "$PB_TMP/proxy.log")"
}

use_private_pg
pb_init
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
setup_queue '#'
start_proxy 1
start_cdc_relay --set amqp.url="$RELAY_URL" --set cdc.on_excess_lag=poll --set cdc.max_slot_lag=0 \
    --set cdc.max_slot_lag_age=3s --set cdc.lag_interval=500ms --set relay.batch_size=50 \
    --set relay.backoff_base=200ms --set relay.backoff_cap=1s --set relay.reconnect_cap=1s \
    --set relay.max_attempts=100000

# the producers: transaction k enqueues seq k of every aggregate, until $PB_TMP/stop exists
start_seq_producers $N_AGG
wait_until '(($(queue_count) >= 200))' 30 || fail "events do not flow in cdc (queue $(queue_count))"
say "cdc: $(queue_count) events in the queue"

# ---- the outage ---------------------------------------------------------------------------------
kill -KILL "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null || true
t_down=$(date +%s%N)
say "broker unreachable (forwarder killed); published $(published_count), pending $(pending_count)"
wait_until 'grep -q "capture poll active" "$PB_RELAY_LOG"' 60 || fail "the relay did not fall back during the outage"
fell_ms=$((($(date +%s%N) - t_down) / 1000000))
line=$(grep -m1 'capture poll active' "$PB_RELAY_LOG")
say "fell back ${fell_ms} ms into the outage: $(cut -c1-300 <<<"$line")"
grep -q 'cdc.max_slot_lag_age' <<<"$line" || fail "the fallback does not name cdc.max_slot_lag_age: $line"
[[ -z $(slot_confirmed_lsn) ]] || fail "the slot still exists in the fallback, the broker still down"
if grep -q 'while a failed batch' "$PB_RELAY_LOG"; then how="the batch retried in place given up"; else how="the broker lost between batches"; fi
say "slot dropped while the broker is down ($how); pending $(pending_count)"
pid_alive "$RELAY_PID" || fail "the relay exited during the outage"
sleep "$OUTAGE_AFTER_FALLBACK_S"

# ---- the broker back: poll, then cdc on a new slot ------------------------------------------------
start_proxy 2
say "broker reachable again after $((($(date +%s%N) - t_down) / 1000000)) ms"
wait_until 'grep -q "capture cdc active again" "$PB_RELAY_LOG"' 90 || fail "the relay never returned to cdc"
say "returned: $(grep -m1 'capture cdc active again' "$PB_RELAY_LOG" | cut -c1-200)"
[[ -n $(slot_confirmed_lsn) ]] || fail "no slot after the return"
q0=$(queue_count)
wait_until "((\$(queue_count) > q0 + 200))" 30 || fail "events do not flow after the return"
touch "$PB_TMP/stop"
wait "$PRODUCER_PID" || fail "a producer transaction failed"
wait_until '(($(pending_count) == 0))' 60 || fail "$(pending_count) event(s) still pending"
cdc_wait_caught_up 30

# ---- an outage found between batches: the relay waits for the broker with its stream closed ------
# and judges the age by the oldest outbox row not relayed
idle_lost() { grep -c "connection lost while idle" "$PB_RELAY_LOG" || true; }
lost0=$(idle_lost)
kill -KILL "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null || true
t_down=$(date +%s%N)
wait_until '(($(idle_lost) > lost0))' 60 || fail "the idle relay never noticed the outage"
k=$(psql_q "SELECT max((payload->>'seq')::int) FROM postbox.outbox_all")
enqueue_seq $N_AGG $((k + 1)) $((k + 5)) >/dev/null
wait_until '(($(grep -c "capture poll active" "$PB_RELAY_LOG") >= 2))' 60 ||
    fail "the relay waiting for the broker did not fall back"
fell2_ms=$((($(date +%s%N) - t_down) / 1000000))
line=$(grep 'capture poll active' "$PB_RELAY_LOG" | tail -1)
say "idle outage: fell back ${fell2_ms} ms into it: $(cut -c1-260 <<<"$line")"
grep -q 'while the broker was unreachable' <<<"$line" || fail "the second fallback does not say it waited for the broker: $line"
[[ -z $(slot_confirmed_lsn) ]] || fail "the slot still exists in the fallback, the broker still down"
start_proxy 3
wait_until '(($(grep -c "capture cdc active again" "$PB_RELAY_LOG") >= 2))' 90 || fail "the relay never returned to cdc after the second outage"
total=$(psql_q "SELECT count(*) FROM postbox.outbox_all")
wait_until '(($(pending_count) == 0))' 60 || fail "$(pending_count) event(s) still pending"
cdc_wait_caught_up 30
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
check_cdc_marked

# ---- exactly once in effect, in order --------------------------------------------------------------
drain_queue "$PB_TMP/got" "$total" 3000 120
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
dups=$(duplicates_in "$PB_TMP/got")
say "ok: fell back ${fell_ms} ms into a broker outage (${fell2_ms} ms into one found between batches), the slot dropped while the broker was down; committed $total, all arrived in order; $dups copies published again under the same event id (an inbox absorbs them)"
