#!/usr/bin/env bash
# Kafka sink, bad input: a property librdkafka does not know, a value it refuses, a property
# that would turn off what the sink needs, an empty and an unreachable bootstrap list each get a
# clear error; secrets among the kafka.* properties never show; an event over message.max.bytes
# and one for an invalid topic are dead-lettered with the reason while the later events of the
# same aggregate still arrive, in order.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

pb_init

run_bad() { # NAME ARGS...: postbox relay that must fail by itself within 30 s; stderr in $ERR
    local name=$1 PRE POST rc=0
    shift
    _split_args "$@"
    ERR=$PB_TMP/$name.err
    timeout 30 "$POSTBOX_BIN" "${PRE[@]}" relay "${POST[@]}" >"$PB_TMP/$name.out" 2>"$ERR" || rc=$?
    say "($name) exit $rc: $(head -c 400 "$ERR" | tr '\n' ' ')"
    ((rc != 0)) || fail "($name) postbox relay exited 0"
    ((rc != 124)) || fail "($name) postbox relay was still running after 30 s"
}
err_has() { # NAME ERE...
    local name=$1 re
    shift
    for re in "$@"; do
        grep -Eqi -- "$re" "$ERR" || fail "($name) stderr does not match /$re/: $(cat "$ERR")"
    done
}

# (a) a property librdkafka does not know: named, with where to look
run_bad a --set kafka.no.such.property=1
err_has a 'kafka\.no\.such\.property' 'no such property'
# ... also from the config file's [kafka] section
printf '[kafka]\nbrokers = %s\nlinger.ms = soon\n' "$POSTBOX_KAFKA_BROKERS" >"$PB_TMP/b.ini"
run_bad b -c "$PB_TMP/b.ini"
err_has b 'kafka\.linger\.ms' 'invalid value'
# (c) a property that would turn off the idempotent producer
run_bad c --set kafka.enable.idempotence=false
err_has c 'kafka\.enable\.idempotence' 'needs'
run_bad c2 --set kafka.acks=1
err_has c2 'kafka\.acks' 'all'
# (d) empty bootstrap list
run_bad d --set kafka.brokers=
err_has d 'kafka\.brokers is empty'

# (e) secrets among the properties never show: not in `postbox config`, not in the relay's log
out=$("$POSTBOX_BIN" --set kafka.sasl.password=S3cr3tPw0rdXYZ --set kafka.ssl.key.password=K3yPw0rdXYZ \
    --set kafka.sasl.username=postbox config) || fail "(e) postbox config failed"
grep -q 'S3cr3tPw0rdXYZ\|K3yPw0rdXYZ' <<<"$out" && fail "(e) postbox config shows a secret"
grep -q '^sasl.password = \*\*\*$' <<<"$out" || fail "(e) sasl.password is not shown redacted: $(grep sasl <<<"$out")"
grep -q '^sasl.username = postbox$' <<<"$out" || fail "(e) sasl.username is not shown"
run_bad e --set kafka.sasl.password=S3cr3tPw0rdXYZ --set kafka.enable.idempotence=false
grep -q 'S3cr3tPw0rdXYZ' "$ERR" && fail "(e) the password appears in stderr"
say "(e) secrets redacted"

# (f) unreachable bootstrap servers: the relay keeps running and says what it waits for
start_relay --set kafka.brokers=127.0.0.1:1 --set relay.reconnect_cap=1s
wait_until 'grep -q "waiting for the kafka broker" "$PB_RELAY_LOG"' 30 ||
    fail "(f) the relay does not say that it waits for the kafka broker"
pid_alive "$RELAY_PID" || fail "(f) the relay exited instead of waiting for kafka"
grep -q '127.0.0.1:1' "$PB_RELAY_LOG" || fail "(f) the log does not name the bootstrap servers"
say "(f) $(grep 'waiting for the kafka broker' "$PB_RELAY_LOG" | tail -1 | cut -c1-250)"
kill_relay

# (g) an event over message.max.bytes and one whose destination is no valid topic are
# dead-lettered with the reason; the aggregate's later events arrive, in order
psql_q "SELECT postbox.enqueue('order', 'agg-1', 'created.v1', '{\"seq\": 1}')" >/dev/null
big=$(psql_q "SELECT postbox.enqueue('order', 'agg-1', 'big.v1', jsonb_build_object('seq', 2, 'blob', repeat('x', 5000)))")
bad=$(psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, destination)
              VALUES ('order', 'agg-1', 'created.v1', '{\"seq\": 3}', 'no topic!') RETURNING event_id")
psql_q "SELECT postbox.enqueue('order', 'agg-1', 'created.v1', '{\"seq\": 4}')" >/dev/null
psql_q "SELECT postbox.enqueue('order', 'agg-2', 'created.v1', '{\"seq\": 1}')" >/dev/null
: >"$PB_RELAY_LOG"
relay_drain 60 --set kafka.message.max.bytes=2000 --set relay.max_attempts=3 --set relay.backoff_base=100ms
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE event_id = '$big'")
say "(g) dead letter of the 5000-byte event: ${reason:-none}"
[[ $reason =~ [Ss]ize|[Ll]arge ]] || fail "(g) the oversize event is not dead-lettered with a size reason: '$reason'"
reason=$(psql_q "SELECT reason FROM postbox.dead_letters WHERE event_id = '$bad'")
say "(g) dead letter of the event for topic 'no topic!': ${reason:-none}"
[[ $reason =~ topic ]] || fail "(g) the invalid topic is not dead-lettered with a topic reason: '$reason'"
((2 == $(dead_count))) || fail "(g) $(dead_count) dead letters, expected 2"
drain_topic "$PB_TMP/g.got" "$(kafka_topic order)" 3 1500 60
stats=$(check_order "$PB_TMP/g.got") || fail "(g) order broken: $stats"
[[ $(awk -F'\t' '$5 == "agg-1"' "$PB_TMP/g.got" | grep -o '"seq": [0-9]*' | tr -d '"seq: ' | tr '\n' ' ') == "1 4 " ]] ||
    fail "(g) agg-1 should arrive as seq 1, 4: $(cut -f5,6 "$PB_TMP/g.got")"
say "(g) $stats"
