#!/usr/bin/env bash
# A dead consumer's entries are claimed once they have been idle for redis.claim_idle, even when
# the group's pending list holds thousands of entries of the live consumer before they are due:
# consumer A takes the first entry of each of 200 aggregates and is SIGKILLed in its handler;
# consumer B then reads the 2,000 later entries of those aggregates, which it must hold back
# (each aggregate waits for its first entry, pending on A). B has to claim A's 200 entries
# within consume.gap_timeout (15 s here), or the aggregates go on without them and the claimed
# entries come late as "duplicates" whose effect never happens (XAUTOCLAIM COUNT 1 looks at only
# 10 pending entries per call: its pass over B's held entries took about two minutes).
# Checked: every entry handled exactly once and in order per aggregate, no gap given up, A's
# entries claimed, nothing left pending in the group. Then: redis.claim_idle at or above
# consume.gap_timeout is warned about at start.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
STREAM=pb:$PB_TEST:acct GROUP=postbox_claim-test
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=claim-test POSTBOX_REDIS_STREAMS=$STREAM
export POSTBOX_REDIS_CLAIM_IDLE=3s POSTBOX_CONSUME_GAP_TIMEOUT=15s POSTBOX_CONSUME_BATCH_SIZE=200
export POSTBOX_CONSUME_RECONNECT_CAP=1s
N_AGG=200 LATER=10
TOTAL=$((N_AGG * (LATER + 1)))
DONE_SQL="INSERT INTO done (agg, seq) VALUES (\$1::jsonb->>'agg', (\$1::jsonb->>'seq')::int)"
HANG_SQL="SELECT pg_sleep(600)"

pb_init
psql_q "CREATE TABLE done (n bigserial, agg text, seq int, PRIMARY KEY (agg, seq))"

xadd_seq() { # FROM TO: the entries with sequence FROM..TO of every aggregate, sequence-major
    local k a
    for ((k = $1; k <= $2; k++)); do
        for ((a = 1; a <= N_AGG; a++)); do
            printf 'XADD %s * event_id e-%d-%d event_type %s aggregate_type acct aggregate_id a-%d payload "{\\"agg\\": \\"a-%d\\", \\"seq\\": %d}" headers {} aggregate_sequence %d\n' \
                "$STREAM" "$a" "$k" "$([[ $k == 1 ]] && echo first.v1 || echo later.v1)" "$a" "$a" "$k" "$k"
        done
    done | redis_cli >/dev/null || fail "XADD of sequence $1..$2 failed"
}
hanging() { psql_q "SELECT count(*) FROM pg_stat_activity WHERE datname = '$PB_DB' AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()"; }

xadd_seq 1 1
start_consumer --set "handlers.first.v1=$HANG_SQL" --set "handlers.later.v1=$DONE_SQL"
wait_until '(( $(hanging) == 1 ))' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "consumer A never ran the hanging handler"; }
kill_consumer
psql_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$PB_DB' AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()" >/dev/null
on_a=$(redis_cli XPENDING "$STREAM" "$GROUP" | head -1)
say "consumer A killed in its handler with $on_a entries pending"
((on_a == N_AGG)) || fail "consumer A holds $on_a entries, expected $N_AGG"

xadd_seq 2 $((LATER + 1))
# A died just now: its entries' idle time starts from zero as B starts (touched as A would,
# XCLAIM ... JUSTID), however long the kill took
a_name=$(redis_cli XPENDING "$STREAM" "$GROUP" | sed -n 4p)
redis_cli XCLAIM "$STREAM" "$GROUP" "$a_name" 0 $(redis_cli XPENDING "$STREAM" "$GROUP" - + "$N_AGG" | awk 'NR % 4 == 1') JUSTID >/dev/null ||
    fail "XCLAIM of consumer A's entries failed"
t0=$(date +%s%N)
start_consumer --set "handlers.first.v1=$DONE_SQL" --set "handlers.later.v1=$DONE_SQL"
gave_up() { grep -q 'gave up waiting for sequence' "$CONSUMER_LOG"; }
wait_until '(( $(psql_q "SELECT count(*) FROM done") == TOTAL )) || gave_up' 60 || true
took=$((($(date +%s%N) - t0) / 1000000))
handled=$(psql_q "SELECT count(*) FROM done")
claims=$(grep -c 'claimed entry .* of stream' "$CONSUMER_LOG" || true)
say "consumer B: $handled of $TOTAL entries handled after $took ms; entries claimed from A: $claims"
if gave_up; then
    grep 'gave up waiting for sequence' "$CONSUMER_LOG" | head -3 >&2
    fail "consumer B gave up waiting for A's entries (consume.gap_timeout): $claims of $N_AGG claimed by then"
fi
((handled == TOTAL)) || { tail -n 20 "$CONSUMER_LOG" >&2; fail "only $handled of $TOTAL entries handled after 60 s ($claims claimed)"; }
wait_until '[[ $(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) == 0 ]]' 20 ||
    fail "$(redis_cli XPENDING "$STREAM" "$GROUP" | head -1) entries left pending in the group"
stop_consumer

late=$(grep -c 'was handled already' "$CONSUMER_LOG" || true)
disorder=$(psql_q "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY agg ORDER BY n) AS prev FROM done) d
                   WHERE prev IS NOT NULL AND seq <> prev + 1")
inbox=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL")
dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead")
say "inbox: $inbox processed; dead $dead; entries taken as already handled: $late; out of order: $disorder"
((late == 0)) || fail "$late entries were taken as already handled (their effect never happened)"
((disorder == 0)) || fail "$disorder entries handled out of their aggregate's order"
((inbox == TOTAL)) || fail "inbox: $inbox processed, expected $TOTAL"
((dead == 0)) || fail "$dead entries dead-lettered"
((claims == N_AGG)) || fail "$claims entries claimed from consumer A, expected $N_AGG"

# a claim idle time at or above the gap timeout is warned about at start
: >"$CONSUMER_LOG"
start_consumer --set redis.claim_idle=1m --set consume.gap_timeout=30s --set "handlers.first.v1=$DONE_SQL" --set "handlers.later.v1=$DONE_SQL"
wait_until 'grep -q "consume.gap_timeout 30000 ms is not above redis.claim_idle 60000 ms" "$CONSUMER_LOG"' 10 ||
    { tail -n 5 "$CONSUMER_LOG" >&2; fail "no warning for redis.claim_idle 1m with consume.gap_timeout 30s"; }
stop_consumer
