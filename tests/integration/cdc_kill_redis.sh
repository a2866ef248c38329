#!/usr/bin/env bash
# Part 1 of cdc_kill.sh (SIGKILLs of the cdc relay; the slot never runs ahead of the broker)
# with the Redis Streams sink.
PB_CDC_BROKER=redis PB_TEST_NAME=cdc_kill_redis exec bash "$(dirname "$0")/cdc_kill.sh"
