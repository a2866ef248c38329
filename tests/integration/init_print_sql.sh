#!/usr/bin/env bash
# postbox init --print-sql: the migrations as one script a DBA reviews and applies with psql.
#   1. a fresh database: the script (every migration) applied with psql leaves the same schema
#      as `postbox init` (pg_dump --schema-only of both compared), records each version, and
#      then `postbox check` says the schema is current, `postbox init` applies nothing and a
#      relay publishes;
#   2. the script refuses a database at another version (applied twice: the second run fails
#      and changes nothing); --from-scratch asks no database;
#   3. a pending migration (its row deleted): the script holds only it, guarded by the version
#      before it; applied, the schema is current again;
#   4. --mark-applied VERSION records the migrations up to VERSION without running them; an
#      unknown version is a usage error (exit 2).
source "$(dirname "$0")/lib.sh"

setup_queue '#'
# the migrations' versions, in order (numbers may have gaps: each branch is given its own)
mapfile -t versions < <(ls "$POSTBOX_SOURCE_DIR"/sql/[0-9][0-9][0-9]_*.sql | sed 's|.*/0*\([0-9]*\)_.*|\1|')
n_migrations=${#versions[@]}
latest=${versions[n_migrations - 1]}
prev=${versions[n_migrations - 2]}
apply() { # FILE: the script through psql, as a DBA would run it
    psql -X -q -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$1" >"$PB_TMP/psql.out" 2>&1
}
schema_current() { # NAME: postbox check says the schema is current
    local out
    out=$("$POSTBOX_BIN" check --relay --json 2>"$PB_TMP/check.err") || { printf '%s\n' "$out" >&2; fail "($1) postbox check failed"; }
    jq -e --arg v "$latest" 'any(.checks[]; .check == "schema.version" and .status == "ok"
                                 and (.message == "schema postbox at version " + $v + " (current)"))' \
        <<<"$out" >/dev/null || fail "($1) postbox check does not say the schema is current: $out"
    say "($1) postbox check: $(jq -r '.checks[] | select(.check == "schema.version") | .message' <<<"$out")"
}

# ---- 1. a fresh database ------------------------------------------------------------------------
"$POSTBOX_BIN" init --print-sql >"$PB_TMP/all.sql" || fail "init --print-sql failed"
grep -q "^-- From schema version 0 to $latest: $n_migrations migrations" "$PB_TMP/all.sql" ||
    fail "the script does not say what it applies: $(head -3 "$PB_TMP/all.sql")"
"$POSTBOX_BIN" init --print-sql --from-scratch --dsn 'host=/nonexistent dbname=none' >"$PB_TMP/scratch.sql" ||
    fail "init --print-sql --from-scratch asked the database"
cmp -s "$PB_TMP/all.sql" "$PB_TMP/scratch.sql" || fail "--from-scratch differs from the script for an empty database"
[[ $(psql_q "SELECT to_regnamespace('postbox') IS NULL") == t ]] || fail "--print-sql changed the database"
apply "$PB_TMP/all.sql" || fail "psql could not apply the script: $(tail -5 "$PB_TMP/psql.out")"
[[ $(psql_q "SELECT string_agg(version::text, ',' ORDER BY version) FROM postbox.schema_migrations") == \
    "$(IFS=,; echo "${versions[*]}")" ]] || fail "the script did not record versions ${versions[*]}"
schema_current fresh

