#!/usr/bin/env bash
# Outbox rows deleted while the slot still held their inserts: the cdc relay publishes the events
# from the stream, cannot mark the rows published (they are gone), says so in one line, and
# --drain still ends within seconds (it used to try each row 200 times, about once a second
# while idle, before giving up). Then the mixed case: the mark returns only how many rows it found
# in the history, and asks which only when that falls short; with a quarter of the rows deleted,
# the others move to the history at once and exactly the deleted ones are reported.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue '#'
cdc_use_slot
cdc_create_slot
enqueue_seq 4 1 10
psql_q "DELETE FROM postbox.outbox" >/dev/null
t0=$SECONDS
relay_drain 40 --capture cdc
took=$((SECONDS - t0))
got=$(queue_count)
say "--drain took ${took}s; $got messages in the queue"
((got == 40)) || fail "$got messages in the queue, expected the 40 events of the stream"
warned=$(grep -c 'could not be marked published' "$PB_RELAY_LOG" || true)
((warned == 1)) || fail "expected one warning about the rows that could not be marked, found $warned"
grep -q '40 relayed outbox row(s) between ids' "$PB_RELAY_LOG" || fail "the warning does not count the 40 rows"
((took <= 20)) || fail "--drain took ${took}s with 40 rows that cannot be marked"
[[ $(published_count) == 0 && $(pending_count) == 0 ]] || fail "rows appeared in the outbox or its history"
say "ok: the events were published, the missing rows reported once, --drain ended in ${took}s"

# the mixed case: agg-1's 10 rows go, agg-2..agg-4's 30 stay pending
enqueue_seq 4 11 20
psql_q "DELETE FROM postbox.outbox WHERE aggregate_id = 'agg-1'" >/dev/null
relay_drain 40 --capture cdc
got=$(queue_count)
((got == 80)) || fail "$got messages in the queue, expected 80 (the 40 events of each round)"
published=$(published_count)
((published == 30)) || fail "$published rows in the history, expected the 30 that were not deleted"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE aggregate_id = 'agg-1'") == 0 ]] ||
    fail "rows of the deleted aggregate in the history"
[[ $(pending_count) == 0 ]] || fail "rows still pending in the outbox"
grep -q '10 relayed outbox row(s) between ids' "$PB_RELAY_LOG" ||
    fail "the warning does not count exactly the 10 deleted rows: $(grep 'could not be marked' "$PB_RELAY_LOG")"
say "ok: 30 rows moved to the history, the 10 deleted ones reported, 80 events published"
