#!/usr/bin/env bash
# Bad input gets a clear error and loses nothing: config mistakes, bad URLs, wrong credentials,
# a missing exchange, an unreachable database, an oversize payload, malformed values.
source "$(dirname "$0")/lib.sh"

pb_init
setup_queue '#'

# run_bad NAME [ARGS...]: postbox relay that must fail by itself within 30 s; stderr in $ERR
run_bad() {
    local name=$1 PRE POST rc=0
    shift
    _split_args "$@"
    ERR=$PB_TMP/$name.err
    timeout 30 "$POSTBOX_BIN" "${PRE[@]}" relay "${POST[@]}" >"$PB_TMP/$name.out" 2>"$ERR" || rc=$?
    RC=$rc
    say "($name) exit $rc: $(head -c 600 "$ERR" | tr '\n' ' ')"
    ((rc != 0)) || fail "($name) postbox relay exited 0"
    ((rc != 124)) || fail "($name) postbox relay was still running after 30 s"
}
err_has() { # NAME ERE...: stderr of the last run_bad matches every ERE (case-insensitive)
    local name=$1 re
    shift
    for re in "$@"; do
        grep -Eqi -- "$re" "$ERR" || fail "($name) stderr does not match /$re/: $(cat "$ERR")"
    done
}

# (a) unknown key: names the key and its line
printf '[relay]\nbatch_size = 100\nbogus_key = 1\n' >"$PB_TMP/a.ini"
run_bad a -c "$PB_TMP/a.ini"
err_has a bogus_key '(line[ :]*3([^0-9]|$)|:3([^0-9]|$))'

# (b) unknown section
printf '[relay]\nbatch_size = 100\n\n[bogus_section]\nkey = 1\n' >"$PB_TMP/b.ini"
run_bad b -c "$PB_TMP/b.ini"
err_has b bogus_section

# (c) not an AMQP URL
run_bad c --set amqp.url=http://x
err_has c 'url|scheme' 'amqp'

# (d) wrong password: fails (no endless retry), says why, never prints the password
run_bad d --set "amqp.url=amqp://guest:Wr0ngPassw0rdXYZ@127.0.0.1:$POSTBOX_AMQP_PORT/"
err_has d 'credential|refused|auth|password|login'
if grep -q Wr0ngPassw0rdXYZ "$ERR"; then fail "(d) the password appears in stderr"; fi

# (e) exchange missing and not to be declared: names the exchange
amqp_tool delete-exchange "$POSTBOX_AMQP_URL" pb.bad_input.missing
run_bad e --set amqp.declare_exchange=false --set amqp.exchange=pb.bad_input.missing
err_has e 'pb\.bad_input\.missing'

# (f) unreachable PostgreSQL at start: keeps running and says it is waiting
start_relay --dsn "postgresql://postgres@127.0.0.1:1/postbox"
sleep 3
pid_alive "$RELAY_PID" || { wait_relay 1; fail "(f) the relay exited ($RELAY_RC) instead of waiting for PostgreSQL"; }
grep -Eqi 'wait|cannot reach|unreachable|retry' "$PB_RELAY_LOG" ||
    fail "(f) the relay does not say it waits for PostgreSQL"
say "(f) still running after 3 s: $(grep -Ei 'wait|cannot reach|unreachable|retry' "$PB_RELAY_LOG" | tail -1)"
if grep -q '127.0.0.1:1' "$PB_RELAY_LOG" || grep -qi 'port.*\b1\b' "$PB_RELAY_LOG"; then
    say "(f) the log names the address"
fi
kill_relay

# (g) a payload larger than the broker accepts is dead-lettered with the reason; the rest flows
big=$(psql_q "SELECT postbox.enqueue('order', 'big-1', 'order.big.v1', jsonb_build_object('blob', repeat('x', 5000)))")
small=$(psql_q "SELECT postbox.enqueue('order', 'small-1', 'order.small.v1', '{\"n\": 1}')")
: >"$PB_RELAY_LOG"
relay_drain 60 --set amqp.max_message_size=1000 --set relay.max_attempts=3 --set relay.backoff_base=100ms
reason=$(psql_q "SELECT reason || ' / ' || coalesce(last_error, '') FROM postbox.dead_letters WHERE event_id = '$big'")
say "(g) dead letter of the 5000-byte event: ${reason:-none}"
[[ -n $reason ]] || fail "(g) the oversize event is not in dead_letters"
[[ $reason =~ [Ss]ize|[Ll]arge|max_message|bytes ]] || fail "(g) the reason does not mention the size: $reason"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox_published WHERE event_id = '$small'") == 1 ]] ||
    fail "(g) the normal event was not published"
drain_queue "$PB_TMP/g.got" 1 1500 30
[[ $(wc -l <"$PB_TMP/g.got") == 1 && $(cut -f1 "$PB_TMP/g.got") == "$small" ]] ||
    fail "(g) the queue should hold just the normal event: $(cat "$PB_TMP/g.got")"

# (h) malformed values
run_bad h --set relay.batch_size=abc
err_has h 'batch_size' 'abc|integer|number'
run_bad h2 --set relay.poll_interval=soon
err_has h2 'poll_interval'
POSTBOX_RELAY_BATCH_SIZE=0 run_bad h3
err_has h3 'batch_size|POSTBOX_RELAY_BATCH_SIZE'
