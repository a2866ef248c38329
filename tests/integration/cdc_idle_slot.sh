#!/usr/bin/env bash
# An idle outbox on a busy database: while another table takes ~10,000 rows a second for 20 s
# (a procedure committing 100 rows every 10 ms in a session of its own) and nothing is written to
# the outbox, the cdc relay keeps its slot moving: the part of the slot's lag the relay answers
# for (the walsender's sent position - confirmed_flush_lsn) stays under LAG_BOUND, and once the
# load stops the whole lag (current WAL position - confirmed_flush_lsn) falls under it within
# seconds. Without the idle advance (confirming the keepalive's WAL end between transactions)
# both would grow with all the WAL written. (The whole lag during the load also counts the WAL
# the walsender has not decoded yet, which depends on the CPU it gets: printed, not bounded.)
# On a PostgreSQL of the test's own: the WAL of other tests on the shared server would be
# decoded too and blur the figures.
source "$(dirname "$0")/lib.sh"

SECONDS_BUSY=20
ROWS_PER_TICK=100 # every 10 ms: 10,000 rows a second
LAG_BOUND=$((4 * 1024 * 1024))

use_private_pg
pb_init
setup_queue '#'
export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
psql_q "CREATE TABLE public.busy (id bigserial PRIMARY KEY, v int NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE PROCEDURE public.churn(secs int, per_tick int) LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz := clock_timestamp();
    tick int := 0;
BEGIN
    WHILE clock_timestamp() < t0 + make_interval(secs => secs) LOOP
        INSERT INTO public.busy (v) SELECT g FROM generate_series(1, per_tick) g;
        COMMIT;
        tick := tick + 1;
        -- paced to the clock, so a slow tick is caught up by the next ones
        PERFORM pg_sleep(greatest(0, extract(epoch FROM t0 + tick * interval '10 ms' - clock_timestamp())));
    END LOOP;
END
\$\$" >/dev/null

start_cdc_relay --set cdc.lag_interval=1s
# a first event, so the slot has something to confirm past its creation point
enqueue_seq 1 1 1
cdc_wait_caught_up 30

start_lsn=$(psql_q "SELECT pg_current_wal_lsn()")
psql -XAtq -d "$POSTBOX_PG_DSN" -c "CALL public.churn($SECONDS_BUSY, $ROWS_PER_TICK)" &
churn_pid=$!
PB_PIDS+=("$churn_pid")
# relay's part|whole lag; the relay's part is 0 while the walsender is between connections
lags() {
    psql_q "SELECT greatest(coalesce((r.sent_lsn - s.confirmed_flush_lsn)::bigint, 0), 0) || '|' ||
                   (pg_current_wal_lsn() - s.confirmed_flush_lsn)::bigint
            FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
            WHERE s.slot_name = '$POSTBOX_CDC_SLOT'"
}
max_lag=0 max_total=0 samples=0 sum=0
while pid_alive "$churn_pid"; do
    pair=$(lags)
    [[ -n $pair ]] || fail "slot $POSTBOX_CDC_SLOT is gone"
    lag=${pair%|*} total=${pair#*|}
    ((lag > max_lag)) && max_lag=$lag
    ((total > max_total)) && max_total=$total
    samples=$((samples + 1)) sum=$((sum + lag))
    sleep 0.5
done
wait "$churn_pid" || fail "the churn procedure failed"
pid_alive "$RELAY_PID" || fail "the relay exited during the load"
rows=$(psql_q "SELECT count(*) FROM public.busy")
wal=$(psql_q "SELECT (pg_current_wal_lsn() - '$start_lsn'::pg_lsn)::bigint")
t_end=$SECONDS
wait_until '(($(lags | cut -d"|" -f2) < LAG_BOUND))' 30 ||
    fail "the slot's lag is still $(lags | cut -d"|" -f2) bytes 30 s after the load (bound $LAG_BOUND)"
settled=$((SECONDS - t_end)) end_lag=$(lags | cut -d"|" -f2)
rate=$((rows / SECONDS_BUSY))
say "load: $rows rows into public.busy in ${SECONDS_BUSY}s (~$rate rows/s), $((wal / 1024)) kB of WAL; over $samples samples the relay's part of the slot lag (sent - confirmed) was at most $((max_lag / 1024)) kB (mean $((sum / samples / 1024)) kB), the whole lag (current - confirmed) at most $((max_total / 1024)) kB; $((end_lag / 1024)) kB within ${settled}s after the load (bound $((LAG_BOUND / 1024)) kB)"
((rate >= 8000)) || fail "the load reached only $rate rows/s (wanted ~10,000): the test proves nothing"
((wal > 3 * LAG_BOUND)) || fail "only $wal bytes of WAL were written: a slot that never moved would stay under the bound"
((max_lag < LAG_BOUND)) || fail "the relay's part of the slot lag reached $max_lag bytes (bound $LAG_BOUND) while the outbox was idle"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
say "ok: an idle outbox on a database taking ~$rate rows/s kept its slot within $((max_lag / 1024)) kB"
