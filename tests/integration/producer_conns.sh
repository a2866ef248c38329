#!/usr/bin/env bash
# The C producer API does not depend on a client-side cache of the server's session state:
# tests/integration/producer_conns.c enqueues twice on each of 70 connections of one process
# inside open transactions (aggregate_type 'producer-conns'), and on one connection after
# DISCARD ALL and DEALLOCATE ALL, outside and inside the transaction (aggregate_type
# 'producer-discard'). Every enqueue must succeed and every transaction commit its events.
source "$(dirname "$0")/lib.sh"
: "${POSTBOX_PRODUCER_CONNS:?POSTBOX_PRODUCER_CONNS must name the producer_conns binary}"

pb_init
rc=0
"$POSTBOX_PRODUCER_CONNS" "$POSTBOX_PG_DSN" >"$PB_TMP/conns.out" 2>&1 || rc=$?
sed 's/^/  producer_conns: /' "$PB_TMP/conns.out"
((rc == 0)) || fail "producer_conns exited with $rc"

conns=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'producer-conns'")
per_conn=$(psql_q "SELECT count(DISTINCT aggregate_id) FROM postbox.outbox
                   WHERE aggregate_type = 'producer-conns'")
discard=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_type = 'producer-discard'")
say "70 connections: $conns event(s) from $per_conn connection(s); after DISCARD/DEALLOCATE: $discard event(s)"
((conns == 140 && per_conn == 70)) || fail "expected 2 events from each of 70 connections, found $conns from $per_conn"
((discard == 6)) || fail "expected 6 events after DISCARD ALL / DEALLOCATE ALL, found $discard"
