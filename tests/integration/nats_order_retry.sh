#!/usr/bin/env bash
# Consumer order through handler failures, with NATS JetStream: see order_retry_lib.sh. The ack
# wait is shorter than the retries (1 s against 3 s and more), so the held messages must be kept
# alive at the server ("in progress") or they would come again behind the consumer's back.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"
export POSTBOX_NATS_ACK_WAIT=1s
source "$(dirname "$0")/order_retry_lib.sh"
redelivered=$(grep -c 'duplicate message' "$CONSUMER_LOG" || true)
say "duplicates seen by the consumer: $redelivered"
((redelivered == 0)) || fail "$redelivered message(s) came again although the consumer held them"
