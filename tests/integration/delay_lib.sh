# Helpers of the expiry and delay tests (delay_expiry_*.sh, delay_kill_*.sh), sourced after
# lib.sh. CAPTURE (poll or cdc) picks the relay's capture.
#
# The events are written through postbox.enqueue (and postbox.emit with cdc), and each is also
# recorded in table `sent` in the same transaction: its event_id, aggregate, seq, available_at
# and expires_at, so that what arrives can be compared with what was asked for. A python3-pika
# consumer (amqp_receive.py, a client that is not postbox's) receives the queue in the
# background into $RECEIVED with the arrival time and the expiration property of each message.
CAPTURE=${CAPTURE:-poll}
RECEIVED=$PB_TMP/received
RECEIVER_PID=
/usr/bin/python3 -c 'import pika' 2>/dev/null || fail "python3-pika is not installed (scripts/install-deps)"

# creates table sent (after pb_init)
create_sent() {
    psql_q "CREATE TABLE sent (event_id uuid PRIMARY KEY, agg text NOT NULL, seq int NOT NULL,
                               available_at timestamptz, expires_at timestamptz,
                               emitted boolean NOT NULL DEFAULT false,
                               written_at timestamptz NOT NULL DEFAULT clock_timestamp())"
}

# SQL expression writing one event and recording it in sent, for inside a DO block or a SELECT:
# ev AGG SEQ [AVAILABLE_AT_SQL [EXPIRES_AT_SQL [emit]]]
ev() {
    local agg=$1 seq=$2 av=${3:-NULL} ex=${4:-NULL} how=${5:-enqueue}
    if [[ $how == emit ]]; then
        echo "INSERT INTO sent (event_id, agg, seq, available_at, expires_at, emitted)
              SELECT postbox.emit('order', '$agg', 'created.v1', jsonb_build_object('seq', $seq),
                                  p_available_at => $av, p_expires_at => $ex), '$agg', $seq, $av, $ex, true;"
    else
        echo "INSERT INTO sent (event_id, agg, seq, available_at, expires_at)
              SELECT postbox.enqueue('order', '$agg', 'created.v1', jsonb_build_object('seq', $seq),
                                     p_available_at => $av, p_expires_at => $ex), '$agg', $seq, $av, $ex;"
    fi
}

# start_receiver EXPECT TIMEOUT_S: the background consumer, stopping once EXPECT messages
# arrived and none for 3 s more (duplicates would show), or after TIMEOUT_S
start_receiver() {
    /usr/bin/python3 "$POSTBOX_SOURCE_DIR/tests/integration/amqp_receive.py" "$POSTBOX_AMQP_URL" \
        "$PB_QUEUE" "$1" 3000 "$2" >"$RECEIVED" 2>"$PB_TMP/receiver.err" &
    RECEIVER_PID=$!
    PB_PIDS+=("$RECEIVER_PID")
}
received_count() { wc -l <"$RECEIVED"; }
# wait_received N SECONDS
wait_received() {
    wait_until "((\$(received_count) >= $1))" "$2" ||
        fail "only $(received_count) of $1 message(s) arrived within $2 s"
}
# wait_receiver SECONDS: the receiver's end; fails when it did not get what it expected
wait_receiver() {
    wait_until '! pid_alive "$RECEIVER_PID"' "$1" || fail "the receiver still runs after $1 s"
    wait "$RECEIVER_PID" || fail "the receiver: $(cat "$PB_TMP/receiver.err")"
}

# the relay of this test's capture, in the background
start_capture_relay() {
    if [[ $CAPTURE == cdc ]]; then start_cdc_relay "$@"; else start_relay "$@"; fi
}

# loads $RECEIVED into table received (event_id, arrival, expiration)
load_received() {
    psql_q "DROP TABLE IF EXISTS received;
            CREATE TABLE received (n serial, event_id uuid, agg text, body jsonb, arrival_us bigint,
                                   expiration text)"
    cut -f1,5,6,7,8 "$RECEIVED" |
        psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" \
            -c "\\copy received (event_id, agg, body, arrival_us, expiration) FROM pstdin WITH (FORMAT text, NULL '\\N')" ||
        fail "cannot load the received messages"
}

# check_received: what arrived is exactly the events of sent that did not expire, each once,
# each aggregate in order (lib.sh check_order), none before its available_at
check_received() {
    local stats bad
    stats=$(check_order "$RECEIVED") || fail "per-aggregate order broken: $stats"
    say "$stats"
    load_received
    bad=$(psql_q "SELECT count(*) FROM (SELECT event_id FROM received GROUP BY 1 HAVING count(*) > 1) d")
    ((bad == 0)) || fail "$bad event(s) arrived more than once"
    bad=$(psql_q "SELECT string_agg(s.agg || '/' || s.seq, ' ' ORDER BY s.agg, s.seq) FROM sent s
                  WHERE NOT EXISTS (SELECT FROM postbox.dead_letters d WHERE d.event_id = s.event_id)
                    AND NOT EXISTS (SELECT FROM received r WHERE r.event_id = s.event_id)")
    [[ -z $bad ]] || fail "never arrived (and not dead-lettered): $bad"
    bad=$(psql_q "SELECT count(*) FROM received r WHERE NOT EXISTS (SELECT FROM sent s WHERE s.event_id = r.event_id)")
    ((bad == 0)) || fail "$bad message(s) arrived that were never sent"
    bad=$(psql_q "SELECT string_agg(format('%s/%s %s ms early', s.agg, s.seq,
                                           (extract(epoch FROM s.available_at) * 1000 - r.arrival_us / 1000.0)::int),
                                    ', ')
                  FROM received r JOIN sent s USING (event_id)
                  WHERE r.arrival_us < extract(epoch FROM s.available_at) * 1000000")
    [[ -z $bad ]] || fail "arrived before their available_at: $bad"
}
