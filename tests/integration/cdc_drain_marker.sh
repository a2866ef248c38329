#!/usr/bin/env bash
# `relay --capture cdc --drain` when its drain marker cannot be written (here: the relay's role
# may not call pg_logical_emit_message): the relay stops at once with an error naming the marker
# and exits non-zero, instead of waiting silently for a marker that never comes. The events
# committed before are relayed all the same. A slot lag that cannot be measured (the role may
# not read pg_replication_slots) is logged, not swallowed.
source "$(dirname "$0")/lib.sh"

ROLE=pb_cdc_drain_marker
pb_init
setup_queue '#'
cdc_use_slot
cdc_create_slot # the slot and publication, before the events
psql_admin() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "$1" >/dev/null; }
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)' -c 'DROP ROLE IF EXISTS $ROLE' >/dev/null 2>&1 || true"
psql_admin "DROP ROLE IF EXISTS $ROLE" 2>/dev/null || true
psql_admin "CREATE ROLE $ROLE LOGIN REPLICATION"
# the relay's role owns the outbox (its trigger and publication need that) but may not write
# logical messages
psql_q "GRANT USAGE ON SCHEMA postbox TO $ROLE;
        GRANT ALL ON ALL TABLES IN SCHEMA postbox TO $ROLE;
        GRANT ALL ON ALL SEQUENCES IN SCHEMA postbox TO $ROLE;
        ALTER TABLE postbox.outbox OWNER TO $ROLE;
        REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC;
        REVOKE SELECT ON pg_catalog.pg_replication_slots FROM PUBLIC;" >/dev/null
enqueue_seq 5 1 4
dsn=${POSTBOX_PG_DSN/postgres@/$ROLE@}

t0=$(date +%s)
start_relay --dsn "$dsn" --capture cdc --drain
wait_until '! pid_alive "$RELAY_PID"' 60 || fail "relay --drain still runs after 60 s: it waits for a marker it could not write"
wait_relay 5
say "relay --drain exited with $RELAY_RC after $(($(date +%s) - t0)) s"
((RELAY_RC != 0)) || fail "relay --drain exited 0 although its drain marker could not be written"
grep -q 'drain marker' "$PB_RELAY_LOG" || fail "the relay's error does not name the drain marker"
grep -q 'measure the slot lag' "$PB_RELAY_LOG" || fail "the failed slot lag query left no trace in the log"
got=$(queue_count)
((got == 20)) || fail "expected the 20 committed events in the queue before the failure, got $got"
say "ok: the failed drain marker is an error, the failed lag query is logged, and the 20 events were relayed"
