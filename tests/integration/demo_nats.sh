#!/usr/bin/env bash
# postbox demo on NATS JetStream, short: as demo_amqp (600 orders, 3 relay and 3 consumer
# SIGKILLs, every order applied exactly once and in order).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/demo_lib.sh"
[[ $(services status 2>&1) =~ (^|$'\n')nats\ +running ]] ||
    fail "nats-server is not running (scripts/services start nats)"
run_demo nats
