#!/usr/bin/env bash
# postbox demo on Kafka (librdkafka's mock cluster from scripts/services), short: as demo_amqp
# (600 orders, 3 relay and 3 consumer SIGKILLs, every order applied exactly once and in order);
# each run has a topic and a consumer group of its own.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/demo_lib.sh"
[[ $(services status 2>&1) =~ (^|$'\n')kafka\ +running ]] ||
    fail "the kafka mock cluster is not running (scripts/services start kafka)"
run_demo kafka
