#!/usr/bin/env bash
# kafka_kill_relay.sh with the cdc capture (logical replication) instead of polling.
PB_TEST_NAME=kafka_cdc_kill PB_KILL_BROKER=kafka PB_KILL_CAPTURE=cdc exec bash "$(dirname "$0")/kill_relay.sh"
