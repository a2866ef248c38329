#!/usr/bin/env bash
# postbox demo on RabbitMQ, short: exit 0, and a summary whose figures hold (600 orders
# committed, published and applied once each, in order, after 3 relay and 3 consumer SIGKILLs),
# checked again against the database. Bad options exit 2 with a message.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/demo_lib.sh"

for bad in "--broker mqtt" "--orders 0" "--duration 0" "--chaos relay" "--database Bad-Name" "--nonsense"; do
    rc=0
    # shellcheck disable=SC2086
    msg=$("$POSTBOX_BIN" demo $bad 2>&1) || rc=$?
    ((rc == 2)) || fail "postbox demo $bad exited with $rc, expected 2"
    [[ $msg == *"postbox demo: "* ]] || fail "postbox demo $bad: no message naming the problem ($msg)"
done
run_demo amqp
