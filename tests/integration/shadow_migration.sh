#!/usr/bin/env bash
# Seed 001's zero-downtime migration, as the README walks it: a legacy publisher (a python3-pika
# script) and postbox publish the same business changes; postbox's copies go only to a shadow
# destination (relay.shadow, mode only), so the consumers still get the legacy events alone;
# `postbox shadow compare` reads both comparison queues without consuming them and reports
# exactly the one event that differs on purpose (exit 1, also as --json); after the fix the next
# changes compare equal (exit 0). Switch-over (the rule removed) and back-out (the rule back)
# are configuration alone. Bad arguments and an unreachable broker are exit 2.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"
LEGACY_EX=pb.$PB_TEST.legacy
LEGACY_Q=pb.$PB_TEST.legacy.compare # beside the legacy consumers' queues, read by compare only
SHADOW_Q=pb.$PB_TEST.shadow         # postbox's shadow copies
CONSUMERS_Q=$PB_QUEUE               # what the consumers read from postbox's normal destination
RULE='order.# only shadow.{event_type}'
pb_init
setup_queue 'order.#'
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$SHADOW_Q" 'shadow.#' || fail "setup $SHADOW_Q"
amqp_tool setup "$POSTBOX_AMQP_URL" "$LEGACY_EX" "$LEGACY_Q" '#' || fail "setup $LEGACY_Q"
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $SHADOW_Q; amqp_tool delete $POSTBOX_AMQP_URL $LEGACY_Q; amqp_tool delete-exchange $POSTBOX_AMQP_URL $LEGACY_EX"

# The business side: an order becoming paid writes its event in the same transaction. The
# trigger has a bug on purpose: order 3's total is one unit off.
psql_q "CREATE TABLE orders (id int PRIMARY KEY, total_cents int NOT NULL, status text NOT NULL);
        CREATE FUNCTION order_paid() RETURNS trigger LANGUAGE plpgsql AS \$\$
        BEGIN
          PERFORM postbox.enqueue('order', NEW.id::text, 'order.paid.v1',
                    jsonb_build_object('order_id', NEW.id, 'status', NEW.status,
                                       'total_cents', NEW.total_cents + CASE WHEN NEW.id = 3 THEN 100 ELSE 0 END));
          RETURN NEW;
        END \$\$;
        CREATE TRIGGER order_paid AFTER UPDATE OF status ON orders FOR EACH ROW
          WHEN (NEW.status = 'paid' AND OLD.status <> 'paid') EXECUTE FUNCTION order_paid();" >/dev/null

# legacy_publish FROM TO: the legacy publisher's events for the orders paid in FROM..TO
legacy_publish() {
    psql_q "SELECT id, total_cents, status FROM orders WHERE id BETWEEN $1 AND $2 ORDER BY id" |
        /usr/bin/python3 -c '
import json, sys, uuid, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.confirm_delivery()
for line in sys.stdin:
    oid, total, status = line.strip().split("|")
    body = json.dumps({"order_id": int(oid), "total_cents": int(total), "status": status})
    ch.basic_publish(sys.argv[2], "order.paid", body, pika.BasicProperties(
        message_id=str(uuid.uuid4()), type="OrderPaid", delivery_mode=2,
        content_type="application/json"), mandatory=True)
conn.close()' "$POSTBOX_AMQP_URL" "$LEGACY_EX" || fail "the legacy publisher failed"
}
# pay FROM TO: orders FROM..TO created and paid (one transaction each)
pay() {
    local i
    for ((i = $1; i <= $2; i++)); do
        psql_q "INSERT INTO orders VALUES ($i, $((i * 1000)), 'created');
                UPDATE orders SET status = 'paid' WHERE id = $i" >/dev/null
    done
}
count() { amqp_tool count "$POSTBOX_AMQP_URL" "$1"; }
compare() { "$POSTBOX_BIN" shadow compare --legacy "amqp:$LEGACY_Q" --ours "amqp:$SHADOW_Q" --key /order_id --fields /total_cents,/status "$@"; }

say "shadow: postbox's copies go only to the shadow destination, marked"
pay 1 5
legacy_publish 1 5
relay_drain 60 --set "relay.shadow=$RULE"
[[ $(published_count) == 5 ]] || fail "published $(published_count) of 5"
[[ $(count "$CONSUMERS_Q") == 0 ]] || fail "mode only: the normal destination got $(count "$CONSUMERS_Q") message(s)"
[[ $(count "$SHADOW_Q") == 5 ]] || fail "the shadow queue holds $(count "$SHADOW_Q"), expected 5"
marks=$(/usr/bin/python3 - "$POSTBOX_AMQP_URL" "$SHADOW_Q" <<'PY'
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
marks = []
for _ in range(5):
    method, props, body = ch.basic_get(sys.argv[2], auto_ack=False)
    marks.append((props.headers or {}).get('postbox-shadow', '-'))
conn.close()  # unacknowledged: requeued
print(' '.join(marks))
PY
)
[[ $marks == "true true true true true" ]] || fail "shadow copies marked '$marks'"

