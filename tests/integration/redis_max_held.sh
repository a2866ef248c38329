#!/usr/bin/env bash
# order_retry_lib.sh with Redis Streams and consume.max_held = 3: agg-0's failing first event
# holds back its aggregate's later entries, of which the consumer keeps only a few; the others are
# given back (requeue) and come again a second later, as often as needed, without their delivery
# count growing (a requeue is no failed delivery: none may be dead-lettered by its count, with
# consume.max_attempts = 5 and agg-0's retries taking 6 s). Every effect once, in order.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_REDIS_STREAMS=pb:$PB_TEST:order POSTBOX_CONSUME_MAX_HELD=3
source "$(dirname "$0")/order_retry_lib.sh"
given_back=$(grep -c 'given back to the broker for later' "$CONSUMER_LOG" || true)
say "batches with entries given back (consume.max_held): $given_back"
((given_back >= 2)) || fail "the consumer never gave entries back at consume.max_held ($given_back)"
