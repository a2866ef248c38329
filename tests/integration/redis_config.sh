#!/usr/bin/env bash
# The Redis Streams sink's configuration and the server's refusals:
#   1. streams without a length bound (redis.max_len = redis.max_age = 0) are refused at start,
#      and nothing is added; accepted with redis.allow_unlimited = true (with a warning);
#      both bounds at once are refused too;
#   2. a bad URL, rediss:// (no TLS in Debian's hiredis), a missing password file and a password
#      the server refuses stop the relay with a clear error (the password never shown);
#   3. an unreachable server: the relay keeps running and says it waits for the broker;
#   4. a stream key that holds another type: Redis refuses the XADD (WRONGTYPE), the event is
#      dead-lettered with that reason and the other events are published;
#   5. the bound holds: MAXLEN trims the stream (an XTRIM per stream and batch).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

pb_init
enqueue_seq 3 1 10

# expect_refusal WHAT PATTERN CMD...: CMD must exit non-zero within 30 s, its output matching PATTERN
expect_refusal() {
    local what=$1 pattern=$2 out rc=0
    shift 2
    out=$(timeout 30 "$@" 2>&1) || rc=$?
    ((rc != 0 && rc != 124)) || { printf '%s\n' "$out" | tail -n 5 >&2; fail "$what: expected a refusal, exit status $rc"; }
    grep -qE "$pattern" <<<"$out" || { printf '%s\n' "$out" | tail -n 5 >&2; fail "$what: the message does not match /$pattern/"; }
    ! grep -q 's3cret' <<<"$out" || fail "$what: the password appears in the output"
    say "$what: refused (exit $rc): $(grep -E "$pattern" <<<"$out" | head -1 | sed 's/^.*error *//' | cut -c1-200)"
}

# 1. bounds
expect_refusal "relay, streams without a length bound" 'redis streams without a length bound' \
    "$POSTBOX_BIN" --set redis.max_age=0 relay --drain
[[ -z $(redis_streams) ]] || fail "a stream was written although the relay was refused: $(redis_streams)"
expect_refusal "relay, max_len and max_age both set" 'redis.max_len .* and redis.max_age .* are both set' \
    "$POSTBOX_BIN" --set redis.max_len=1000 relay --drain
out=$(timeout 60 "$POSTBOX_BIN" --set redis.max_age=0 --set redis.allow_unlimited=true relay --drain 2>&1) ||
    { printf '%s\n' "$out" | tail -5 >&2; fail "relay with redis.allow_unlimited failed"; }
grep -q 'grow without bound' <<<"$out" || fail "no warning about the unbounded streams"
[[ $(stream_len "pb:$PB_TEST:order") == 30 ]] || fail "expected 30 entries, got $(stream_len "pb:$PB_TEST:order")"
say "relay with redis.allow_unlimited = true: accepted with a warning, 30 entries"

# 2. URLs and credentials
expect_refusal "relay, rediss://" 'TLS \(rediss://\) is not supported' \
    "$POSTBOX_BIN" --set redis.url=rediss://user:s3cret@127.0.0.1:$PB_REDIS_PORT/0 relay --drain
expect_refusal "relay, not a port" 'bad redis url .*the port must be a number' \
    "$POSTBOX_BIN" --set redis.url=redis://:s3cret@127.0.0.1:port/0 relay --drain
expect_refusal "relay, not a database" 'bad redis url .*database number' \
    "$POSTBOX_BIN" --set redis.url=redis://127.0.0.1:$PB_REDIS_PORT/orders relay --drain
expect_refusal "relay, other scheme" 'bad redis url .*the scheme must be redis://' \
    "$POSTBOX_BIN" --set redis.url=http://127.0.0.1:$PB_REDIS_PORT/ relay --drain
expect_refusal "relay, missing password file" 'redis.password_file .*/nonexistent: cannot open' \
    "$POSTBOX_BIN" --set redis.password_file=$PB_TMP/nonexistent relay --drain
# the shared server has no password: AUTH is refused, which no retry can fix
expect_refusal "relay, password the server refuses" 'login refused' \
    "$POSTBOX_BIN" --set redis.url=redis://:s3cret@127.0.0.1:$PB_REDIS_PORT/0 relay --drain
expect_refusal "relay, database out of range" 'SELECT: .*(out of range|invalid)' \
    "$POSTBOX_BIN" --set redis.url=redis://127.0.0.1:$PB_REDIS_PORT/99999 relay --drain

# 3. unreachable: a port nothing listens on (bound and closed again)
dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_relay --set redis.url=redis://127.0.0.1:$dead_port/0
wait_until 'grep -q "waiting for the redis broker" "$PB_RELAY_LOG"' 20 ||
    fail "the relay did not say it waits for the unreachable server"
pid_alive "$RELAY_PID" || fail "the relay gave up on an unreachable server"
say "unreachable server: $(grep 'waiting for the redis broker' "$PB_RELAY_LOG" | tail -1 | sed 's/^.*warn *//' | cut -c1-200)"
stop_relay
((RELAY_RC == 0)) || fail "relay exited with $RELAY_RC on SIGTERM while waiting"

# 4. WRONGTYPE: the stream key of aggregate type "badtype" holds a string
redis_cli SET "pb:$PB_TEST:badtype" "not a stream" >/dev/null
psql_q "SELECT postbox.enqueue('badtype', 'b-1', 'created.v1', '{\"seq\": 1}');
        SELECT postbox.enqueue('order', 'agg-1', 'created.v1', '{\"seq\": 11}')" >/dev/null
relay_drain 60 --set relay.max_attempts=1
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE aggregate_type = 'badtype'")
[[ $reason == *WRONGTYPE* ]] || fail "the refused event's dead letter does not give the server's reason: '$reason'"
[[ $(stream_len "pb:$PB_TEST:order") == 31 ]] || fail "the other event was not published"
say "WRONGTYPE: dead-lettered with \"$reason\"; the other event published"

# 5. MAXLEN, by the XTRIM after each batch (approximate trimming works in whole nodes of 100 entries)
redis_cli DEL "pb:$PB_TEST:order" >/dev/null
enqueue_seq 1 100 1099
relay_drain 60 --set redis.max_age=0 --set redis.max_len=100
len=$(stream_len "pb:$PB_TEST:order")
((len >= 100 && len < 1000)) || fail "MAXLEN ~ 100 left $len of 1000 entries"
say "MAXLEN ~ 100: the stream holds $len of 1000 entries added"
