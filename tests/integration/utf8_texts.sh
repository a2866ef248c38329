#!/usr/bin/env bash
# Texts cut to fit a buffer (reasons, error texts) must be cut on UTF-8 character boundaries:
# PostgreSQL rejects a text with half a character (SQLSTATE 22021), and one event's or message's
# text must never stop the relay or the consumer.
# 1. relay (poll, then cdc capture): an event whose header name is longer than 255 bytes of '€' (the sink rejects
#    it, quoting the start of the name) and an event with an unroutable destination of 'ü's (the
#    reason quotes the routing key) go to postbox.dead_letters with their reasons; a later event
#    of another aggregate is published; `postbox relay --drain` exits 0; every JSON log line is
#    valid JSON.
# 2. consumer: a handler that raises an error echoing a long multi-byte payload, and a message
#    whose multi-byte type has no handler, land in postbox.inbox_dead with their error texts;
#    a good message is handled; `postbox consume --drain` exits 0.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done

# check_json_log FILE: every line that is not a "====" marker is a JSON object (jq parses it, so
# it is valid UTF-8) and none lost its message as "(unprintable)".
check_json_log() {
    local file=$1 bad
    bad=$(grep -v '^====' "$file" | while IFS= read -r line; do
        jq -e 'type == "object"' >/dev/null 2>&1 <<<"$line" || printf '%s\n' "$line"
    done | head -3)
    [[ -z $bad ]] || fail "log lines of $file that are not valid JSON: $bad"
    ! grep -q '(unprintable)' "$file" || fail "a log line of $file lost its text: $(grep -m1 '(unprintable)' "$file")"
    iconv -f UTF-8 -t UTF-8 "$file" >/dev/null || fail "$file is not valid UTF-8"
}

# ---- 1. the relay, poll then cdc capture ------------------------------------------------------
pb_init
setup_queue 'order.#' # the good event routes; the destination of the unroutable one does not

dead_of() { # EVENT_ID...: how many of them are in postbox.dead_letters
    local ids
    ids=$(printf "'%s'," "$@")
    psql_q "SELECT count(*) FROM postbox.dead_letters WHERE event_id IN (${ids%,})"
}

# relay_phase NAME [RELAY ARGS...]: enqueues the three events (aggregates utf8-*-NAME), runs
# `postbox relay --drain` and checks where they ended.
relay_phase() {
    local name=$1 hdr_id dst_id ok_id hdr_reason dst_row
    shift
    # a header name of 'xy' and 100 '€' (3 bytes each): the reason quotes its first 40 bytes,
    # which end inside a '€'
    hdr_id=$(psql_q "SELECT postbox.enqueue('order', 'utf8-hdr-$name', 'order.created.v1', '{\"n\": 1}',
                       jsonb_build_object('xy' || repeat('€', 100), 'v'))")
    # a destination of 'z' and 50 'ü' (2 bytes each, 101 bytes): the reason quotes 72 bytes of
    # it, which end inside a 'ü'
    dst_id=$(psql_q "SELECT postbox.enqueue('order', 'utf8-dst-$name', 'order.created.v1', '{\"n\": 2}',
                       '{}', 'z' || repeat('ü', 50))")
    ok_id=$(psql_q "SELECT postbox.enqueue('order', 'utf8-ok-$name', 'order.created.v1', '{\"n\": 3}')")
    say "$name: enqueued $hdr_id (long multi-byte header name), $dst_id (unroutable multi-byte destination), $ok_id (good)"

    : >"$PB_RELAY_LOG"
    local opts=(--set log.format=json --set relay.max_attempts=2 --set relay.backoff_base=100ms
        --set relay.backoff_cap=200ms)
    if [[ $name == poll ]]; then
        relay_drain 60 "${opts[@]}"
    else
        # not --drain: in a shared cluster the stream may take long to catch up with the WAL
        start_cdc_relay "${opts[@]}"
        wait_until '[[ $(dead_of "$hdr_id" "$dst_id") == 2 ]] || ! pid_alive "$RELAY_PID"' 60 ||
            fail "$name: the events are not dead-lettered after 60 s"
        pid_alive "$RELAY_PID" || { wait_relay 1; fail "$name: the relay stopped (exit $RELAY_RC)"; }
        stop_relay
        ((RELAY_RC == 0)) || fail "$name: the relay exited with $RELAY_RC on SIGTERM"
    fi
    check_json_log "$PB_RELAY_LOG"

    hdr_reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE event_id = '$hdr_id'")
    dst_row=$(psql_q "SELECT coalesce(last_error, '') || ' | ' || reason FROM postbox.dead_letters WHERE event_id = '$dst_id'")
    say "$name: dead letter of the header event: $hdr_reason"
    say "$name: dead letter of the unroutable event (last_error | reason): $dst_row"
    [[ $hdr_reason == *"header name"*"longer than 255 bytes"* ]] ||
        fail "$name: the header event is not dead-lettered with its reason (dead_letters: '$hdr_reason')"
    [[ $dst_row == *[Uu]nroutable*zü* ]] ||
        fail "$name: the unroutable event is not dead-lettered with a reason naming its routing key (dead_letters: '$dst_row')"
    drain_queue "$PB_TMP/got-$name" 1 1000 30
    cut -f1 "$PB_TMP/got-$name" | grep -qx "$ok_id" ||
        fail "$name: the good event of another aggregate did not arrive: $(cat "$PB_TMP/got-$name")"
}

