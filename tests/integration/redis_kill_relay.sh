#!/usr/bin/env bash
# kill_relay.sh (100,000 events over 100 aggregates, the relay SIGKILLed 5 times) with the Redis
# Streams sink: every committed event is in the streams, read back with redis-cli, each
# aggregate in order, nothing of rolled-back transactions; the duplicates are counted.
PB_KILL_BROKER=redis PB_TEST_NAME=redis_kill_relay exec bash "$(dirname "$0")/kill_relay.sh"
