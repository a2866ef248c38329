#!/usr/bin/env bash
# cdc.max_slot_lag_age: how long the slot has held WAL with outbox changes the relay has not
# confirmed (from the commit of the oldest such transaction it has read).
# 1. Idle outbox, busy database: another table takes rows for longer than the limit; the slot
#    holds no outbox change, so its age stays 0 and nothing is over the limit.
# 2. An unroutable event retried in place blocks the stream: past the limit (2 s) the relay warns
#    naming cdc.max_slot_lag_age, postbox_replication_slot_lag_over_limit is 1 and
#    postbox_replication_slot_lag_age_seconds over 2; with the relay stopped, `postbox status`
#    (the oldest outbox row not relayed) marks the slot over_max_lag_age and fails its check, and
#    `postbox check` fails cdc.slot naming the limit. The relay started again and the event routable:
#    the event goes, the age is back under the limit, the metric 0, status passes.
# 3. cdc.on_excess_lag = stop with the age limit only: the same block makes the relay exit 1.
# On a PostgreSQL of the test's own: the WAL other tests write on the shared server would count.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"

LIMIT=2s
LIMIT_MS=2000
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
metric() { curl -sf "$URL/metrics" | sed -n "s/^$1{slot=\"$POSTBOX_CDC_SLOT\"} //p"; }
# cdc.max_slot_lag=0: the byte limit off, so only the age can be over
AGE=(--set cdc.max_slot_lag=0 --set cdc.max_slot_lag_age=$LIMIT)
status_json() { "$POSTBOX_BIN" "${AGE[@]}" status --json; }
RELAY_ARGS=("${AGE[@]}" --set cdc.lag_interval=200ms --set metrics.listen=127.0.0.1:$PORT
    --set relay.backoff_base=200ms --set relay.backoff_cap=500ms --set relay.max_attempts=100000)

use_private_pg
pb_init
setup_queue none # nothing bound: the event comes back unroutable and is retried in place
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL)" >/dev/null
start_cdc_relay "${RELAY_ARGS[@]}"
wait_until "curl -sf $URL/healthz >/dev/null" 30 || fail "/healthz never answered on port $PORT"

# ---- 1. idle outbox, busy database: no age ----------------------------------------------------
for i in 1 2 3 4 5 6; do
    psql_q "INSERT INTO public.busy (v) SELECT g FROM generate_series(1, 5000) g" >/dev/null
    sleep 0.5
done
age=$(metric postbox_replication_slot_lag_age_seconds)
[[ $age == 0 ]] || fail "an idle outbox has a slot age of '$age' s, expected 0"
! grep -q 'is over cdc.max_slot_lag_age' "$PB_RELAY_LOG" || fail "the relay warned about the age of an idle outbox"
[[ $(metric postbox_replication_slot_lag_over_limit) == 0 ]] || fail "over_limit is not 0 on an idle outbox"
say "idle outbox, 30,000 rows into another table over 3 s: slot age $age s, not over $LIMIT"

# ---- 2. blocked: over the age limit -------------------------------------------------------------
enqueue_seq 1 1 1
t_enq=$(date +%s%N)
wait_until 'grep -q "unroutable\|returned" "$PB_RELAY_LOG"' 30 || fail "the event was never refused by the broker"
wait_until 'grep -q "is over cdc.max_slot_lag_age" "$PB_RELAY_LOG"' 30 || fail "the relay never warned about the slot's age"
warned_ms=$((($(date +%s%N) - t_enq) / 1000000))
say "warned ${warned_ms} ms after the commit: $(grep -m1 'is over cdc.max_slot_lag_age' "$PB_RELAY_LOG" | cut -c1-240)"
((warned_ms >= LIMIT_MS)) || fail "warned after $warned_ms ms, before the limit of $LIMIT_MS ms"
wait_until '[[ $(metric postbox_replication_slot_lag_over_limit) == 1 ]]' 10 ||
    fail "postbox_replication_slot_lag_over_limit is '$(metric postbox_replication_slot_lag_over_limit)', expected 1"
