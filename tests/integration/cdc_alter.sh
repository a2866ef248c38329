#!/usr/bin/env bash
# cdc capture: the decoder survives ALTERs of postbox.outbox while it streams. Events are
# written before and after `ALTER TABLE postbox.outbox ADD COLUMN note text` (some setting the
# new column), in a transaction that adds a column between two inserts, and after a column is
# dropped again. Every event arrives in per-aggregate order, and the relay never restarts or
# reconnects (one "streaming slot" line, no warning in its log); the relayed rows are all marked
# published. Then `postbox cdc drop-slot`: refused while a relay streams, clean afterwards.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue '#'
cdc_use_slot
start_cdc_relay --set relay.batch_size=20 --set log.level=debug

K=0
batch() { # N [note|note2]: N events in transactions of 10, k = K+1..K+N; aggregate alt-(k % 7)
    local n=$1 col=${2:-} t
    for ((t = 0; t < n; t += 10)); do
        if [[ -z $col ]]; then
            echo "SELECT count(postbox.enqueue('order', 'alt-' || (k % 7), 'altered.v1', jsonb_build_object('seq', k)))
                    FROM generate_series($((K + t + 1)), $((K + t + 10))) k;"
        else
            echo "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, $col)
                  SELECT 'order', 'alt-' || (k % 7), 'altered.v1', jsonb_build_object('seq', k, '$col', true), '$col ' || k
                    FROM generate_series($((K + t + 1)), $((K + t + 10))) k;"
        fi
        echo "SELECT pg_sleep(0.01);"
    done
    K=$((K + n))
}
{
    batch 200
    echo "ALTER TABLE postbox.outbox ADD COLUMN note text;"
    batch 100
    batch 100 note
    batch 100
    # one transaction: an insert, a column added, an insert that sets it
    echo "BEGIN;"
    batch 10
    echo "ALTER TABLE postbox.outbox ADD COLUMN note2 text DEFAULT 'two';"
    batch 10 note2
    echo "COMMIT;"
    batch 100 note
    echo "ALTER TABLE postbox.outbox DROP COLUMN note;"
    batch 100
    batch 100 note2
} >"$PB_TMP/produce.sql"
total=820
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/produce.sql" >/dev/null || fail "the producer failed"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_all") == "$total" ]] || fail "the producer wrote $(psql_q "SELECT count(*) FROM postbox.outbox_all") events, expected $total"
notes=$(psql_q "SELECT count(*) FILTER (WHERE payload ? 'note'), count(*) FILTER (WHERE payload ? 'note2') FROM postbox.outbox_all")
say "$total events written around three ALTERs; rows that set note / note2: ${notes/|/ \/ }"

cdc_wait_caught_up 60
pid_alive "$RELAY_PID" || fail "the relay exited"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
streams=$(grep -c 'streaming slot' "$PB_RELAY_LOG" || true)
warnings=$(grep -c ' warn \| error ' "$PB_RELAY_LOG" || true)
described=$(grep -c 'postbox.outbox described' "$PB_RELAY_LOG" || true)
say "relay log: $streams 'streaming slot' line(s), $warnings warning(s)/error(s), postbox.outbox described $described time(s) ($(grep 'postbox.outbox described' "$PB_RELAY_LOG" | sed 's/.*described: //' | tr '\n' ',' | sed 's/,$//'))"
((streams == 1 && warnings == 0)) || fail "the relay restarted or reconnected around the ALTERs"
((described >= 4)) || fail "the relay did not read the new table descriptions (Relation messages): $described"

drain_queue "$PB_TMP/got" $total 1000 60
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
check_all_arrived "$PB_TMP/got"
check_cdc_marked
dups=$(duplicates_in "$PB_TMP/got")
((dups == 0)) || fail "$dups duplicate(s) although the relay never restarted"

# postbox cdc drop-slot: refused while a relay streams the slot; then removes slot and publication
start_cdc_relay
out=$("$POSTBOX_BIN" cdc drop-slot 2>&1) && fail "cdc drop-slot succeeded while a relay streams the slot: $out"
say "cdc drop-slot while streaming: refused ($(tail -n 1 <<<"$out" | cut -c1-120))"
stop_relay
wait_until '[[ $(psql_q "SELECT active FROM pg_replication_slots WHERE slot_name = '"'$POSTBOX_CDC_SLOT'"'") == f ]]' 10 ||
    fail "the slot is still active after the relay stopped"
out=$("$POSTBOX_BIN" cdc drop-slot 2>&1) || fail "cdc drop-slot failed: $out"
left=$(psql_q "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT') + (SELECT count(*) FROM pg_publication WHERE pubname = 'postbox_outbox')")
((left == 0)) || fail "cdc drop-slot left the slot or the publication: $out"
say "cdc drop-slot: $(tr '\n' ';' <<<"$out")"
