# shellcheck shell=bash
# Sourced (after lib.sh) by the exactly-once tests of every broker (consume_exactly_once,
# nats_exactly_once, kafka_exactly_once, redis_exactly_once): the producer's committed and
# rolled-back transactions of deposits over $N_ACC accounts ($PER_TX and $ROLLBACK_PER_TX events
# each), the relay's SIGKILL with its record (relay_kills, relay_busy, relay_p0), and the check
# that every account's events took effect in order (check_in_order).

produce_committed() {
    psql_q "BEGIN;
            SELECT count(postbox.enqueue('account', a, 'deposit.v1',
                                         jsonb_build_object('account', a, 'amount', (random() * 2000)::int - 500)))
              FROM (SELECT 'acct-' || floor(random() * $N_ACC)::int AS a FROM generate_series(1, $PER_TX)) s;
            COMMIT;" >/dev/null || fail "producer transaction failed"
}
produce_rolled_back() {
    psql_q "BEGIN;
            SELECT count(postbox.enqueue('account', a, 'deposit.v1',
                                         jsonb_build_object('account', a, 'amount', 1000000, 'rolled_back', true)))
              FROM (SELECT 'acct-' || floor(random() * $N_ACC)::int AS a FROM generate_series(1, $ROLLBACK_PER_TX)) s;
            ROLLBACK;" >/dev/null || fail "rolled-back producer transaction failed"
}
kill_relay_now() { # STEP MS
    pid_alive "$RELAY_PID" || fail "the relay exited by itself before step $1"
    kill_relay
    local p pend busy=no
    p=$(published_count); pend=$(pending_count) # after the kill: what it had committed
    relay_kills=$((relay_kills + 1))
    if ((p > relay_p0 && pend > 0)); then busy=yes; relay_busy=$((relay_busy + 1)); fi
    say "step $1: SIGKILL relay $2 ms after the producer commit: published $relay_p0 -> $p during its run, pending $pend, while publishing: $busy"
    relay_p0=$p
}

# check_in_order LOG...: no consumer run handled a message out of its account's order. The
# consumer itself tells, from the aggregate_sequence numbers: a late message (its number at or
# below one handled already) and a gap given up are logged at warn and counted.
check_in_order() {
    local late gaps
    late=$(cat "$@" | grep -c 'handled out of order' || true)
    gaps=$(cat "$@" | grep -c 'gave up waiting for sequence' || true)
    say "out of order: $late message(s) handled late, $gaps gap(s) given up"
    ((late == 0 && gaps == 0)) || fail "events took effect out of their account's order: $(cat "$@" | grep -m 3 'handled out of order\|gave up waiting' | cut -c1-300)"
}