age=$(metric postbox_replication_slot_lag_age_seconds)
awk -v a="$age" 'BEGIN { exit !(a > 2) }' || fail "postbox_replication_slot_lag_age_seconds is '$age', expected over 2"
grep -q 'while a failed batch' "$PB_RELAY_LOG" && fail "cdc.on_excess_lag = warn gave the batch up"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
say "metrics: over_limit 1, age $age s; relay stopped"

# no relay: status and check judge the oldest outbox row not relayed
rc=0
out=$(status_json) || rc=$?
((rc == 1)) || fail "postbox status exited $rc with the slot over cdc.max_slot_lag_age, expected 1: $out"
slot_json=$(jq -c --arg s "$POSTBOX_CDC_SLOT" '.replication_slots[] | select(.slot == $s)' <<<"$out")
[[ $(jq -r .over_max_lag_age <<<"$slot_json") == true ]] || fail "postbox status does not mark the slot over_max_lag_age: $slot_json"
jq -e '.checks_failed | map(select(contains("cdc.max_slot_lag_age"))) | length == 1' <<<"$out" >/dev/null ||
    fail "postbox status has no failed check naming cdc.max_slot_lag_age: $out"
say "status: $slot_json; checks_failed $(jq -c .checks_failed <<<"$out")"
table=$("$POSTBOX_BIN" "${AGE[@]}" status) || true
grep -q "$POSTBOX_CDC_SLOT .* over cdc.max_slot_lag_age" <<<"$table" ||
    fail "the status table does not show the slot over cdc.max_slot_lag_age: $table"
rc=0
"$POSTBOX_BIN" "${AGE[@]}" --set relay.capture=cdc check --relay >"$PB_TMP/check.out" 2>&1 || rc=$?
line=$(grep -m1 '^FAIL cdc.slot: ' "$PB_TMP/check.out") || { cat "$PB_TMP/check.out" >&2; fail "postbox check has no FAIL cdc.slot line"; }
grep -q 'more than cdc.max_slot_lag_age 2s' <<<"$line" || fail "the cdc.slot line does not name the limit: $line"
((rc != 0)) || fail "postbox check exited 0 with a FAIL line"
say "check: exit $rc, $line"

# routable again: the event goes, the age falls back under the limit
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
start_cdc_relay "${RELAY_ARGS[@]}"
wait_until '(($(queue_count) >= 1))' 30 || fail "the event never arrived once routable"
cdc_wait_caught_up 30
wait_until '[[ $(metric postbox_replication_slot_lag_over_limit) == 0 ]]' 10 ||
    fail "postbox_replication_slot_lag_over_limit is '$(metric postbox_replication_slot_lag_over_limit)', expected 0"
[[ $(metric postbox_replication_slot_lag_age_seconds) == 0 ]] || fail "the age is not 0 once caught up"
out=$(status_json) || fail "postbox status fails with the slot caught up: $out"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
say "ok: over the age limit the relay warned, the metric was 1, status and check failed; caught up, all cleared"

# ---- 3. cdc.on_excess_lag = stop, the age limit only ---------------------------------------------
setup_queue none
start_cdc_relay "${AGE[@]}" --set cdc.lag_interval=200ms --set cdc.on_excess_lag=stop \
    --set relay.backoff_base=200ms --set relay.backoff_cap=500ms --set relay.max_attempts=100000
enqueue_seq 1 2 2
wait_relay 30
((RELAY_RC == 1)) || fail "the relay exited with $RELAY_RC over the age limit with cdc.on_excess_lag = stop, expected 1"
grep -q 'is over cdc.max_slot_lag_age .* and cdc.on_excess_lag = stop: the relay stops' "$PB_RELAY_LOG" ||
    fail "the relay did not say why it stopped"
[[ -n $(slot_confirmed_lsn) ]] || fail "the slot is gone after the stop"
say "stop: $(grep -m1 'cdc.on_excess_lag = stop' "$PB_RELAY_LOG" | cut -c1-220)"
