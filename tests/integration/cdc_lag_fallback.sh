#!/usr/bin/env bash
# cdc.on_excess_lag = poll: the cdc relay falls back to the poll capture over cdc.max_slot_lag and
# returns to cdc through a new slot, while producers write throughout (one transaction of an event
# per aggregate every ~20 ms, over 20 aggregates, seq 1, 2, ... each) and postbox consume applies
# every event through its inbox.
#
# 1. An event of an aggregate nobody binds ('stuck') blocks the stream (retried in place) while
#    another table writes ~4 MB of WAL: the slot's lag passes cdc.max_slot_lag (1 MB); the relay
#    gives the batch retried in place up, records the fallback, drops its slot and publishes by
#    polling (the poll capture retries 'stuck' while the other aggregates flow, until it is bound).
# 2. SIGKILL in the fallback: the restarted relay resumes it (the slot stays dropped).
# 3. An event of another aggregate nobody binds ('stuck2') is retried by the poll capture, so the return
#    (a new slot with an exported snapshot, whose pending rows must be published first) cannot
#    finish: SIGKILL during the return; the restarted relay drops that slot and tries again.
# 4. 'stuck2' is bound: the return finishes, the relay streams the new slot, the producers go on.
# Judged by the exactly-once checks: every committed event took effect exactly once (the inbox;
# the copies the return publishes twice are absorbed), no account... no aggregate out of order
# (the consumer's sequence check), nothing pending, nothing left in the queue.
# On a PostgreSQL of the test's own: the WAL of other tests would count in the lag.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/exactly_once_lib.sh" # check_in_order
command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"

N_AGG=20
LIMIT=1MB
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=applier POSTBOX_AMQP_BINDINGS='order.#'
export POSTBOX_CONSUME_HANDLER="INSERT INTO applied (agg, seq, n)
    VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int, 1)
    ON CONFLICT (agg, seq) DO UPDATE SET n = applied.n + 1"
export POSTBOX_RELAY_BACKOFF_BASE=200ms POSTBOX_RELAY_BACKOFF_CAP=500ms POSTBOX_RELAY_MAX_ATTEMPTS=100000
PORT=$(free_port)
RELAY_ARGS=(--capture cdc --set cdc.on_excess_lag=poll --set cdc.max_slot_lag=$LIMIT
    --set cdc.lag_interval=3s --set relay.batch_size=50 --set metrics.listen=127.0.0.1:$PORT)
fallback_metric() { curl -sf "http://127.0.0.1:$PORT/metrics" | sed -n "s/^postbox_cdc_fallback_active{slot=\"$POSTBOX_CDC_SLOT\"} //p"; }
: >"$CONSUMER_LOG"

use_private_pg
pb_init
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
setup_queue none
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL);
        CREATE TABLE applied (agg text, seq int, n int NOT NULL, PRIMARY KEY (agg, seq))" >/dev/null
start_consumer # declares the queue, bound to order.#
wait_until 'grep -q "consuming queue" "$CONSUMER_LOG"' 30 ||
    fail "the consumer did not declare its queue"
start_cdc_relay "${RELAY_ARGS[@]:2}"

# the producers: transaction k enqueues seq k of every aggregate, until $PB_TMP/stop exists
start_seq_producers $N_AGG
wait_until '(($(inbox_count) >= 200))' 30 || fail "events do not flow in cdc (inbox $(inbox_count))"
say "cdc: $(inbox_count) events applied"

# ---- 1. over the limit: the fallback ------------------------------------------------------------
# an event nobody binds blocks the stream (the cdc relay retries it in place) while another table
# fills the WAL; over the limit the relay gives that batch up and falls back
psql_q "SELECT postbox.enqueue('stuck', 's-1', 'created.v1', jsonb_build_object('agg', 's-1', 'seq', 1))" >/dev/null
wait_until 'grep -q "unroutable" "$PB_RELAY_LOG"' 30 || fail "the unbound event was never refused by the broker"
psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 60000) g" >/dev/null
wait_until 'grep -q "is over cdc.max_slot_lag" "$PB_RELAY_LOG"' 30 || fail "the relay never warned about the slot lag"
lag=$(grep -m1 -o 'lag [0-9]* bytes is over cdc.max_slot_lag' "$PB_RELAY_LOG" | grep -o '[0-9]*' | head -1)
say "stream blocked; slot lag $lag bytes as the relay measured it (limit $LIMIT)"
wait_until 'grep -q "capture poll active" "$PB_RELAY_LOG"' 30 || fail "the relay never fell back to poll"
say "fallback: $(grep -m1 'capture poll active' "$PB_RELAY_LOG" | cut -c1-260)"
grep -m1 'capture poll active' "$PB_RELAY_LOG" | grep -q 'while a failed batch was retried in place' ||
    fail "the relay did not fall back while the unbound event was retried in place"
[[ -n $lag ]] || fail "no lag in the relay's warning"
# bound: the poll capture publishes it
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" 'order.#' 'stuck.#' ||
    fail "amqp-tool setup failed"
grep -q 'is over cdc.max_slot_lag' "$PB_RELAY_LOG" || fail "the relay did not warn about the lag"
[[ -z $(slot_confirmed_lsn) ]] || fail "the slot still exists after the fallback"
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_fallback WHERE slot_name = '$POSTBOX_CDC_SLOT'") == 1 ]] ||
    fail "no row in postbox.cdc_fallback"
