#!/usr/bin/env bash
# 100 events no queue takes are dead-lettered; status turns them into a failed check; once a
# queue is bound, `postbox dlq replay` puts them back into the outbox (one transaction, count
# reported) and the relay publishes all of them.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue 'order.#' # invoice events are unroutable for now
psql_q "SELECT postbox.enqueue('invoice', 'inv-' || g, 'issued.v1', jsonb_build_object('seq', g))
        FROM generate_series(1, 100) g" >/dev/null
relay_drain 60 --set relay.max_attempts=1
[[ $(dead_count) == 100 ]] || fail "expected 100 dead letters, found $(dead_count)"

n=$("$POSTBOX_BIN" dlq list --aggregate invoice --limit 1000 --json | grep -c '"event_id"') || true
[[ $n == 100 ]] || fail "dlq list --aggregate invoice shows $n dead letters, expected 100"
"$POSTBOX_BIN" dlq show --id 1 | grep -q 'reason' || fail "dlq show --id 1 shows no reason"
if "$POSTBOX_BIN" status --max-dead 99 >"$PB_TMP/status" 2>&1; then
    fail "status --max-dead 99 exited 0 with 100 dead letters"
fi
grep -q 'dead letters 100 > 99' "$PB_TMP/status" || fail "status does not name the crossed threshold: $(cat "$PB_TMP/status")"
"$POSTBOX_BIN" status --max-dead 100 >/dev/null || fail "status --max-dead 100 failed with 100 dead letters"
if "$POSTBOX_BIN" dlq replay 2>/dev/null; then fail "dlq replay without a filter or --all ran"; fi

setup_queue '#'
out=$("$POSTBOX_BIN" dlq replay --aggregate invoice --event-type issued.v1 --since 1h) || fail "dlq replay failed: $out"
say "$out"
[[ $out == *"replayed 100 "* ]] || fail "dlq replay did not report 100: $out"
[[ $(dead_count) == 0 ]] || fail "$(dead_count) dead letters left after the replay"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'invoice' AND attempts = 0 AND published_at IS NULL") == 100 ]] ||
    fail "the replayed events are not pending with attempts reset"
relay_drain 60
drain_queue "$PB_TMP/got" 100 2000 60
stats=$(check_order "$PB_TMP/got") || fail "order: $stats"
check_all_arrived "$PB_TMP/got"
json=$("$POSTBOX_BIN" status --json --max-backlog 0 --max-dead 0 --max-lag 60s) || fail "status check failed after the replay: $json"
[[ $json == *'"ok": true'* ]] || fail "status --json does not say ok: $json"
