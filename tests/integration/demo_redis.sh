#!/usr/bin/env bash
# postbox demo on Redis Streams, short: as demo_amqp (600 orders, 3 relay and 3 consumer
# SIGKILLs, every order applied exactly once and in order); the demo's stream is
# pb_demo_redis:orders on the shared redis-server, deleted at its start.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/demo_lib.sh"
[[ $(services status 2>&1) =~ (^|$'\n')redis\ +running ]] ||
    fail "redis-server is not running (scripts/services start redis)"
run_demo redis
