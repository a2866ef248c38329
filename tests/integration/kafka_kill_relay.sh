#!/usr/bin/env bash
# kill_relay.sh with Kafka: 20,000 events over 100 aggregates, the relay SIGKILLed 5 times; every
# committed event is in the topic (read back by kafka-tool, a plain librdkafka consumer), each
# aggregate in order.
PB_TEST_NAME=kafka_kill_relay PB_KILL_BROKER=kafka exec bash "$(dirname "$0")/kill_relay.sh"
