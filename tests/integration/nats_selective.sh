#!/usr/bin/env bash
# A JetStream consumer with a subject filter (nats.filter_subject = ...order.paid.v1): see
# selective_lib.sh. The stream stores every event.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"
export POSTBOX_NATS_FILTER_SUBJECT=${POSTBOX_NATS_SUBJECT_PREFIX}order.paid.v1
source "$(dirname "$0")/selective_lib.sh"
