#!/usr/bin/env bash
# postbox init: applies the migrations once, a second run applies nothing and changes nothing,
# and a database newer than the binary is refused with a clear error.
source "$(dirname "$0")/lib.sh"

out=$("$POSTBOX_BIN" init 2>"$PB_TMP/init1.err") || fail "first init failed: $(cat "$PB_TMP/init1.err")"
say "first init: $out"
latest=$(ls "$POSTBOX_SOURCE_DIR"/sql/[0-9][0-9][0-9]_*.sql | sed -n '$s|.*/0*\([0-9]*\)_.*|\1|p')
[[ $out == *"version $latest "* ]] || fail "first init did not report version $latest: '$out'"
for t in outbox dead_letters schema_migrations; do
    [[ $(psql_q "SELECT to_regclass('postbox.$t') IS NOT NULL") == t ]] || fail "table postbox.$t missing after init"
done
[[ $(psql_q "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'postbox' AND p.proname = 'enqueue'") -ge 1 ]] || fail "function postbox.enqueue missing"
before=$(psql_q "SELECT * FROM postbox.schema_migrations ORDER BY 1")
say "schema_migrations after the first init: $(tr '\n' ' ' <<<"$before")"
[[ -n $before ]] || fail "schema_migrations is empty after init"

out2=$("$POSTBOX_BIN" init 2>"$PB_TMP/init2.err") || fail "second init failed: $(cat "$PB_TMP/init2.err")"
say "second init: $out2"
[[ $out2 == *"applied 0"* ]] || fail "second init should apply 0 migrations: '$out2'"
after=$(psql_q "SELECT * FROM postbox.schema_migrations ORDER BY 1")
[[ $before == "$after" ]] || fail "schema_migrations changed by the second init: '$before' -> '$after'"

# a version from the future, whatever other columns the table has
psql_q "DO \$\$
    DECLARE cols text := 'version'; vals text := '999'; r record;
    BEGIN
      FOR r IN SELECT column_name, data_type FROM information_schema.columns
               WHERE table_schema = 'postbox' AND table_name = 'schema_migrations'
                 AND column_name <> 'version' AND is_nullable = 'NO'
                 AND column_default IS NULL AND is_identity = 'NO' AND is_generated = 'NEVER' LOOP
        cols := cols || ', ' || quote_ident(r.column_name);
        vals := vals || ', ' || CASE
            WHEN r.data_type IN ('text', 'character varying') THEN quote_literal('from the future')
            WHEN r.data_type LIKE 'timestamp%' THEN 'now()'
            WHEN r.data_type IN ('integer', 'bigint', 'smallint') THEN '0'
            WHEN r.data_type = 'boolean' THEN 'true'
            ELSE 'DEFAULT' END;
      END LOOP;
      EXECUTE format('INSERT INTO postbox.schema_migrations (%s) VALUES (%s)', cols, vals);
    END \$\$"
rc=0
"$POSTBOX_BIN" init >"$PB_TMP/init3.out" 2>"$PB_TMP/init3.err" || rc=$?
say "init against version 999: exit $rc, stderr: $(cat "$PB_TMP/init3.err")"
((rc != 0)) || fail "init accepted a database at version 999"
grep -qi newer "$PB_TMP/init3.err" || fail "the error does not say the database is newer: $(cat "$PB_TMP/init3.err")"
[[ $(psql_q "SELECT max(version) FROM postbox.schema_migrations") == 999 ]] || fail "init changed schema_migrations"
