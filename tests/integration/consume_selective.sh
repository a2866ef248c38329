#!/usr/bin/env bash
# A consumer whose RabbitMQ queue is bound to one event type (amqp.bindings = order.paid.v1):
# see selective_lib.sh. A second queue takes every event, so that the created ones are
# routable.
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
setup_queue none
ALL_QUEUE=pb.$PB_TEST.all
amqp_tool delete "$POSTBOX_AMQP_URL" "$ALL_QUEUE" || fail "amqp-tool delete $ALL_QUEUE failed"
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$ALL_QUEUE" '#' || fail "amqp-tool setup failed"
on_exit 'amqp_tool delete "$POSTBOX_AMQP_URL" "$ALL_QUEUE"'
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_AMQP_BINDINGS=order.paid.v1
source "$(dirname "$0")/selective_lib.sh"
