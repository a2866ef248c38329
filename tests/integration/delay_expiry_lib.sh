# The body of delay_expiry_poll and delay_expiry_cdc (CAPTURE set by them), sourced after lib.sh:
# events that wait (available_at) and events that expire (expires_at), relayed to RabbitMQ and
# received by python3-pika. One transaction writes, at T0:
#   late:  seq 1 available at T0+4s, seq 2 and 3 plain        -> all three wait for T0+4s
#   flow:  seq 1..3 plain (written after late's)              -> at once: late holds only itself
#   gone:  seq 1 available at T0+3s, seq 2 expiring at T0+1s, seq 3 plain
#                                                             -> 2 expires while it waits behind 1
#   past:  seq 1 expired at T0-1s, seq 2 plain                -> 1 dead-lettered, 2 at once
#   ttl:   seq 1 expiring at T0+60s                           -> at once, expiration ~60000 ms
#   far:   seq 1 expiring in 100 days                         -> no expiration (above RabbitMQ's limit)
#   short: seq 1 expiring at T0+3s                            -> at once; dropped by RabbitMQ
#          from a second queue nobody reads until after T0+3s
#   (cdc) postbox.emit: emit-late seq 1 at T0+4s and seq 2 plain; emit-past seq 1 expired, seq 2
# Checked: what arrives first is exactly the events that are due (the delayed ones and those
# behind them have not arrived); while they wait, the relay's figures show them (postbox status),
# and with cdc they are set aside in postbox.cdc_deferred while the slot's confirmed position
# passes them (the WAL is not held); then every event that did not expire arrives once, each
# aggregate in order, none before its available_at; the expired ones are in
# postbox.dead_letters with reason "expired" (postbox dlq list shows it) and never arrived; the
# expiration property is the lifetime left.
source "$(dirname "$0")/delay_lib.sh"

pb_init
create_sent
setup_queue '#'
Q2=$PB_QUEUE.2
amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$Q2" '#' || fail "amqp-tool setup $Q2 failed"
on_exit "amqp_tool delete $POSTBOX_AMQP_URL $Q2"
[[ $CAPTURE != cdc ]] || cdc_use_slot
start_capture_relay --set log.level=debug
# due at once: flow 1-3, past 2, ttl, far, short (and emit-past 2); arriving in all: those and
# late 1-3, gone 1 and 3 (and emit-late 1-2)
prompt=7 total=12
[[ $CAPTURE != cdc ]] || prompt=8 total=15
start_receiver "$total" 120

{
    echo "BEGIN;"
    echo "CREATE TEMP TABLE t0 AS SELECT now() AS t;"
    T="(SELECT t FROM t0)"
    ev late 1 "$T + interval '4 s'"
    ev late 2
    ev late 3
    for k in 1 2 3; do ev flow $k; done
    ev gone 1 "$T + interval '3 s'"
    ev gone 2 NULL "$T + interval '1 s'"
    ev gone 3
    ev past 1 NULL "$T - interval '1 s'"
    ev past 2
    ev ttl 1 NULL "$T + interval '60 s'"
    ev far 1 NULL "$T + interval '100 days'"
    ev short 1 NULL "$T + interval '3 s'"
    if [[ $CAPTURE == cdc ]]; then
        ev emit-late 1 "$T + interval '4 s'" NULL emit
        ev emit-late 2 NULL NULL emit
        ev emit-past 1 NULL "$T - interval '1 s'" emit
        ev emit-past 2 NULL NULL emit
    fi
    echo "COMMIT;"
} >"$PB_TMP/write.sql"
psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/write.sql" >/dev/null || fail "writing the events failed"
t0=$(psql_q "SELECT extract(epoch FROM min(written_at))::numeric(20,3) FROM sent")
since_t0() { awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - t0 }'; }
say "written: $(psql_q "SELECT count(*) FROM sent") events, $prompt due at once, $total to arrive"