say "compare reports exactly the event that differs, and consumes nothing"
rc=0
out=$(compare) || rc=$?
printf '%s\n' "$out"
want='differs   3: /total_cents legacy 3000, ours 3100
summary: legacy 5, ours 5, equal 4, missing 0, extra 0, differing 1, unkeyed 0 (duplicates not compared: legacy 0, ours 0): different'
[[ $out == "$want" ]] || fail "compare printed:
$out
expected:
$want"
((rc == 1)) || fail "compare exited $rc with a difference (expected 1)"
[[ $(count "$LEGACY_Q") == 5 && $(count "$SHADOW_Q") == 5 ]] ||
    fail "compare took messages away: legacy $(count "$LEGACY_Q"), shadow $(count "$SHADOW_Q")"
rc=0
json=$(compare --json) || rc=$?
((rc == 1)) || fail "compare --json exited $rc"
/usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1])
d = r["differences"]
assert r["same"] is False and r["differing"] == 1 and r["missing"] == 0 and r["extra"] == 0, r
assert len(d) == 1 and d[0]["kind"] == "differs" and d[0]["key"] == "3", d
assert d[0]["fields"] == [{"field": "/total_cents", "legacy": 3000, "ours": 3100}], d
' "$json" || fail "compare --json: $json"

say "a missing legacy event and an extra one are reported too (header key)"
rc=0
out=$("$POSTBOX_BIN" shadow compare --legacy "amqp:$LEGACY_Q" --ours "amqp:$SHADOW_Q" \
    --legacy-key header:message_id --ours-key header:message_id) || rc=$?
((rc == 1)) || fail "compare by message_id exited $rc"
[[ $(grep -c '^missing ' <<<"$out") == 5 && $(grep -c '^extra ' <<<"$out") == 5 ]] ||
    fail "by message_id (different on each side) every event is missing and extra: $out"

say "the fix: the trigger is corrected; the next window of changes compares equal"
psql_q "CREATE OR REPLACE FUNCTION order_paid() RETURNS trigger LANGUAGE plpgsql AS \$\$
        BEGIN
          PERFORM postbox.enqueue('order', NEW.id::text, 'order.paid.v1',
                    jsonb_build_object('order_id', NEW.id, 'status', NEW.status, 'total_cents', NEW.total_cents));
          RETURN NEW;
        END \$\$" >/dev/null
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$SHADOW_Q" 'shadow.#' || fail "purge $SHADOW_Q"
amqp_tool setup "$POSTBOX_AMQP_URL" "$LEGACY_EX" "$LEGACY_Q" '#' || fail "purge $LEGACY_Q"
pay 6 9
legacy_publish 6 9
relay_drain 60 --set "relay.shadow=$RULE"
rc=0
out=$(compare) || rc=$?
printf '%s\n' "$out"
((rc == 0)) || fail "compare after the fix exited $rc: $out"
[[ $out == "summary: legacy 4, ours 4, equal 4, missing 0, extra 0, differing 0, unkeyed 0"* ]] || fail "compare: $out"

say "switch-over: the legacy publisher stops, the rule goes; consumers get postbox's events"
pay 10 11
relay_drain 60 # no relay.shadow
[[ $(count "$CONSUMERS_Q") == 2 ]] || fail "after switch-over the consumers got $(count "$CONSUMERS_Q"), expected 2"
[[ $(count "$SHADOW_Q") == 4 ]] || fail "after switch-over the shadow queue changed: $(count "$SHADOW_Q")"

say "back-out: the rule back, the legacy publisher on; consumers get the legacy events again"
pay 12 12
legacy_publish 12 12
relay_drain 60 --set "relay.shadow=$RULE"
[[ $(count "$CONSUMERS_Q") == 2 ]] || fail "after back-out postbox still reached the consumers: $(count "$CONSUMERS_Q")"
[[ $(count "$SHADOW_Q") == 5 && $(count "$LEGACY_Q") == 5 ]] ||
    fail "after back-out: shadow $(count "$SHADOW_Q"), legacy $(count "$LEGACY_Q") (expected 5 and 5)"

say "bad input: exit 2 with a clear error"
expect_error() { # WANT ARGS...: postbox ARGS exits 2 and says WANT
    local want=$1 rc=0 o
    shift
    o=$("$POSTBOX_BIN" "$@" 2>&1) || rc=$?
    ((rc == 2)) || fail "postbox $* exited $rc (expected 2): $o"
    grep -qF -- "$want" <<<"$o" || fail "postbox $*: no clear error ('$want'): $o"
}
expect_error 'relay.shadow rule "order.# sometimes x": mode "sometimes"' --set 'relay.shadow=order.# sometimes x' relay --drain
expect_error '--key "order_id": expected body, a JSON pointer' shadow compare --legacy "amqp:$LEGACY_Q" --ours "amqp:$SHADOW_Q" --key order_id
expect_error '--legacy "rabbit:q": expected amqp:QUEUE' shadow compare --legacy rabbit:q --ours "amqp:$SHADOW_Q" --key /order_id
expect_error 'NOT_FOUND' shadow compare --legacy "amqp:pb.$PB_TEST.nosuch" --ours "amqp:$SHADOW_Q" --key /order_id
expect_error '127.0.0.1:1' --set amqp.url=amqp://guest:guest@127.0.0.1:1/ shadow compare --legacy "amqp:$LEGACY_Q" --ours "amqp:$SHADOW_Q" --key /order_id
say "PASS"
