#!/usr/bin/env bash
# The claim reads every gap between the batches in flight in one view of the outbox. With ids
# in flight the claim walks the gaps between their ranges; when each gap was read by a
# statement of its own (a snapshot of its own), a producer that committed two events of one
# aggregate between two of those reads, the first with an id in an earlier gap (taken before
# the batches in flight were claimed) and the second in a later one, had the second returned
# without the first: the relay published it ahead of its predecessor. Both ways of the claim
# are tried: with nothing waiting, and with an event of another aggregate waiting for a retry.
#
# The interleaving is forced: a row-level security policy on the outbox, which applies to the
# relay's role only, sleeps while the claim reads the one row of the first gap; meanwhile the
# producer commits both events.
source "$(dirname "$0")/lib.sh"

pb_init
use_least_privilege
relay_dsn=$PB_RELAY_DSN
[[ -n $relay_dsn ]] || fail "no relay role"

enq() { # AGGREGATE: one event, returns its id
    psql_q "SELECT postbox.enqueue('order', '$1', 'created.v1', '{}') AS e \\gset
            SELECT id FROM postbox.outbox WHERE event_id = :'e'"
}
psql_q "CREATE TABLE public.pb_test_pause_at (id bigint);
        CREATE FUNCTION public.pb_test_pause(p_id bigint) RETURNS boolean LANGUAGE plpgsql AS \$\$
        BEGIN
            IF p_id = (SELECT id FROM public.pb_test_pause_at) THEN PERFORM pg_sleep(6); END IF;
            RETURN true;
        END \$\$;
        GRANT SELECT ON public.pb_test_pause_at TO postbox_relay;
        ALTER TABLE postbox.outbox ENABLE ROW LEVEL SECURITY;
        CREATE POLICY pb_test_pause ON postbox.outbox TO postbox_relay USING (public.pb_test_pause(id));" >/dev/null

one_case() { # TAG (aggregates TAG-*) WAITING (true: another aggregate's event waits)
    local tag=$1 waiting=$2 pause_id first last i in_flight y1 y2 claim_pid y1_pid got w
    say "case $tag: something waiting: $waiting"
    pause_id=$(enq "$tag-x") # the first gap's row that the claim reads slowly
    psql_q "DELETE FROM public.pb_test_pause_at; INSERT INTO public.pb_test_pause_at VALUES ($pause_id)"
    if $waiting; then
        w=$(enq "$tag-w")
        psql_q "UPDATE postbox.outbox SET waiting = true, attempts = 1,
                next_attempt_at = now() + interval '1 hour' WHERE id = $w"
    fi
    # the producer's first event of aggregate y: its id is taken now, below the batch in
    # flight, and committed only after the claim has read the first gap
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" >"$PB_TMP/y1-$tag.out" 2>&1 <<SQL &
BEGIN;
SELECT postbox.enqueue('order', '$tag-y', 'created.v1', '{"n": 1}') AS e \gset
SELECT id FROM postbox.outbox WHERE event_id = :'e';
SELECT pg_sleep(4);
COMMIT;
SQL
    y1_pid=$!
    for ((i = 0; i < 50; i++)); do
        [[ $(psql_q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                     AND query LIKE '%pg_sleep(4)%' AND pid <> pg_backend_pid()") == 1 ]] && break
        sleep 0.1
    done
    ((i < 50)) || fail "the producer's transaction did not start"
    # a batch in flight: ten events committed after y's first
    first=$(enq "$tag-z")
    for ((i = 1; i < 10; i++)); do last=$(enq "$tag-z"); done
    in_flight="{[$first,$((last + 1)))}"
    # the claim, as the relay's role: the first gap (ids below the batch in flight) holds the
    # paused row
    psql -XAtq -v ON_ERROR_STOP=1 -d "$relay_dsn" -F ' ' \
        -c "SELECT id, aggregate_id, sequence, parked FROM postbox.claim(100, 1, '{}', '$in_flight'::int8multirange)" \
        >"$PB_TMP/claim-$tag.out" 2>&1 &
    claim_pid=$!
    sleep 1
    wait "$y1_pid" || { cat "$PB_TMP/y1-$tag.out"; fail "the producer's first transaction failed"; }
    y1=$(head -1 "$PB_TMP/y1-$tag.out")
    y2=$(enq "$tag-y") # the next event of y, above the batch in flight
    say "paused row $pause_id, y's events $y1 (below the batch in flight $in_flight) and $y2 (above it)"
    wait "$claim_pid" || { cat "$PB_TMP/claim-$tag.out"; fail "the claim failed"; }
    sed 's/^/    claimed: /' "$PB_TMP/claim-$tag.out"
    # the interleaving happened: the claim began before y's first event was committed
    grep -q "^$pause_id " "$PB_TMP/claim-$tag.out" || fail "the claim did not return the paused row"
    ! grep -q "^$y1 " "$PB_TMP/claim-$tag.out" ||
        fail "the claim saw y's first event: it began too late to test anything"
    if grep -q "^$y2 " "$PB_TMP/claim-$tag.out"; then
        fail "the claim returned y's second event ($y2) without its first ($y1): out of order"
    fi
    say "the claim returned no event of y without its predecessor"
    # once both are visible, one claim returns them in order
    psql_q "DELETE FROM public.pb_test_pause_at"
    got=$(psql -XAtq -d "$relay_dsn" -c "SELECT string_agg(id::text, ',' ORDER BY id)
          FROM postbox.claim(100, 1, '{}', '$in_flight'::int8multirange) WHERE aggregate_id = '$tag-y'")
    [[ $got == "$y1,$y2" ]] || fail "the next claim returned y's events as '$got', not '$y1,$y2'"
    say "the next claim returns both, in order"
}
one_case ready false
one_case waiting true
