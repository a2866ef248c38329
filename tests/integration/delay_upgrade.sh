#!/usr/bin/env bash
# Upgrading to schema version 16 (expiry and delay) online, from the schema `postbox init` of
# version 15 left (its claim and postbox.enqueue are version 14's): while a producer session keeps
# calling postbox.enqueue with its 6 arguments and a relay session holds the claim statement of
# a relay of version 14 (prepared, as the relay prepares it), `postbox init` applies version 16. Nothing fails meanwhile: the producer's calls
# all commit, the prepared claim keeps working after the claim function is replaced. The roles
# that could execute postbox.enqueue and postbox.emit can execute the new ones (whose two new
# arguments default to NULL, so every old call still works), and those that could not still
# cannot. The events written before, during and after the upgrade are all published.
source "$(dirname "$0")/lib.sh"

files=()
for v in 001 002 003 004 005 006 007 008 009 010 011 012 013 014 015; do files+=(-f "$(ls "$POSTBOX_SOURCE_DIR"/sql/${v}_*.sql)"); done
psql -XAtq -v ON_ERROR_STOP=1 -1 -d "$POSTBOX_PG_DSN" -c "SET client_min_messages = warning" \
    -c "CREATE SCHEMA postbox" \
    -c "CREATE TABLE postbox.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())" \
    "${files[@]}" \
    -c "INSERT INTO postbox.schema_migrations (version, name) SELECT v, 'v' || v FROM generate_series(1, 15) v" >/dev/null ||
    fail "cannot build the version 15 schema"
# enqueue only for pb_up_writer (not PUBLIC), emit for pb_up_emitter (version 14 revoked PUBLIC)
psql_q "SET client_min_messages = warning;
        DO \$\$ BEGIN CREATE ROLE pb_up_writer NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
        DO \$\$ BEGIN CREATE ROLE pb_up_emitter NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
        REVOKE EXECUTE ON FUNCTION postbox.enqueue(text, text, text, jsonb, jsonb, text) FROM PUBLIC;
        GRANT EXECUTE ON FUNCTION postbox.enqueue(text, text, text, jsonb, jsonb, text) TO pb_up_writer;
        GRANT EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text) TO pb_up_emitter"
setup_queue '#'
psql_q "SELECT postbox.enqueue('order', 'before', 'created.v1', jsonb_build_object('seq', k)) FROM generate_series(1, 3) k" >/dev/null
# a failed event waiting for its retry, as version 14 set it aside
psql_q "UPDATE postbox.outbox SET waiting = true, attempts = 1, next_attempt_at = now() + interval '1 hour' WHERE id = 1"

# the producer: one session, one enqueue every 10 ms while the upgrade runs
for ((k = 1; k <= 300; k++)); do
    echo "SELECT postbox.enqueue('order', 'during', 'created.v1', jsonb_build_object('seq', $k), '{}', NULL);"
    echo "SELECT pg_sleep(0.01);"
