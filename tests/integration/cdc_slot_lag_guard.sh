#!/usr/bin/env bash
# cdc.max_slot_lag: while the cdc relay cannot confirm (an unroutable event retried in place
# blocks the stream) and another table fills the WAL, the slot's lag passes the limit: the relay
# warns, postbox_replication_slot_lag_over_limit is 1 and `postbox status` reports the slot over
# the limit and fails its check. Once the event is routable, the relay catches up: the lag is
# back under the limit, said in the log, the metric is 0 and status passes. With
# cdc.on_excess_lag = stop, the same block makes the relay exit 1 saying why; the slot stays. On
# a PostgreSQL of the test's own: the WAL other tests write on the shared server would count in
# the lag.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"

LIMIT=1MB
LIMIT_BYTES=$((1024 * 1024))
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
over_metric() { curl -sf "$URL/metrics" | sed -n "s/^postbox_replication_slot_lag_over_limit{slot=\"$POSTBOX_CDC_SLOT\"} //p"; }
status_json() { "$POSTBOX_BIN" --set cdc.max_slot_lag=$LIMIT status --json; }

use_private_pg
pb_init
setup_queue none # nothing bound: the event comes back unroutable and is retried in place
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL)" >/dev/null
start_cdc_relay --set cdc.max_slot_lag=$LIMIT --set cdc.lag_interval=200ms \
    --set metrics.listen=127.0.0.1:$PORT --set relay.backoff_base=200ms \
    --set relay.backoff_cap=500ms --set relay.max_attempts=100000
wait_until "curl -sf $URL/healthz >/dev/null" 30 || fail "/healthz never answered on port $PORT"
enqueue_seq 1 1 1
wait_until 'grep -q "unroutable\|returned" "$PB_RELAY_LOG"' 30 || fail "the event was never refused by the broker"
# ~4 MB of WAL the blocked slot cannot confirm past
psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 60000) g" >/dev/null
wait_until 'grep -q "is over cdc.max_slot_lag" "$PB_RELAY_LOG"' 30 || fail "the relay never warned about the slot lag"
say "warned: $(grep -m1 'is over cdc.max_slot_lag' "$PB_RELAY_LOG" | cut -c1-220)"
wait_until '[[ $(over_metric) == 1 ]]' 10 || fail "postbox_replication_slot_lag_over_limit is '$(over_metric)', expected 1"
rc=0
out=$(status_json) || rc=$?
((rc == 1)) || fail "postbox status exited $rc with the slot over cdc.max_slot_lag, expected 1: $out"
lag=$(jq -r --arg s "$POSTBOX_CDC_SLOT" '.replication_slots[] | select(.slot == $s) | .lag_bytes' <<<"$out")
[[ $(jq -r --arg s "$POSTBOX_CDC_SLOT" '.replication_slots[] | select(.slot == $s) | .over_max_lag' <<<"$out") == true ]] ||
    fail "postbox status does not mark the slot over_max_lag: $out"
jq -e '.checks_failed | map(select(contains("cdc.max_slot_lag"))) | length == 1' <<<"$out" >/dev/null ||
    fail "postbox status has no failed check naming cdc.max_slot_lag: $out"
((lag > LIMIT_BYTES)) || fail "status shows a lag of $lag bytes, not over $LIMIT_BYTES"
say "status: slot lag $lag bytes over the limit of $LIMIT_BYTES, exit 1, checks_failed $(jq -c .checks_failed <<<"$out")"
table=$("$POSTBOX_BIN" --set cdc.max_slot_lag=$LIMIT status) || true
grep -q "$POSTBOX_CDC_SLOT .* over cdc.max_slot_lag" <<<"$table" ||
    fail "the status table does not show the slot over cdc.max_slot_lag: $table"

# routable again: the event goes, the stream moves, the lag falls back under the limit
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
wait_until '(($(queue_count) >= 1))' 30 || fail "the event never arrived once routable"
cdc_wait_caught_up 30
wait_until 'grep -q "is back under cdc.max_slot_lag" "$PB_RELAY_LOG"' 30 || fail "the relay never said the lag is back under the limit"
wait_until '[[ $(over_metric) == 0 ]]' 10 || fail "postbox_replication_slot_lag_over_limit is '$(over_metric)', expected 0"
out=$(status_json) || fail "postbox status fails with the slot back under the limit: $out"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
say "ok: over the limit the relay warned, the metric was 1 and status failed; back under, all cleared"

# cdc.on_excess_lag = stop: over the limit the relay exits 1 saying so; the slot stays
setup_queue none
start_cdc_relay --set cdc.max_slot_lag=$LIMIT --set cdc.lag_interval=200ms --set cdc.on_excess_lag=stop \
    --set relay.backoff_base=200ms --set relay.backoff_cap=500ms --set relay.max_attempts=100000
enqueue_seq 1 2 2
wait_until '(($(grep -c "unroutable\|returned" "$PB_RELAY_LOG") >= 2))' 30 || fail "the second event was never refused by the broker"
psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 60000) g" >/dev/null
wait_relay 30
((RELAY_RC == 1)) || fail "the relay exited with $RELAY_RC over the limit with cdc.on_excess_lag = stop, expected 1"
grep -q 'is over cdc.max_slot_lag .* and cdc.on_excess_lag = stop: the relay stops' "$PB_RELAY_LOG" ||
    fail "the relay did not say why it stopped"
[[ -n $(slot_confirmed_lsn) ]] || fail "the slot is gone after the stop"
say "stop: $(grep -m1 'cdc.on_excess_lag = stop' "$PB_RELAY_LOG" | cut -c1-200)"
