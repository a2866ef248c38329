#!/usr/bin/env bash
# RabbitMQ queues are bounded by default, as NATS streams and Redis streams are: postbox consume
# declares its queue with x-message-ttl 7 days (checked with python3-pika, a client that is not
# postbox's: the broker accepts the same arguments and refuses others); a queue without any
# bound is refused unless amqp.allow_unlimited = true; an existing queue without the bound (made
# by an earlier postbox) is refused with the way to keep it. A queue postbox does not declare
# (amqp.queue_declare = false) is probed for a bound argument without being changed: the
# consumer warns at start and postbox check warns when it has none; a quorum queue with a
# dead-letter exchange and x-max-length is found bounded (the probe follows the arguments
# RabbitMQ names before the bound).
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"
unset POSTBOX_AMQP_QUEUE_MESSAGE_TTL POSTBOX_AMQP_ALLOW_UNLIMITED # the defaults
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_HANDLER="SELECT 1"
pb_init
setup_queue none
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $PB_QUEUE"
consume() { timeout 20 "$POSTBOX_BIN" consume --drain 2>&1; }
redeclare() { # ARGS_JSON: queue.declare of the queue with these arguments; prints ok or the refusal
    /usr/bin/python3 - "$POSTBOX_AMQP_URL" "$PB_QUEUE" "$1" <<'PY'
import json, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
try:
    conn.channel().queue_declare(sys.argv[2], durable=True, arguments=json.loads(sys.argv[3]))
    print("ok")
except pika.exceptions.ChannelClosedByBroker as e:
    print(e.reply_code, e.reply_text)
conn.close()
PY
}

say "declared by default with x-message-ttl of 7 days"
out=$(consume) || fail "consume --drain failed: $out"
got=$(redeclare '{"x-queue-type": "classic", "x-message-ttl": 604800000}')
[[ $got == ok ]] || fail "the queue is not declared with x-message-ttl 604800000: $got"
got=$(redeclare '{"x-queue-type": "classic"}')
[[ $got == "406 "*x-message-ttl* ]] || fail "a declaration without the bound was not refused: $got"

say "no bound without amqp.allow_unlimited: refused"
rc=0
out=$(POSTBOX_AMQP_QUEUE_MESSAGE_TTL=0 consume) || rc=$?
((rc != 0)) || fail "an unbounded queue was accepted"
[[ $out == *allow_unlimited* ]] || fail "the refusal does not name amqp.allow_unlimited: $out"

say "an existing queue without the bound: refused, with the way to keep it"
amqp_tool delete "$POSTBOX_AMQP_URL" "$PB_QUEUE" || fail "amqp-tool delete failed"
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" '#' || fail "amqp-tool setup failed"
rc=0
out=$(consume) || rc=$?
((rc != 0)) || fail "a queue without the default bound was taken as it is"
[[ $out == *"queue_message_ttl = 0 and allow_unlimited = true"* ]] || fail "no hint: $out"
out=$(POSTBOX_AMQP_QUEUE_MESSAGE_TTL=0 POSTBOX_AMQP_ALLOW_UNLIMITED=true consume) ||
    fail "the hint does not work: $out"

say "amqp.queue_declare = false: an existing queue without a bound argument is warned about"
check_line() { timeout 60 "$POSTBOX_BIN" "$@" check --consume --all 2>&1 | tee -a "$PB_TMP/check.out" | grep -E '^[A-Za-z]+ +amqp.queue: ' || true; }
declared_false() { POSTBOX_AMQP_QUEUE_DECLARE=false POSTBOX_AMQP_QUEUE_MESSAGE_TTL=0 "$@"; }
out=$(declared_false consume) || fail "consume with amqp.queue_declare = false failed: $out"
[[ $out == *"has no x-message-ttl, x-max-length or x-max-length-bytes argument: unless a policy bounds it"* ]] ||
    fail "no warning about the unbounded queue: $out"
line=$(declared_false check_line)
[[ $line == "WARN amqp.queue: "*"grows without limit"* ]] || { cat "$PB_TMP/check.out" >&2; fail "postbox check: $line"; }
say "check: $line"
out=$(declared_false env POSTBOX_AMQP_ALLOW_UNLIMITED=true "$POSTBOX_BIN" consume --drain 2>&1) ||
    fail "consume with allow_unlimited failed: $out"
[[ $out != *"grows without limit"* ]] || fail "warned although amqp.allow_unlimited = true: $out"

say "amqp.queue_declare = false: a quorum queue with a dead-letter exchange and x-max-length is bounded"
amqp_tool delete "$POSTBOX_AMQP_URL" "$PB_QUEUE" || fail "amqp-tool delete failed"
args='{"x-queue-type": "quorum", "x-dead-letter-exchange": "pb.dlx", "x-single-active-consumer": true, "x-max-length": 1000}'
got=$(redeclare "$args")
[[ $got == ok ]] || fail "could not declare the quorum queue: $got"
out=$(declared_false consume) || fail "consume failed: $out"
[[ $out == *"queue \"$PB_QUEUE\" is bounded: x-max-length 1000"* ]] || fail "the bound was not found: $out"
[[ $out != *"grows without limit"* ]] || fail "warned about a bounded queue: $out"
line=$(declared_false check_line)
[[ $line == "ok"*" amqp.queue: "*"is bounded: x-max-length 1000"* ]] || { cat "$PB_TMP/check.out" >&2; fail "postbox check: $line"; }
say "check: $line"
got=$(redeclare "$args")
[[ $got == ok ]] || fail "the probe changed the queue: $got"
say "PASS"
