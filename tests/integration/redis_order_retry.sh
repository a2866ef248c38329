#!/usr/bin/env bash
# Consumer order through handler failures, with Redis Streams: see order_retry_lib.sh. The claim
# idle time (1 s) is shorter than the retries (2 s and 4 s of backoff), and a "ghost" consumer of
# the group (redis-cli) calls XAUTOCLAIM with that idle time every 200 ms meanwhile: the entries
# the consumer holds must be kept from being claimed (XCLAIM ... JUSTID), or the ghost takes them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"
STREAM=pb:$PB_TEST:order GROUP=postbox_order-retry
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_REDIS_STREAMS=$STREAM POSTBOX_REDIS_CLAIM_IDLE=1s
GHOST_LOG=$PB_TMP/ghost.log
ghost() {
    while sleep 0.2; do
        redis_cli --raw XAUTOCLAIM "$STREAM" "$GROUP" ghost 1000 0-0 COUNT 100 JUSTID 2>&1 |
            grep -E '^[0-9]+-[0-9]+$' | grep -v '^0-0$' >>"$GHOST_LOG" || true
    done
}
# order_retry_lib.sh starts the consumer (which creates the group): the ghost starts with it
eval "$(declare -f start_consumer | sed '1s/start_consumer/first_consumer/')"
start_consumer() {
    first_consumer "$@"
    : >"$GHOST_LOG"
    ghost &
    PB_PIDS+=($!)
}
source "$(dirname "$0")/order_retry_lib.sh"
claimed=$(sort -u "$GHOST_LOG" | wc -l)
say "entries the ghost consumer could claim while they were held: $claimed"
((claimed == 0)) || fail "$claimed held entries were idle for 1 s and claimed by another consumer: $(sort -u "$GHOST_LOG" | head -3 | tr '\n' ' ')"
