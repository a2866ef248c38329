#!/usr/bin/env bash
# Consumer order through handler failures, with RabbitMQ: see order_retry_lib.sh.
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
setup_queue '#'
source "$(dirname "$0")/order_retry_lib.sh"
