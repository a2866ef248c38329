#!/usr/bin/env bash
# Part 1 of cdc_kill.sh (SIGKILLs of the cdc relay; the slot never runs ahead of the broker)
# with the NATS JetStream sink, whose asynchronous publish lets the relay read ahead.
PB_CDC_BROKER=nats PB_TEST_NAME=cdc_kill_nats exec bash "$(dirname "$0")/cdc_kill.sh"
