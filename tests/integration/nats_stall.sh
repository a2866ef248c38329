#!/usr/bin/env bash
# A stalled JetStream while a large backlog is pending: 30,000 events over 100 aggregates,
# nats-server frozen (SIGSTOP) for 2.5 s right after the relay started, nats.ack_timeout=1s, so
# whole batches time out and wait for a retry while most of the backlog sits behind them in
# their aggregates. The relay must drain everything within a bounded time (it used to keep
# holding every batch back, and its claim walked the whole backlog per batch), every event must
# be in the stream exactly once (Nats-Msg-Id dedup), in per-aggregate order, none dead-lettered.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

N_AGG=100 PER_AGG=300 FREEZE=2.5 DRAIN_SECS=90
total=$((N_AGG * PER_AGG))
NATS_PID=$(services status 2>&1 | awk '$1 == "nats" && $2 == "running" { print $4 }')
[[ $NATS_PID =~ ^[0-9]+$ ]] || fail "cannot find the pid of nats-server (scripts/services status)"
# whatever happens, leave nats-server running for the tests after this one
on_exit "kill -CONT $NATS_PID 2>/dev/null"

pb_init
for ((k = 1; k <= PER_AGG; k += 100)); do enqueue_seq $N_AGG $k $((k + 99)); done
[[ $(pending_count) == "$total" ]] || fail "enqueue failed"

t0=$(date +%s%N)
start_relay --drain --set nats.ack_timeout=1s
wait_until '(( $(published_count) > 0 ))' 30 || fail "the relay published nothing within 30 s"
kill -STOP "$NATS_PID"
say "nats-server frozen for ${FREEZE}s; published so far: $(published_count)"
sleep "$FREEZE"
kill -CONT "$NATS_PID"
say "nats-server running again; published $(published_count), pending $(pending_count)"
wait_relay "$DRAIN_SECS"
((RELAY_RC == 0)) || fail "postbox relay --drain exited with $RELAY_RC"
say "drained $total events in $((($(date +%s%N) - t0) / 1000000)) ms"

retried=$(psql_q "SELECT count(*) FROM postbox.outbox_all WHERE attempts > 0")
say "events that needed more than one attempt: $retried; dead letters: $(dead_count)"
grep -E 'not acknowledged|set aside' "$PB_RELAY_LOG" | head -3 | sed 's/^/  log: /' || true
((retried > 0)) || fail "no publish failed while nats-server was frozen: nothing tested"
[[ $(dead_count) == 0 ]] || fail "events were dead-lettered because of a 2.5 s stall"
[[ $(pending_count) == 0 ]] || fail "$(pending_count) events still pending"

drain_stream "$PB_TMP/got" $total 1500 120
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
in_stream=$(stream_count)
((in_stream == total)) || fail "the stream holds $in_stream messages for $total events"
