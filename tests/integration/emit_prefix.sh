#!/usr/bin/env bash
# postbox.emit writes under postbox's own prefix only (sql/014_emit_prefix.sql). It runs as the
# schema owner (SECURITY DEFINER) and used to take any prefix from its caller: a role allowed to
# emit could write, as the owner, messages that whatever else decodes this database's logical
# messages would take for its own, or postbox's drain markers.
# 1. Another prefix, the drain markers' one, NULL and a too long one are refused with an error
#    naming the prefix, and write nothing.
# 2. 'postbox' and 'postbox.NAME' are written: a cdc relay with cdc.message_prefix =
#    postbox.orders publishes the events emitted under it (stdout sink), and nothing else.
source "$(dirname "$0")/lib.sh"

pb_init
cdc_use_slot
cdc_create_slot --set relay.sink=stdout --set cdc.message_prefix=postbox.orders

emit_as() { # PREFIX_SQL: postbox.emit with that p_prefix; prints psql's output and error text
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" \
        -c "SELECT postbox.emit('order', 'p-1', 'prefixed.v1', '{\"n\": 1}', '{}', NULL, $1)" 2>&1
}

# 1. refused, with a clear error
for prefix in "'other_app'" "'postbox-drain'" "'postbox.'" "'postbox.a b'" "NULL" "'postbox.$(printf 'x%.0s' {1..60})'"; do
    if out=$(emit_as "$prefix"); then
        fail "postbox.emit wrote a message under prefix $prefix: $out"
    fi
    grep -q "is not postbox's own" <<<"$out" || fail "unclear error for prefix $prefix: $out"
done
say "another prefix is refused: $(head -1 <<<"$out")"

# 2. postbox's own prefixes are written; the relay of postbox.orders publishes its event only
emit_as "'postbox'" >/dev/null || fail "postbox.emit refused prefix 'postbox'"
id=$(emit_as "'postbox.orders'") || fail "postbox.emit refused prefix 'postbox.orders': $id"
relay_drain 60 --capture cdc --set relay.sink=stdout --set cdc.message_prefix=postbox.orders
n=$(grep -c . "$PB_RELAY_OUT" || true)
((n == 1)) || fail "expected the one postbox.orders event on stdout, got $n line(s): $(cat "$PB_RELAY_OUT")"
grep -q "$id" "$PB_RELAY_OUT" || fail "the postbox.orders event $id is not on stdout"
say "postbox.emit under postbox.orders was relayed by the relay of that prefix"
