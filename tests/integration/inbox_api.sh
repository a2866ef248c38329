#!/usr/bin/env bash
# The C inbox API: tests/integration/inbox_example.c processes messages through
# postbox_inbox_process on its own connection (a repeat is a duplicate, a failing handler rolls
# back alone, a rolled-back transaction forgets the message, no transaction is refused). It
# checks everything itself; the test passes when it exits 0. Afterwards the inbox must hold
# exactly its processed messages.
source "$(dirname "$0")/lib.sh"
: "${POSTBOX_INBOX_EXAMPLE:?POSTBOX_INBOX_EXAMPLE must name the inbox example binary}"

pb_init
rc=0
"$POSTBOX_INBOX_EXAMPLE" "$POSTBOX_PG_DSN" >"$PB_TMP/example.out" 2>&1 || rc=$?
sed 's/^/  example: /' "$PB_TMP/example.out"
((rc == 0)) || fail "the inbox example exited with $rc"
psql_q "SELECT consumer, message_id, message_type, processed_at IS NOT NULL FROM postbox.inbox
        ORDER BY message_id" | sed 's/^/  inbox: /'
psql_q "SELECT account, balance FROM inbox_example_balance ORDER BY account" | sed 's/^/  balance: /'
rows=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'inbox-example' AND processed_at IS NOT NULL")
((rows == 4)) || fail "the inbox holds $rows processed row(s) of consumer inbox-example, expected 4 (msg-1..msg-4)"
