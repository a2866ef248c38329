#!/usr/bin/env bash
# postbox check against NATS JetStream, Redis Streams and Kafka (RabbitMQ: check_problems.sh):
# each broker reachable with the configured credentials and its stream bounded, or the problem
# named with exit 1:
#   NATS: a closed port; a stream without limits that postbox does not manage
#   (nats.stream_create = false) and one whose subjects do not hold the relay's; a stream made by
#   a relay with its limits passes;
#   Redis: a refused password (the password never shown); streams without a bound (allowed:
#   a warning); a consumer's stream key holding a string;
#   Kafka: no broker at kafka.brokers; the mock cluster passes, a fixed kafka.topic that does not
#   exist is a warning.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh" # relay.sink = consume.source = nats, the test's stream

pb_init
CHECK_RC=0
# run_check NAME [GLOBAL OPTIONS...]: postbox check (the relay side unless the options say
# --consume after a lone --), output in $PB_TMP/NAME.out
run_check() {
    local name=$1 pre=() post=(--relay)
    shift
    while (($#)) && [[ $1 != -- ]]; do pre+=("$1"); shift; done
    if (($#)); then shift; post=("$@"); fi
    CHECK_RC=0
    timeout 60 "$POSTBOX_BIN" "${pre[@]}" check "${post[@]}" >"$PB_TMP/$name.out" 2>"$PB_TMP/$name.err" ||
        CHECK_RC=$?
    ((CHECK_RC != 124)) || fail "($name) postbox check did not finish within 60 s"
}
expect_line() { # NAME STATUS RC CHECK PATTERN
    local name=$1 status=$2 rc=$3 check=$4 pattern=$5 line
    ((CHECK_RC == rc)) || { cat "$PB_TMP/$name.out" >&2; fail "($name) exit $CHECK_RC, expected $rc"; }
    line=$(grep -E "^$status $check: " "$PB_TMP/$name.out" | head -1)
    [[ -n $line ]] || { cat "$PB_TMP/$name.out" >&2; fail "($name) no $status line of $check"; }
    grep -Eq -- "$pattern" <<<"$line" || fail "($name) the line does not match /$pattern/: $line"
    say "($name) exit $CHECK_RC: $line"
}
expect_healthy() {
    ((CHECK_RC == 0)) || { cat "$PB_TMP/$1.out" >&2; fail "($1) exit $CHECK_RC, expected 0"; }
    say "($1) exit 0: $(tail -1 "$PB_TMP/$1.out")"
}

# ---- NATS -----------------------------------------------------------------------------------------
port=$(free_port)
run_check nats-closed --set nats.url="nats://127.0.0.1:$port"
expect_line nats-closed FAIL 1 nats.connect "127.0.0.1:$port"
# a stream without limits, as an operator might have made it
out=$("$POSTBOX_BIN" --set nats.max_age=0 --set nats.allow_unlimited=true relay --drain 2>&1) ||
    fail "the relay could not make the unlimited stream: $out"
run_check nats-unlimited --set nats.stream_create=false
expect_line nats-unlimited FAIL 1 nats.stream "stream \"$POSTBOX_NATS_STREAM\" has no limit \\(max_age, max_msgs or max_bytes\\)"
run_check nats-subjects --set nats.stream_create=false --set nats.max_age=0 --set nats.allow_unlimited=true \
    --set nats.subject_prefix=elsewhere.
expect_line nats-subjects FAIL 1 nats.subjects 'subject "elsewhere.aggregate.event.v1" .* is not stored by stream'
out=$("$POSTBOX_BIN" relay --drain 2>&1) || fail "the relay could not give the stream its limits: $out"
run_check nats-bounded --set nats.stream_create=false
expect_healthy nats-bounded
grep -q "^WARN\|^FAIL" "$PB_TMP/nats-bounded.out" && fail "(nats-bounded) $(cat "$PB_TMP/nats-bounded.out")"

# ---- Redis ----------------------------------------------------------------------------------------
REDIS=(--set relay.sink=redis --set consume.source=redis --set redis.stream_prefix="pb:$PB_TEST:")
run_check redis-password "${REDIS[@]}" --set redis.url="redis://:S3cretXyz@127.0.0.1:$POSTBOX_REDIS_PORT/0"
expect_line redis-password FAIL 1 redis.connect 'login refused'
! grep -q S3cretXyz "$PB_TMP/redis-password.out" "$PB_TMP/redis-password.err" || fail "(redis-password) the password is shown"
run_check redis-unbounded "${REDIS[@]}" --set redis.max_age=0 --set redis.allow_unlimited=true
expect_line redis-unbounded WARN 0 redis.bound 'redis streams without a bound \(allowed by redis.allow_unlimited\)'
run_check redis-unbounded-refused "${REDIS[@]}" --set redis.max_age=0
expect_line redis-unbounded-refused FAIL 1 sink.config 'redis streams without a length bound'
redis-cli -h 127.0.0.1 -p "$POSTBOX_REDIS_PORT" SET "pb:$PB_TEST:notastream" 1 >/dev/null
run_check redis-wrongtype "${REDIS[@]}" --set redis.streams="pb:$PB_TEST:notastream" \
    --set consume.handler='SELECT 1' -- --consume
expect_line redis-wrongtype FAIL 1 redis.streams "key \"pb:$PB_TEST:notastream\" holds a string, not a stream"
redis-cli -h 127.0.0.1 -p "$POSTBOX_REDIS_PORT" DEL "pb:$PB_TEST:notastream" >/dev/null
run_check redis-healthy "${REDIS[@]}" --set redis.streams="pb:$PB_TEST:order" --set consume.handler='SELECT 1' \
    -- --relay --consume
expect_healthy redis-healthy

# ---- Kafka ----------------------------------------------------------------------------------------
port=$(free_port)
run_check kafka-closed --set relay.sink=kafka --set kafka.brokers="127.0.0.1:$port"
expect_line kafka-closed FAIL 1 kafka.connect "kafka at 127.0.0.1:$port: no broker answered"
if [[ -n ${POSTBOX_KAFKA_BROKERS:-} ]]; then
    run_check kafka-topic --set relay.sink=kafka --set kafka.brokers="$POSTBOX_KAFKA_BROKERS" \
        --set kafka.topic="pb.$PB_TEST.$$.none"
    expect_line kafka-topic WARN 0 kafka.topic "topic \"pb.$PB_TEST.$$.none\" \\(kafka.topic\\) does not exist"
else
    say "(kafka-topic) skipped: the Kafka mock cluster is not running"
fi
