#!/usr/bin/env bash
# cdc_commit_order.sh with transactions streamed while in progress (pgoutput protocol 2): on a
# PostgreSQL of the test's own with logical_decoding_work_mem = 64kB and ~2 kB payloads, the
# larger transactions (40 events, some with a rolled-back savepoint) stream in blocks that
# interleave with each other and with whole ones; all must still arrive whole, in commit order.
PB_CDC_PG_OPTS="-c logical_decoding_work_mem=64kB" PB_CDC_PAD=2000 PB_TEST_NAME=cdc_commit_order_streamed \
    exec bash "$(dirname "$0")/cdc_commit_order.sh"