# the due ones arrive at once; the delayed ones and those behind them do not
wait_received "$prompt" 10
sleep 0.5
early=$(cut -f5 "$RECEIVED" | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')
say "arrived first: $early"
[[ $(received_count) == "$prompt" ]] || fail "expected the $prompt due events first, got $(received_count): $early"
for agg in late gone emit-late; do
    ! grep -qP "\t$agg\t" "$RECEIVED" || fail "an event of $agg arrived before its aggregate's available_at"
done
say "$(since_t0) s after T0: late, gone and emit-late wait"
status=$("$POSTBOX_BIN" status --json) || fail "postbox status failed"
delayed=$(jq '.outbox.delayed' <<<"$status") deferred=$(jq '.outbox.cdc_deferred' <<<"$status")
say "postbox status: delayed $delayed, cdc_deferred $deferred, oldest pending age $(jq '.outbox.oldest_pending_age_seconds' <<<"$status") s"
if [[ $CAPTURE == cdc ]]; then
    n=$(psql_q "SELECT count(*) FROM postbox.cdc_deferred")
    ((n == 8)) || fail "expected the 8 events of late, gone and emit-late set aside, found $n"
    ((deferred == 8)) || fail "postbox status shows cdc_deferred $deferred, expected 8"
    # the stream's position is confirmed past them: the WAL is not held for the delay
    cdc_wait_caught_up 5
    say "slot confirmed at $(slot_confirmed_lsn), past the events set aside"
    ((delayed >= 5)) || fail "postbox status shows delayed $delayed, expected the 5 outbox events of late and gone"
else
    ((delayed >= 5)) || fail "postbox status shows delayed $delayed, expected >= 5 (late and gone)"
fi
# nobody counts the events waiting as lag (the flow's were published)
age=$(jq '.outbox.oldest_pending_age_seconds' <<<"$status")
awk -v a="$age" 'BEGIN { exit !(a < 1) }' || fail "oldest pending age $age s counts events that are not due"

wait_received "$total" 20
wait_receiver 30
check_received
say "every event that did not expire arrived once, in order, none before its available_at"

# the expired ones: dead letters with reason expired, never published
dead=$(psql_q "SELECT string_agg(s.agg || '/' || s.seq || ':' || d.reason, ' ' ORDER BY s.agg)
               FROM postbox.dead_letters d JOIN sent s USING (event_id)")
say "dead letters: $dead"
want="gone/2:expired past/1:expired"
[[ $CAPTURE != cdc ]] || want="emit-past/1:expired $want"
[[ $dead == "$want" ]] || fail "expected dead letters '$want', got '$dead'"
[[ $(psql_q "SELECT count(*) FROM postbox.dead_letters WHERE expires_at IS NULL OR attempts <> 0") == 0 ]] ||
    fail "a dead letter lacks its expires_at or counts an attempt that was never made"
list=$("$POSTBOX_BIN" dlq list) || fail "postbox dlq list failed"
[[ $(grep -c ' expired' <<<"$list") == $(wc -w <<<"$want") ]] || fail "postbox dlq list does not show the reason: $list"
say "postbox dlq list: $(grep -m1 expired <<<"$list")"

# the expiration property: the lifetime left, in ms
exp_of() { psql_q "SELECT r.expiration FROM received r JOIN sent s USING (event_id) WHERE s.agg = '$1'"; }
ttl=$(exp_of ttl) far=$(exp_of far) plain=$(exp_of flow | sort -u)
say "expiration: ttl '$ttl' ms, far '$far', plain '$plain'"
[[ $ttl =~ ^[0-9]+$ ]] && ((ttl > 50000 && ttl <= 60000)) || fail "expected an expiration near 60000 ms on ttl, got '$ttl'"
[[ -z $far ]] || fail "an expiration beyond RabbitMQ's limit was sent: '$far'"
[[ -z $plain ]] || fail "events without an expiry got an expiration: '$plain'"
# RabbitMQ dropped short from the queue nobody read (its 3 s passed)
sleep_ms "$(awk -v t0="$t0" -v now="$(date +%s.%N)" 'BEGIN { printf "%d", (t0 + 3.5 - now) * 1000 }')"
amqp_tool drain "$POSTBOX_AMQP_URL" "$Q2" --expect $((total - 1)) --idle-ms 1000 --timeout-s 30 >"$PB_TMP/q2" ||
    fail "draining $Q2 failed"
short=$(psql_q "SELECT event_id FROM sent WHERE agg = 'short'")
! grep -q "^$short" "$PB_TMP/q2" || fail "RabbitMQ delivered the event whose expiration passed"
say "RabbitMQ dropped the expired message from $Q2: $(wc -l <"$PB_TMP/q2") of $total delivered there"
# nothing left behind: every outbox row published (cdc: marked) or dead-lettered, nothing set aside
left=$(psql_q "SELECT count(*) FROM postbox.outbox")
((left == 0)) || fail "$left outbox row(s) left pending"
[[ $(psql_q "SELECT count(*) FROM postbox.cdc_deferred") == 0 ]] || fail "rows left in postbox.cdc_deferred"
