#!/usr/bin/env bash
# `postbox init` by a schema owner that is not a superuser: the schema is created all the same
# (signed postbox.emit, lock keys included), and since only a superuser can revoke EXECUTE on
# pg_logical_emit_message from PUBLIC, init says so (a warning with relay.capture = cdc, naming
# the SQL to run) instead of failing or keeping quiet. Running that SQL as a superuser takes the
# built-in from PUBLIC, while the owner's postbox.emit keeps working.
source "$(dirname "$0")/lib.sh"

OWNER=pb_init_unprivileged_owner
psql_admin() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "$1" >/dev/null; }
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)' -c 'DROP ROLE IF EXISTS $OWNER' >/dev/null 2>&1 || true"
psql_admin "DROP ROLE IF EXISTS $OWNER" 2>/dev/null || true
psql_admin "CREATE ROLE $OWNER LOGIN"
psql_admin "GRANT CREATE ON DATABASE $PB_DB TO $OWNER"
owner_dsn=${POSTBOX_PG_DSN/postgres@/$OWNER@}
public_may() {
    psql_q "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE')) FROM pg_proc p
            WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace"
}

out=$("$POSTBOX_BIN" --dsn "$owner_dsn" init 2>&1) || fail "init by a non-superuser owner failed: $out"
grep -q 'not a superuser: EXECUTE on pg_logical_emit_message stays with PUBLIC' <<<"$out" ||
    fail "init (poll) does not say that pg_logical_emit_message stays with PUBLIC: $out"
out=$("$POSTBOX_BIN" --dsn "$owner_dsn" --set relay.capture=cdc init 2>&1) || fail "second init failed: $out"
grep -q 'warn .*only a superuser can revoke that' <<<"$out" || fail "init (cdc) gives no warning: $out"
grep -q "REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC" <<<"$out" || fail "the warning does not name the SQL to run: $out"
say "init as a non-superuser: $(grep -o 'warn .*only a superuser can revoke that' <<<"$out")"
[[ $(public_may) == t ]] || fail "PUBLIC lost EXECUTE on pg_logical_emit_message without a superuser"
[[ $(psql_q "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'postbox'") == "$OWNER" ]] ||
    fail "schema postbox is not owned by $OWNER"

# what the warning says to run, as a superuser
sql=$("$POSTBOX_BIN" init --print-grants | awk '/run as a superuser:$/ { f = 1; next } f { sub(/^--   /, ""); print }')
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "$sql" >/dev/null || fail "the printed SQL failed: $sql"
[[ $(public_may) == f ]] || fail "PUBLIC still may execute pg_logical_emit_message after the printed SQL"
out=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$owner_dsn" -c "SELECT postbox.emit('order', '1', 'x.v1', '{}')" 2>&1) ||
    fail "postbox.emit (owned by $OWNER) stopped working after the revoke: $out"
out=$("$POSTBOX_BIN" --dsn "$owner_dsn" --set relay.capture=cdc init 2>&1) || fail "third init failed: $out"
grep -q 'warn' <<<"$out" && fail "init still warns after the revoke: $out"
say "ok: init without a superuser says what to run; after it, PUBLIC may not call the built-in and postbox.emit works"