done >"$PB_TMP/producer.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/producer.sql" >/dev/null 2>"$PB_TMP/producer.err" &
producer=$!
PB_PIDS+=("$producer")
# the relay of version 14: its claim statement, prepared before the upgrade, executed after it
coproc RELAY_SESSION { psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" 2>&1; }
claim14="PREPARE pb_claim(int, int, int[], int8multirange) AS SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination, created_at_us, attempts, parked, sequence FROM postbox.claim(\$1, \$2, \$3, \$4);"
session() { # SQL: runs it in the relay's session, prints its one-line answer
    echo "$1;" >&"${RELAY_SESSION[1]}"
    echo "SELECT 'end-of-answer';" >&"${RELAY_SESSION[1]}"
    local line out=
    while read -r -t 20 line <&"${RELAY_SESSION[0]}"; do
        [[ $line == end-of-answer ]] && break
        out+="$line "
    done
    echo "$out"
}
session "$claim14" >/dev/null
before=$(session "SELECT count(*) FROM pg_prepared_statements WHERE name = 'pb_claim'")
[[ $before == "1 " ]] || fail "the relay session did not prepare its claim: $before"
got=$(session "CREATE TEMP TABLE c14 AS EXECUTE pb_claim(10, 1, '{0}', '{}'); SELECT count(*) FROM c14; DROP TABLE c14;")
say "claim of version 14 before the upgrade: ${got}rows"
sleep 0.5
out=$("$POSTBOX_BIN" init 2>&1) || fail "postbox init (upgrade) failed: $out"
say "upgrade: $(tail -1 <<<"$out")"
# numbers may have gaps (each branch is given its own): the latest is the highest, and the
# migrations applied are those numbered above 15
mapfile -t versions < <(ls "$POSTBOX_SOURCE_DIR"/sql/[0-9][0-9][0-9]_*.sql | sed 's|.*/0*\([0-9]*\)_.*|\1|')
latest=${versions[${#versions[@]} - 1]}
after15=0
for v in "${versions[@]}"; do ((v > 15)) && after15=$((after15 + 1)); done
[[ $out == *"version $latest (applied $after15 migration"* ]] ||
    fail "init did not apply version 16 and those after it ($after15 in all): $out"
got=$(session "CREATE TEMP TABLE c14 AS EXECUTE pb_claim(10, 1, '{0}', '{}'); SELECT count(*) FROM c14; DROP TABLE c14;")
[[ $got =~ ^[0-9]+\ $ ]] || fail "the claim statement of version 14 failed after the upgrade: $got"
say "claim of version 14 after the upgrade: ${got}rows"
wait "$producer" || fail "the producer failed during the upgrade: $(cat "$PB_TMP/producer.err")"
n=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE aggregate_id = 'during'")
((n == 300)) || fail "the producer's 300 events during the upgrade: $n in the outbox"
say "a producer's 300 calls across the upgrade all committed"
echo '\q' >&"${RELAY_SESSION[1]}"

# who may execute what
priv() { psql_q "SELECT has_function_privilege('$1', '$2', 'EXECUTE')"; }
enq=postbox.enqueue\(text,text,text,jsonb,jsonb,text,timestamptz,timestamptz\)
emit=postbox.emit\(text,text,text,jsonb,jsonb,text,text,timestamptz,timestamptz\)
[[ $(priv pb_up_writer "$enq") == t ]] || fail "pb_up_writer lost EXECUTE on postbox.enqueue"
[[ $(priv pb_up_emitter "$enq") == f ]] || fail "pb_up_emitter gained EXECUTE on postbox.enqueue"
[[ $(priv pb_up_emitter "$emit") == t ]] || fail "pb_up_emitter lost EXECUTE on postbox.emit"
[[ $(priv pb_up_writer "$emit") == f ]] || fail "pb_up_writer gained EXECUTE on postbox.emit"
[[ $(psql_q "SELECT count(*) FROM pg_proc WHERE proname IN ('enqueue', 'emit') AND pronamespace = 'postbox'::regnamespace") == 2 ]] ||
    fail "the old postbox.enqueue or postbox.emit is still there"
say "EXECUTE carried over: pb_up_writer on enqueue, pb_up_emitter on emit, and no more"

# every old call still works, and the new arguments
psql_q "SELECT postbox.enqueue('order', 'after', 'created.v1', '{\"seq\": 1}');
        SELECT postbox.enqueue('order', 'after', 'created.v1', '{\"seq\": 2}', '{\"h\": 1}');
        SELECT postbox.enqueue('order', 'after', 'created.v1', '{\"seq\": 3}', '{}', 'key.3');
        SELECT postbox.enqueue('order', 'after', 'created.v1', '{\"seq\": 4}', p_expires_at => now() + interval '1 hour');
        SELECT postbox.emit('order', 'e', 'created.v1', '{}');
        SELECT postbox.emit('order', 'e', 'created.v1', '{}', '{}', NULL, 'postbox');
        SELECT postbox.emit('order', 'e', 'created.v1', '{}', p_available_at => now())" >/dev/null ||
    fail "a call of postbox.enqueue or postbox.emit failed after the upgrade"

# everything is published: the retry and the events parked behind it made due
psql_q "UPDATE postbox.outbox SET next_attempt_at = now() WHERE waiting"
total=$(psql_q "SELECT count(*) FROM postbox.outbox")
relay_drain 60
drain_exactly_once "$PB_TMP/got" "$total" 60
say "the $total events written before, during and after the upgrade were published"