relay_phase poll
[[ $(pending_count) == 0 ]] || fail "$(pending_count) event(s) still pending after --drain"
cdc_use_slot
cdc_create_slot
relay_phase cdc

# ---- 2. the consumer ------------------------------------------------------------------------
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=utf8-test
psql_q "CREATE TABLE handled (body text);
        CREATE FUNCTION echo_fail(p text) RETURNS void LANGUAGE plpgsql AS
        \$\$ BEGIN RAISE EXCEPTION 'bad payload: %', p; END \$\$"
BAD_SQL="SELECT echo_fail(\$1)"
GOOD_SQL="INSERT INTO handled VALUES (\$1)"
setup_queue '#'
# "handler failed: ERROR:  bad payload: " is 37 bytes; 218 bytes of '€' are left of the 256-byte
# error buffer, which ends inside a '€'
publish bad.v1 utf8-bad bad.v1 "$(printf '€%.0s' {1..120})"
# "no handler for message type \"" is 29 bytes, then 85 '€' (255 bytes) are cut inside one
notype=$(printf '€%.0s' {1..85})
publish odd.v1 utf8-notype "$notype" '{"n": 1}'
publish good.v1 utf8-good good.v1 'fine'

rc=0
"$POSTBOX_BIN" --set log.format=json --set "handlers.bad.v1=$BAD_SQL" \
    --set "handlers.good.v1=$GOOD_SQL" --set consume.max_attempts=2 \
    --set consume.backoff_base=100ms --set consume.backoff_cap=200ms \
    consume --drain >>"$CONSUMER_LOG" 2>&1 &
cpid=$!
PB_PIDS+=("$cpid")
wait_until '! pid_alive "$cpid"' 60 || fail "postbox consume --drain still runs after 60 s"
wait "$cpid" || rc=$?
((rc == 0)) || { tail -n 20 "$CONSUMER_LOG" >&2; fail "postbox consume --drain exited with $rc"; }
check_json_log "$CONSUMER_LOG"

bad_err=$(psql_q "SELECT error FROM postbox.inbox_dead WHERE message_id = 'utf8-bad'")
notype_err=$(psql_q "SELECT error FROM postbox.inbox_dead WHERE message_id = 'utf8-notype'")
say "inbox_dead error of the failing handler: $bad_err"
say "inbox_dead error of the message without a handler: $notype_err"
[[ $bad_err == "handler failed: "*"bad payload: €€€"* ]] ||
    fail "the failing message is not in inbox_dead with its error (got '$bad_err'; inbox_failures: $(psql_q "SELECT last_error FROM postbox.inbox_failures"))"
[[ $notype_err == "no handler for message type"*"€€€"* ]] ||
    fail "the message without a handler is not in inbox_dead with its error (got '$notype_err')"
[[ $(psql_q "SELECT count(*) FROM handled WHERE body = 'fine'") == 1 ]] || fail "the good message was not handled"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_failures") == 0 ]] || fail "inbox_failures rows left"
((0 == $(queue_count))) || fail "$(queue_count) message(s) left in the queue"