[[ $(fallback_metric) == 1 ]] || fail "postbox_cdc_fallback_active is '$(fallback_metric)' in the fallback, expected 1"
# a few events suffice (the relay tries to return cdc.lag_interval after the fallback, and the
# kill below must come first even on a busy machine)
i0=$(inbox_count)
wait_until "((\$(inbox_count) > i0 + 20))" 30 || fail "events do not flow in the fallback (inbox $(inbox_count))"

# ---- 2. SIGKILL in the fallback ----------------------------------------------------------------
grep -q 'return to cdc' "$PB_RELAY_LOG" && fail "the relay tried to return before the kill; the test kills too late"
kill_relay
say "SIGKILL in the fallback; published $(published_count), pending $(pending_count)"
start_relay "${RELAY_ARGS[@]}"
wait_until 'grep -q "the relay was in its poll fallback" "$PB_RELAY_LOG"' 30 || fail "the restarted relay did not resume the fallback"
# ---- 3. SIGKILL during the return ----------------------------------------------------------------
# committed before the relay tries to return (cdc.lag_interval after it resumed the fallback), so
# pending in the new slot's snapshot
psql_q "SELECT postbox.enqueue('stuck2', 's-2', 'created.v1', jsonb_build_object('agg', 's-2', 'seq', 1))" >/dev/null
grep -q 'return to cdc' "$PB_RELAY_LOG" && fail "the relay tried to return before 'stuck2' was committed"
i0=$(inbox_count)
wait_until "((\$(inbox_count) > i0 + 100))" 30 || fail "events do not flow after the restart in the fallback"
returns() { grep -c 'return to cdc: created replication slot' "$PB_RELAY_LOG" || true; }
wait_until '(($(returns) >= 1))' 30 || fail "the relay never tried to return to cdc"
sleep 1 # the return waits for 'stuck2', which is retried
grep -q 'capture cdc active again' "$PB_RELAY_LOG" && fail "the return finished although 'stuck2' is unpublished"
[[ -n $(slot_confirmed_lsn) ]] || fail "no new slot during the return"
kill_relay
say "SIGKILL during the return: $(grep 'return to cdc: created' "$PB_RELAY_LOG" | tail -1 | cut -c1-200)"
start_relay "${RELAY_ARGS[@]}"
wait_until '(($(grep -c "the relay was in its poll fallback" "$PB_RELAY_LOG") >= 2))' 30 ||
    fail "the relay restarted during the return did not resume the fallback"
wait_until '(($(returns) >= 2))' 30 || fail "the restarted relay never tried to return again"

# ---- 4. the return finishes ----------------------------------------------------------------------
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" 'order.#' 'stuck.#' 'stuck2.#' ||
    fail "amqp-tool setup failed"
wait_until 'grep -q "capture cdc active again" "$PB_RELAY_LOG"' 60 || fail "the relay never returned to cdc"
wait_until '(($(grep -c "streaming slot" "$PB_RELAY_LOG") >= 2))' 30 || fail "the relay does not stream the new slot"
say "returned: $(grep -m1 'capture cdc active again' "$PB_RELAY_LOG" | cut -c1-200)"
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_fallback") == 0 ]] || fail "postbox.cdc_fallback still holds the slot"
[[ $(fallback_metric) == 0 ]] || fail "postbox_cdc_fallback_active is '$(fallback_metric)' after the return, expected 0"
i0=$(inbox_count)
wait_until "((\$(inbox_count) > i0 + 200))" 30 || fail "events do not flow after the return"
touch "$PB_TMP/stop"
wait "$PRODUCER_PID" || fail "a producer transaction failed"
total=$(psql_q "SELECT count(*) FROM postbox.outbox_all")
wait_until '(($(pending_count) == 0))' 60 || fail "$(pending_count) event(s) still pending"
wait_until '(($(inbox_count) >= total))' 60 || fail "only $(inbox_count) of $total events applied"
wait_until '[[ $(queue_count) == 0 ]]' 30 || fail "the queue still holds $(queue_count) message(s)"
cdc_wait_caught_up 30
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
sleep 1
stop_consumer

# ---- exactly once, in order ----------------------------------------------------------------------
missing=$(psql_q "SELECT count(*) FROM postbox.outbox_all o WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.inbox i WHERE i.message_id = o.event_id::text)")
twice=$(psql_q "SELECT count(*) FROM applied WHERE n <> 1")
applied=$(psql_q "SELECT count(*) FROM applied")
unknown=$(psql_q "SELECT count(*) FROM postbox.inbox i WHERE NOT EXISTS
                    (SELECT 1 FROM postbox.outbox_all o WHERE o.event_id::text = i.message_id)")
dups=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
say "committed events $total, applied $applied, applied more than once $twice, never applied $missing, unknown $unknown; duplicates absorbed by the inbox: $dups"
((missing == 0)) || fail "$missing committed event(s) never took effect"
((twice == 0)) || fail "$twice event(s) took effect more than once"
((applied == total && unknown == 0)) || fail "applied $applied of $total ($unknown unknown)"
check_in_order "$CONSUMER_LOG"
check_cdc_marked
say "ok: fell back at a lag of $lag bytes, survived SIGKILL in the fallback and in the return, streamed again; every event once, in order"
