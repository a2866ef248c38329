#!/usr/bin/env bash
# Upgrading to signed postbox.emit messages (schema version 7) loses nothing: an event emitted by
# the unsigned postbox.emit of version 6 and still in the slot when the schema is upgraded is
# published by the new relay, as is one emitted after the upgrade; an unsigned message written
# after the upgrade is rejected.
source "$(dirname "$0")/lib.sh"

# the schema as `postbox init` of version 6 left it
files=()
for v in 001 002 003 004 005 006; do files+=(-f "$(ls "$POSTBOX_SOURCE_DIR"/sql/${v}_*.sql)"); done
psql -XAtq -v ON_ERROR_STOP=1 -1 -d "$POSTBOX_PG_DSN" -c "SET client_min_messages = warning" \
    -c "CREATE SCHEMA postbox" \
    -c "CREATE TABLE postbox.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())" \
    "${files[@]}" \
    -c "INSERT INTO postbox.schema_migrations (version, name) SELECT v, 'v' || v FROM generate_series(1, 6) v" >/dev/null ||
    fail "cannot build the version 6 schema"
setup_queue '#'
cdc_use_slot
psql_q "CREATE PUBLICATION postbox_outbox FOR TABLE postbox.outbox WITH (publish = 'insert');
        SELECT pg_create_logical_replication_slot('$POSTBOX_CDC_SLOT', 'pgoutput')" >/dev/null
psql_q "SELECT postbox.emit('order', 'before', 'upgrade.v1', '{\"n\": 1}')" >/dev/null
out=$("$POSTBOX_BIN" init 2>&1) || fail "postbox init (upgrade) failed: $out"
say "upgrade: $(tail -1 <<<"$out")"
[[ $out != *"(applied 0 migrations)"* ]] || fail "init applied nothing: $out"
psql_q "SELECT postbox.emit('order', 'after', 'upgrade.v1', '{\"n\": 2}')" >/dev/null
psql_q "SELECT pg_logical_emit_message(true, 'postbox', '{\"event_id\": \"00000000-0000-4000-8000-0000000000aa\", \"aggregate_type\": \"order\", \"aggregate_id\": \"forged\", \"event_type\": \"upgrade.v1\", \"payload\": {}}')" >/dev/null

relay_drain 60 --capture cdc
drain_queue "$PB_TMP/got" 2 1000 30
got=$(cut -f5 "$PB_TMP/got" | tr '\n' ' ')
say "published: $got"
[[ $got == 'before after ' ]] || fail "expected the events emitted before and after the upgrade, got: $(cat "$PB_TMP/got")"
rejected=$(grep -c 'rejected a "postbox" message' "$PB_RELAY_LOG" || true)
((rejected == 1)) || fail "expected the unsigned message written after the upgrade rejected, $rejected rejections logged"
say "ok: the unsigned event of version 6 was published, the unsigned message after the upgrade rejected"
