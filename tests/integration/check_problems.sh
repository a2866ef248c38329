#!/usr/bin/env bash
# postbox check finds each problem made on purpose, one at a time, and passes once it is mended;
# the relay and the consumer run as the least-privilege roles of `postbox init --print-grants`:
#   healthy set-up: exit 0 for the relay and the consumer (text and --json, parsed by jq);
#   a dropped index (the hint's statement makes it again), a pending migration (a row of
#   postbox.schema_migrations deleted), a grant revoked from postbox_relay and one from
#   postbox_consumer, the database unreachable, the clock of this host 30 s ahead (faketime),
#   RabbitMQ at a closed port, a refused password, a missing exchange that is not to be declared,
#   a queue declared without the bound the consumer declares (amqp.queue_message_ttl);
#   the start-up checks of the relay and the consumer log a problem as a warning, and they work.
source "$(dirname "$0")/lib.sh"

pb_init
use_least_privilege
setup_queue '#'
HANDLER='SELECT 1'
export POSTBOX_AMQP_QUEUE=$PB_QUEUE

# run_check NAME [GLOBAL OPTIONS...] -- [CHECK OPTIONS...]: postbox check as the relay's role
# unless the options name a --dsn; output in $PB_TMP/NAME.out, exit status in CHECK_RC.
CHECK_RC=0
run_check() {
    local name=$1 pre=() post=()
    shift
    while (($#)) && [[ $1 != -- ]]; do pre+=("$1"); shift; done
    (($#)) && shift
    post=("$@")
    CHECK_RC=0
    timeout 60 "$POSTBOX_BIN" "${pre[@]}" check "${post[@]}" >"$PB_TMP/$name.out" 2>"$PB_TMP/$name.err" ||
        CHECK_RC=$?
    ((CHECK_RC != 124)) || fail "($name) postbox check did not finish within 60 s"
}
relay_check() { local name=$1; shift; run_check "$name" --dsn "$PB_RELAY_DSN" "$@"; }
consumer_check() {
    local name=$1; shift
    run_check "$name" --dsn "$PB_CONSUMER_DSN" --set consume.handler="$HANDLER" "$@"
}

# expect_problem NAME CHECK PATTERN: the run NAME exited 1 with a FAIL line of CHECK matching
# PATTERN, followed by a hint.
expect_problem() {
    local name=$1 check=$2 pattern=$3 line
    ((CHECK_RC == 1)) || { cat "$PB_TMP/$name.out" >&2; fail "($name) exit $CHECK_RC, expected 1"; }
    line=$(grep -E "^FAIL $check: " "$PB_TMP/$name.out" | head -1)
    [[ -n $line ]] || { cat "$PB_TMP/$name.out" >&2; fail "($name) no FAIL line of $check"; }
    grep -Eq -- "$pattern" <<<"$line" || fail "($name) the line does not match /$pattern/: $line"
    grep -A1 -F -- "$line" "$PB_TMP/$name.out" | grep -q '^     hint: ' || fail "($name) no hint after: $line"
    say "($name) exit 1: $line"
}
expect_healthy() {
    local name=$1
    ((CHECK_RC == 0)) || { cat "$PB_TMP/$name.out" >&2; fail "($name) exit $CHECK_RC, expected 0"; }
    ! grep -q '^FAIL' "$PB_TMP/$name.out" || fail "($name) a FAIL line with exit 0"
    say "($name) exit 0: $(tail -1 "$PB_TMP/$name.out")"
}

# ---- healthy -------------------------------------------------------------------------------------
relay_check healthy-relay -- --relay
expect_healthy healthy-relay
! grep -q '^WARN' "$PB_TMP/healthy-relay.out" || fail "(healthy-relay) warnings: $(cat "$PB_TMP/healthy-relay.out")"
relay_check healthy-relay-json -- --relay --json
((CHECK_RC == 0)) || fail "(healthy-relay-json) exit $CHECK_RC"
jq -e '.ok == true and .problems == 0 and .sides == ["relay"]
       and ([.checks[] | select(.status == "ok")] | length) >= 7
       and any(.checks[]; .check == "privileges" and (.message | contains("pb_it_relay")))
       and all(.checks[]; has("check") and has("status") and has("message") and has("hint"))' \
    "$PB_TMP/healthy-relay-json.out" >/dev/null || fail "(healthy-relay-json) unexpected JSON: $(cat "$PB_TMP/healthy-relay-json.out")"
say "(healthy-relay-json) $(jq -c '{ok, problems, warnings, checks: [.checks[].check]}' "$PB_TMP/healthy-relay-json.out")"
# the queue of setup_queue has no bound; the tests accept that (lib.sh): a warning, exit 0
consumer_check healthy-consumer -- --consume
expect_healthy healthy-consumer
grep -q '^WARN amqp.queue: queue "'"$PB_QUEUE"'" has no bound' "$PB_TMP/healthy-consumer.out" ||
    fail "(healthy-consumer) no warning about the unbounded queue: $(cat "$PB_TMP/healthy-consumer.out")"
consumer_check strict-consumer -- --consume --strict
((CHECK_RC == 1)) || fail "(strict-consumer) --strict with a warning: exit $CHECK_RC, expected 1"

# ---- an index dropped; the hint makes it again -------------------------------------------------
psql_q "DROP INDEX postbox.outbox_ready"
relay_check index -- --relay
expect_problem index schema.index 'index postbox.outbox_ready on postbox.outbox is missing'
relay_check index-json -- --relay --json
hint=$(jq -r '.checks[] | select(.check == "schema.index" and .status == "fail") | .hint' "$PB_TMP/index-json.out")
[[ $hint == "CREATE INDEX CONCURRENTLY outbox_ready ON postbox.outbox "* ]] || fail "(index) unexpected hint: $hint"
psql_q "$hint"
relay_check index-mended -- --relay
expect_healthy index-mended

# ---- a pending migration ------------------------------------------------------------------------
latest=$(psql_q "SELECT max(version) FROM postbox.schema_migrations")
row=$(psql_q "SELECT name FROM postbox.schema_migrations WHERE version = $latest")
psql_q "DELETE FROM postbox.schema_migrations WHERE version = $latest"
relay_check migration -- --relay
prev=$(psql_q "SELECT max(version) FROM postbox.schema_migrations") # numbers may have gaps
expect_problem migration schema.version "at version $prev, this postbox needs $latest: 1 migration pending \\($row\\)"
psql_q "INSERT INTO postbox.schema_migrations (version, name) VALUES ($latest, '$row')"

# ---- grants revoked from the group roles --------------------------------------------------------
psql_q "REVOKE DELETE ON postbox.outbox_published FROM postbox_relay"
relay_check grant-relay -- --relay
expect_problem grant-relay privileges 'role "pb_it_relay" lacks DELETE on postbox.outbox_published'
psql_q "GRANT DELETE ON postbox.outbox_published TO postbox_relay"
psql_q "REVOKE SELECT ON postbox.inbox_dead FROM postbox_consumer"
consumer_check grant-consumer -- --consume
expect_problem grant-consumer privileges 'role "pb_it_consumer" lacks SELECT on postbox.inbox_dead'
psql_q "GRANT SELECT ON postbox.inbox_dead TO postbox_consumer"
# the consumer's role is not a relay's
relay_check wrong-role --dsn "$PB_CONSUMER_DSN" -- --relay
expect_problem wrong-role privileges 'role "pb_it_consumer" lacks SELECT, UPDATE, DELETE on postbox.outbox'
relay_check grants-mended -- --relay
expect_healthy grants-mended

# ---- the database unreachable -------------------------------------------------------------------
port=$(free_port)
run_check db-down --dsn "postgresql://postgres@127.0.0.1:$port/$PB_DB" -- --relay
expect_problem db-down postgres.connect 'cannot connect to postgresql'

# ---- this host's clock 30 s ahead of PostgreSQL's ------------------------------------------------
command -v faketime >/dev/null || fail "faketime is not installed (scripts/install-deps installs it)"
CHECK_RC=0
FAKETIME_DONT_FAKE_MONOTONIC=1 ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0 \
    faketime -f '+30s' "$POSTBOX_BIN" --dsn "$PB_RELAY_DSN" check --relay >"$PB_TMP/clock.out" 2>&1 || CHECK_RC=$?
expect_problem clock postgres.clock "this host's clock is (29\\.9|30\\.0)[0-9]* s ahead of PostgreSQL's"
relay_check clock-tolerated --set postgres.max_clock_skew=0 -- --relay
expect_healthy clock-tolerated

# ---- RabbitMQ ---------------------------------------------------------------------------------------
port=$(free_port)
relay_check amqp-closed --set amqp.url="amqp://guest:guest@127.0.0.1:$port/" -- --relay
expect_problem amqp-closed amqp.connect "cannot reach rabbitmq at 127.0.0.1:$port"
relay_check amqp-password --set amqp.url="amqp://guest:Wr0ngPw@127.0.0.1:$POSTBOX_AMQP_PORT/" -- --relay
expect_problem amqp-password amqp.connect 'refused the login of user "guest"'
! grep -q Wr0ngPw "$PB_TMP/amqp-password.out" "$PB_TMP/amqp-password.err" || fail "(amqp-password) the password is shown"
relay_check amqp-exchange --set amqp.declare_exchange=false --set amqp.exchange="pb.$PB_TEST.nowhere" -- --relay
expect_problem amqp-exchange amqp.exchange "exchange \"pb.$PB_TEST.nowhere\" does not exist"
# the consumer's default bound (x-message-ttl 7d) against the queue declared without one
consumer_check amqp-queue --set amqp.queue_message_ttl=7d --set amqp.allow_unlimited=false -- --consume
expect_problem amqp-queue amqp.queue "queue \"$PB_QUEUE\" on vhost \"/\" exists with different arguments.*x-message-ttl"
consumer_check amqp-unbounded --set amqp.queue_message_ttl=0 --set amqp.allow_unlimited=false -- --consume
expect_problem amqp-unbounded source.config "amqp.queue \"$PB_QUEUE\" would be declared without a bound"

# ---- the start-up check: a warning, and the relay works ------------------------------------------
psql_q "DROP INDEX postbox.outbox_retrying"
enqueue_seq 2 1 5
relay_drain 60 --set log.format=json
grep -v '^====' "$PB_RELAY_LOG" |
    jq -se 'any(.[]; .level == "warn" and .component == "relay" and .check == "schema.index"
                     and (.msg | startswith("start-up check: index postbox.outbox_retrying on postbox.outbox is missing")))' \
        >/dev/null || { grep -v '^====' "$PB_RELAY_LOG" | head -5 >&2; fail "(start-up) no warning about the dropped index"; }
[[ $(published_count) == 10 ]] || fail "(start-up) published $(published_count) of 10"
say "(start-up) $(grep -v '^====' "$PB_RELAY_LOG" | jq -r 'select(.check == "schema.index") | .msg' | cut -c1-160)"

# ---- the consumer's start-up check: a warning, and it consumes ------------------------------------
psql_q "REVOKE SELECT ON postbox.inbox_dead FROM postbox_consumer"
start_consumer --set consume.handler="$HANDLER"
wait_until 'grep -q "consuming queue" "$CONSUMER_LOG"' 30 || fail "(consumer start-up) the consumer did not start: $(tail -5 "$CONSUMER_LOG")"
grep -q 'warn  consume: start-up check: role "pb_it_consumer" lacks SELECT on postbox.inbox_dead' "$CONSUMER_LOG" ||
    fail "(consumer start-up) no warning about the revoked grant: $(head -5 "$CONSUMER_LOG")"
publish order.created.v1 "m-$$" order.created.v1 '{"n": 1}'
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE message_id = '"'m-$$'"'") == 1 ]]' 30 ||
    fail "(consumer start-up) the message was not handled"
stop_consumer
psql_q "GRANT SELECT ON postbox.inbox_dead TO postbox_consumer"
say "(consumer start-up) $(grep -m1 'start-up check: role' "$CONSUMER_LOG" | sed 's/^.*warn  //' | cut -c1-140)"
