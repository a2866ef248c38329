#!/usr/bin/env bash
# relay.batch_bytes bounds a batch by its payload bytes: 200 events of 50 kB over 10 aggregates
# with batch_bytes = 120 kB (batch_size 500). The poll capture's first claim asks for 64 events,
# every later one for two (120 kB at 50 kB an event); the cdc capture closes a batch at the
# event that reaches 120 kB (three). Every event arrives once, each aggregate in order; the
# relay's postbox_batch_size histogram shows the batch sizes.
source "$(dirname "$0")/lib.sh"

N_AGG=10 PER_AGG=20 PAD=50000
TOTAL=$((N_AGG * PER_AGG))
PORT=$(free_port)
pb_init
setup_queue '#'

# batches of at most LE events, by the histogram; at most ALLOW_OVER larger ones
check_batches() { # WHAT LE ALLOW_OVER
    local m count small
    m=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics") || fail "$1: no metrics"
    count=$(awk '/^postbox_batch_size_count/ { print $NF }' <<<"$m")
    small=$(awk -v le="$2" '$0 ~ "^postbox_batch_size_bucket\\{le=\"" le "\"\\}" { print $NF }' <<<"$m")
    [[ -n $count && -n $small ]] || fail "$1: postbox_batch_size not found in the metrics"
    say "$1: $count batches, $small of them of at most $2 events"
    ((count - small <= $3)) || fail "$1: $((count - small)) batches of more than $2 events (at most $3 expected)"
    ((count >= TOTAL / 3)) || fail "$1: only $count batches for $TOTAL events"
}

run() { # WHAT LE ALLOW_OVER [relay args...]
    local what=$1 le=$2 over=$3
    shift 3
    wait_until '(($(queue_count) >= TOTAL))' 120 || fail "$what: $(queue_count) of $TOTAL events arrived"
    check_batches "$what" "$le" "$over"
    stop_relay
    ((RELAY_RC == 0)) || fail "$what: the relay exited with $RELAY_RC"
    drain_exactly_once "$PB_TMP/got.$what" "$TOTAL" 120
}

# poll: the first claim overshoots once (64 events), then two at a time
enqueue_seq $N_AGG 1 $PER_AGG $PAD
start_relay --set relay.batch_bytes=120kB --set relay.batch_size=500 --set "metrics.listen=127.0.0.1:$PORT"
run poll 5 1

# cdc: never more than three
psql_q "TRUNCATE postbox.outbox, postbox.outbox_published"
cdc_use_slot
cdc_create_slot
enqueue_seq $N_AGG 1 $PER_AGG $PAD
start_cdc_relay --set relay.batch_bytes=120kB --set relay.batch_size=500 --set "metrics.listen=127.0.0.1:$PORT"
run cdc 5 0
say "ok"