# the same schema as postbox init makes in another database
ref_db=${PB_DB}_ref
psql -XAtq -d "$PB_ADMIN_DSN" -c "DROP DATABASE IF EXISTS $ref_db" -c "CREATE DATABASE $ref_db" >/dev/null
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $ref_db' >/dev/null 2>&1"
"$POSTBOX_BIN" --dsn "${POSTBOX_PG_DSN%/*}/$ref_db" init >/dev/null 2>&1 || fail "postbox init of the reference database failed"
PG_DUMP=$(command -v pg_dump || ls /usr/lib/postgresql/*/bin/pg_dump | tail -1)
dump() { "$PG_DUMP" --schema-only --schema=postbox --no-owner "$1" | grep -v '^\\\(un\)\?restrict '; }
dump "$POSTBOX_PG_DSN" >"$PB_TMP/script.schema"
dump "${POSTBOX_PG_DSN%/*}/$ref_db" >"$PB_TMP/init.schema"
diff -u "$PB_TMP/init.schema" "$PB_TMP/script.schema" >"$PB_TMP/schema.diff" ||
    fail "the script's schema differs from postbox init's: $(head -20 "$PB_TMP/schema.diff")"
say "(fresh) the script's schema equals postbox init's ($(grep -c '^CREATE' "$PB_TMP/init.schema") CREATE statements)"

out=$("$POSTBOX_BIN" init 2>&1) || fail "postbox init after the script failed: $out"
[[ $out == *"applied 0 migrations"* ]] || fail "postbox init after the script applied something: $out"
enqueue_seq 3 1 5
relay_drain 60
[[ $(published_count) == 15 ]] || fail "the relay published $(published_count) of 15"
drain_queue "$PB_TMP/got" 15

# ---- 2. the guard ----------------------------------------------------------------------------------
apply "$PB_TMP/all.sql" && fail "the script ran again on a database at version $latest"
grep -q "this script upgrades schema version 0, the database is at version $latest" "$PB_TMP/psql.out" ||
    fail "the refusal does not say why: $(tail -3 "$PB_TMP/psql.out")"
say "(guard) applied again: $(grep -o 'postbox: this script.*' "$PB_TMP/psql.out" | head -1)"
schema_current guard

# ---- 3. a pending migration -----------------------------------------------------------------------
# a database at the version before the latest, built from the migration files as psql would apply them (a
# migration need not be re-runnable: only a schema that really lacks it can take it)
name=$(psql_q "SELECT name FROM postbox.schema_migrations WHERE version = $latest")
main_dsn=$POSTBOX_PG_DSN
pending_db=${PB_DB}_pending
psql -XAtq -d "$PB_ADMIN_DSN" -c "DROP DATABASE IF EXISTS $pending_db" -c "CREATE DATABASE $pending_db" >/dev/null
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $pending_db' >/dev/null 2>&1"
export POSTBOX_PG_DSN=${main_dsn%/*}/$pending_db
files=()
for f in "$POSTBOX_SOURCE_DIR"/sql/[0-9][0-9][0-9]_*.sql; do
    v=$(basename "$f" | sed 's/^0*\([0-9]*\)_.*/\1/')
    ((v < latest)) && files+=(-f "$f")
done
psql -XAtq -v ON_ERROR_STOP=1 -1 -d "$POSTBOX_PG_DSN" -c "SET client_min_messages = warning" \
    -c "CREATE SCHEMA postbox" \
    -c "CREATE TABLE postbox.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())" \
    "${files[@]}" \
    -c "INSERT INTO postbox.schema_migrations (version, name) SELECT v, 'v' || v FROM unnest('{$(IFS=,; echo "${versions[*]}")}'::int[]) v WHERE v < $latest" >/dev/null ||
    fail "cannot build a schema at version $prev"
"$POSTBOX_BIN" init --print-sql >"$PB_TMP/pending.sql" || fail "init --print-sql failed"
grep -q "^-- ---- migration $name ----" "$PB_TMP/pending.sql" || fail "the script lacks $name"
(($(grep -c '^-- ---- migration ' "$PB_TMP/pending.sql") == 1)) || fail "the script holds more than $name"
grep -q "<> $prev THEN" "$PB_TMP/pending.sql" || fail "the script is not guarded by version $prev"
apply "$PB_TMP/pending.sql" || fail "psql could not apply the pending migration: $(tail -5 "$PB_TMP/psql.out")"
schema_current pending
out=$("$POSTBOX_BIN" init --print-sql) || fail "init --print-sql failed"
grep -q "nothing to apply" <<<"$out" || fail "a current schema still has something to apply: $out"
export POSTBOX_PG_DSN=$main_dsn

# ---- 4. --mark-applied -----------------------------------------------------------------------------
psql_q "DELETE FROM postbox.schema_migrations WHERE version >= $prev"
out=$("$POSTBOX_BIN" init --mark-applied "$latest" 2>"$PB_TMP/mark.err") || fail "init --mark-applied failed: $(cat "$PB_TMP/mark.err")"
[[ $out == "schema postbox at version $latest (marked 2 migrations as applied, none run)" ]] ||
    fail "unexpected output of --mark-applied: $out"
say "(mark-applied) $out"
schema_current mark-applied
rc=0
"$POSTBOX_BIN" init --mark-applied 999 >/dev/null 2>"$PB_TMP/mark999.err" || rc=$?
((rc == 2)) || fail "--mark-applied 999: exit $rc, expected 2"
grep -q "no migration 999" "$PB_TMP/mark999.err" || fail "--mark-applied 999: $(cat "$PB_TMP/mark999.err")"
