#!/usr/bin/env bash
# The cdc relay's mark returns only how many relayed rows it found in the history; when that
# falls short it asks which ones are there. Here a quarter of the relayed rows are deleted while
# the slot holds their inserts: the other rows move to the history at once (not tried again and
# again), exactly the deleted ones are reported, and every event is published.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue '#'
cdc_use_slot
cdc_create_slot
enqueue_seq 4 1 10
# agg-1's 10 rows go; agg-2..agg-4's 30 stay pending
psql_q "DELETE FROM postbox.outbox WHERE aggregate_id = 'agg-1'" >/dev/null
relay_drain 40 --capture cdc
got=$(queue_count)
((got == 40)) || fail "$got messages in the queue, expected the 40 events of the stream"
published=$(published_count)
((published == 30)) || fail "$published rows in the history, expected the 30 that were not deleted"
in_history=$(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE aggregate_id = 'agg-1'")
((in_history == 0)) || fail "$in_history rows of the deleted aggregate in the history"
[[ $(pending_count) == 0 ]] || fail "rows still pending in the outbox"
warned=$(grep -c 'could not be marked published' "$PB_RELAY_LOG" || true)
((warned == 1)) || fail "expected one warning about the rows that could not be marked, found $warned"
grep -q '10 relayed outbox row(s) between ids' "$PB_RELAY_LOG" ||
    fail "the warning does not count exactly the 10 deleted rows: $(grep 'could not be marked' "$PB_RELAY_LOG")"
say "ok: 30 rows moved to the history, the 10 deleted ones reported once, 40 events published"
