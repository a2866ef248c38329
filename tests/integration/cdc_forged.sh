#!/usr/bin/env bash
# Forged events in cdc mode. pg_logical_emit_message() is executable by every role by default,
# and a message with the relay's prefix used to be published whatever role wrote it.
# 1. `postbox init` (as a superuser) revokes it from PUBLIC: an unprivileged login cannot write
#    a message at all, nor call postbox.emit (EXECUTE not granted).
# 2. Where the built-in is executable anyway (a database whose init ran without superuser; here
#    granted back to the forger), the forger writes fake events with the prefix: unsigned, with
#    a made-up signature, and with a signature copied onto another event. The relay publishes
#    none of them and logs each as rejected, while the events of postbox.emit, called by a
#    producer role granted it (postbox_producer), are published by a relay running as a member
#    of postbox_relay.
source "$(dirname "$0")/lib.sh"

FORGER=pb_cdc_forged_forger
psql_admin() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "$1" >/dev/null; }
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)' -c 'DROP ROLE IF EXISTS $FORGER' >/dev/null 2>&1 || true"
psql_admin "DROP ROLE IF EXISTS $FORGER" 2>/dev/null || true
psql_admin "CREATE ROLE $FORGER LOGIN"

out=$("$POSTBOX_BIN" init 2>&1) || fail "postbox init failed: $out"
grep -q 'revoked EXECUTE on pg_logical_emit_message from PUBLIC' <<<"$out" ||
    fail "postbox init (superuser) did not report revoking pg_logical_emit_message: $out"
# the relay runs as a member of postbox_relay, the producer as one of postbox_producer
use_least_privilege --set relay.capture=cdc
PRODUCER=pb_it_producer
setup_queue '#'
cdc_use_slot
cdc_create_slot

as_role() { # ROLE SQL: runs SQL as ROLE; prints psql's output and error text
    psql -XAtq -v ON_ERROR_STOP=1 -d "${POSTBOX_PG_DSN/postgres@/$1@}" -c "$2" 2>&1
}
fake='{"event_id": "00000000-0000-4000-8000-00000000f00d", "aggregate_type": "order", "aggregate_id": "forged", "event_type": "forged.v1", "payload": {"forged": 1}, "headers": {}}'

# 1. revoked: the forger can neither write the message nor call postbox.emit
if res=$(as_role $FORGER "SELECT pg_logical_emit_message(true, 'postbox', '$fake')"); then
    fail "an unprivileged role could call pg_logical_emit_message after postbox init: $res"
fi
grep -q 'permission denied for function pg_logical_emit_message' <<<"$res" || fail "unexpected error: $res"
if res=$(as_role $FORGER "SELECT postbox.emit('order', 'forged', 'forged.v1', '{}')"); then
    fail "an unprivileged role could call postbox.emit: $res"
fi
say "after init, an unprivileged role gets: $res"

# 2. the built-in executable anyway: the relay must tell the forgeries from postbox.emit's events
psql_q "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO $FORGER" >/dev/null
as_role $PRODUCER "SELECT postbox.emit('order', 'real-1', 'real.v1', '{\"n\": 1}')" >/dev/null ||
    fail "the producer role could not call postbox.emit"
as_role $FORGER "SELECT pg_logical_emit_message(true, 'postbox', '$fake')" >/dev/null ||
    fail "the forger could not write its (unsigned) message"
as_role $FORGER "SELECT pg_logical_emit_message(true, 'postbox', 'hmac-sha256:$(printf '%064d' 0):$fake')" >/dev/null ||
    fail "the forger could not write its message with a made-up signature"
# a genuine signature of another event, pasted onto the fake one
sig=$(psql_q "SELECT encode(sha256(k.opad || sha256(k.ipad || convert_to('{}', 'UTF8'))), 'hex') FROM postbox.emit_key k")
as_role $FORGER "SELECT pg_logical_emit_message(true, 'postbox', 'hmac-sha256:$sig:$fake')" >/dev/null ||
    fail "the forger could not write its message with a copied signature"
as_role $PRODUCER "SELECT postbox.emit('order', 'real-2', 'real.v1', '{\"n\": 2}')" >/dev/null ||
    fail "the producer role could not call postbox.emit"

relay_drain 60 --capture cdc
drain_queue "$PB_TMP/got" 2 1000 30
n=$(wc -l <"$PB_TMP/got")
say "messages published: $n ($(cut -f5 "$PB_TMP/got" | tr '\n' ' '))"
((n == 2)) || fail "expected the 2 events of postbox.emit, got $n: $(cat "$PB_TMP/got")"
grep -q 'forged' "$PB_TMP/got" && fail "a forged event was published: $(grep forged "$PB_TMP/got")"
[[ $(cut -f5 "$PB_TMP/got" | tr '\n' ' ') == 'real-1 real-2 ' ]] || fail "wrong events published: $(cat "$PB_TMP/got")"
rejected=$(grep -c 'rejected a "postbox" message' "$PB_RELAY_LOG" || true)
say "rejections logged: $rejected"
((rejected == 3)) || fail "expected 3 rejected messages in the relay log, found $rejected"
grep -q 'it is not signed' "$PB_RELAY_LOG" || fail "the unsigned forgery is not named as such"
grep -q 'its signature does not verify' "$PB_RELAY_LOG" || fail "the bad signatures are not named as such"
say "ok: forged messages are refused by the database, and dropped by the relay where they get through"
