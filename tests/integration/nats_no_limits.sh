#!/usr/bin/env bash
# JetStream configuration refused at start with a clear message (and a non-zero exit):
#   1. a stream without any limit (max_age, max_msgs, max_bytes all 0): refused by the relay and
#      by the consumer, and not created; accepted with nats.allow_unlimited = true;
#   2. an existing stream without limits and nats.stream_create = false: refused; with
#      stream_create it is updated to the configured limit;
#   3. a subject template the stream does not store: refused;
#   4. core NATS (a nats-server without JetStream): refused (at-most-once).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

pb_init
enqueue_seq 3 1 10
export POSTBOX_CONSUME_HANDLER='SELECT 1'

# expect_refusal WHAT PATTERN CMD...: CMD must exit non-zero within 30 s, its output matching PATTERN
expect_refusal() {
    local what=$1 pattern=$2 out rc=0
    shift 2
    out=$(timeout 30 "$@" 2>&1) || rc=$?
    ((rc != 0 && rc != 124)) || { printf '%s\n' "$out" | tail -n 5 >&2; fail "$what: expected a refusal, exit status $rc"; }
    grep -qE "$pattern" <<<"$out" || { printf '%s\n' "$out" | tail -n 5 >&2; fail "$what: the message does not match /$pattern/"; }
    say "$what: refused (exit $rc): $(grep -E "$pattern" <<<"$out" | head -1 | sed 's/^.*error *//' | cut -c1-220)"
}
expect_ok() { # WHAT CMD...
    local what=$1 out rc=0
    shift
    out=$(timeout 60 "$@" 2>&1) || rc=$?
    ((rc == 0)) || { printf '%s\n' "$out" | tail -n 8 >&2; fail "$what: exit status $rc"; }
    LAST_OUT=$out
    say "$what: accepted"
}

# 1. no limit at all
export POSTBOX_NATS_MAX_AGE=0
no_limit='stream "'$POSTBOX_NATS_STREAM'" has no limit \(max_age, max_msgs or max_bytes\)'
expect_refusal "relay, stream without limits" "$no_limit" "$POSTBOX_BIN" relay --drain
expect_refusal "consume, stream without limits" "$no_limit" "$POSTBOX_BIN" consume --drain
if nats_tool count "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" >/dev/null 2>&1; then
    fail "the stream was created although it was refused"
fi
expect_ok "relay with nats.allow_unlimited = true" "$POSTBOX_BIN" --set nats.allow_unlimited=true relay --drain
grep -q 'grows without bound' <<<"$LAST_OUT" || fail "no warning about the unlimited stream"
info=$(stream_info)
[[ $info == *"max_age_ms=0 max_msgs=-1 max_bytes=-1"* && $info == *"messages=30 "* ]] ||
    fail "unexpected stream after the accepted run: $info"

# 2. the existing unlimited stream
expect_refusal "relay, existing stream without limits, stream_create = false" "$no_limit" \
    "$POSTBOX_BIN" --set nats.stream_create=false relay --drain
export POSTBOX_NATS_MAX_MSGS=1000000
expect_ok "relay with nats.max_msgs = 1000000 (stream updated)" "$POSTBOX_BIN" relay --drain
grep -q 'updated stream' <<<"$LAST_OUT" || fail "the stream was not reported as updated"
[[ $(stream_info) == *"max_msgs=1000000 "* ]] || fail "stream not updated: $(stream_info)"
expect_ok "consume with the limited stream" "$POSTBOX_BIN" consume --drain
unset POSTBOX_NATS_MAX_MSGS POSTBOX_NATS_MAX_AGE

# 3. subjects the stream does not store
expect_refusal "relay, subject outside the stream" 'is not stored by stream' \
    "$POSTBOX_BIN" --set nats.subject_prefix=elsewhere. --set nats.stream_subjects="pb.$PB_TEST.>" relay --drain

# 4. core NATS: a server of our own without -js
port=$((POSTBOX_NATS_PORT + 111))
nats-server -a 127.0.0.1 -p "$port" >"$PB_TMP/core-nats.log" 2>&1 &
PB_PIDS+=($!)
wait_until "(exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null" 10 || fail "nats-server without jetstream did not start on port $port"
expect_refusal "relay, core NATS without jetstream" 'jetstream is not enabled' \
    "$POSTBOX_BIN" --set nats.url="nats://127.0.0.1:$port" relay --drain
expect_refusal "consume, core NATS without jetstream" 'jetstream is not enabled' \
    "$POSTBOX_BIN" --set nats.url="nats://127.0.0.1:$port" consume --drain
