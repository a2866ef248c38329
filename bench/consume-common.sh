# shellcheck shell=bash
# Sourced by bench/consume-amqp, consume-nats, consume-kafka and consume-redis (after
# bench/side-by-side.sh): the scratch databases, one timed `postbox consume` run, the rounds and
# the summaries. Not a script of its own; see bench/README.md.
#
# The including script sets NAME, N, BATCH, ROUNDS, BIN, TOOL, DB_BASE and READY_RE (an array of
# extended regular expressions: the consumer's clock starts at the latest of their first matching
# log lines), exports the broker's POSTBOX_* settings, and defines
#   broker_run_setup    before every run (raw or postbox): a backlog or consumer name of its own
#   broker_raw          the raw consumer on that backlog; prints its msgs/s
#   broker_after_consume   after postbox consume stopped: checks with the broker that nothing is
#                       left unacknowledged (exit 1 otherwise)
# and LAST_ID, the message id of the backlog's last message (set by broker_run_setup or before).

SEQUENCE=${BENCH_SEQUENCE:-on}
# shellcheck disable=SC2034 # used by the including scripts
HANDLER=${BENCH_HANDLER:-"INSERT INTO bench_consumed (message_id, payload) VALUES (\$3::jsonb->>'message_id', \$1::jsonb)"}
CONSUMER_PID=''
WAITER_PID=''
TIMEOUT_S=${BENCH_TIMEOUT:-600}

consume_check_args() {
    local v
    for v in N SIZE BATCH ROUNDS TIMEOUT_S; do
        [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: $v must be a positive integer: '${!v}'" >&2; exit 2; }
    done
    ((SIZE >= 16)) || { echo "$NAME: payload size must be at least 16 bytes" >&2; exit 2; }
    [[ $SEQUENCE == on || $SEQUENCE == off ]] || { echo "$NAME: BENCH_SEQUENCE must be on or off: '$SEQUENCE'" >&2; exit 2; }
}
# the fill tools' flag for the aggregate_sequence header/field
seq_flag() { [[ $SEQUENCE == off ]] || echo --sequence; }

consume_kill() {
    local p
    for p in "$CONSUMER_PID" "$WAITER_PID"; do
        if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    done
}

# consume_setup: the scratch database(s), each made and initialised by its own binary
# (--vs: DB_BASE_old by OLD, DB_BASE_new by NEW; else DB_BASE by BIN)
consume_setup() {
    PG_BASE=${POSTBOX_PG_DSN%/*}
    ADMIN_DSN=$PG_BASE/postgres
    psql -XAtq -d "$ADMIN_DSN" -c "SELECT 1" >/dev/null 2>&1 ||
        { echo "$NAME: PostgreSQL is not reachable; run scripts/services start pg" >&2; exit 1; }
    if ((VS)); then
        local i
        for i in 0 1; do side_use "$i"; consume_fresh_db; done
    else
        DB=$DB_BASE
        export POSTBOX_PG_DSN=$PG_BASE/$DB
        consume_fresh_db
    fi
}
side_use() { BIN=${VS_BINS[$1]}; DB=${DB_BASE}_${VS_SIDES[$1]}; export POSTBOX_PG_DSN=$PG_BASE/$DB; }
sql() { psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f - <<<"$1"; }
consume_fresh_db() {
    psql -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_DSN" -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
    "$BIN" init >/dev/null 2>"$TMP/init.log" || { cat "$TMP/init.log" >&2; exit 1; }
    sql "CREATE TABLE bench_consumed (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, message_id text NOT NULL,
                                      payload jsonb NOT NULL, consumed_at timestamptz NOT NULL DEFAULT now())"
    ((VS)) && echo "$NAME: database $DB: made by $BIN init (schema version $(sql "SELECT max(version) FROM postbox.schema_migrations" 2>/dev/null || echo '?'))"
    return 0
}

now() { date +%s.%N; }
# shellcheck source=bench/stats.sh
. "$SRC/bench/stats.sh"
rate_of() { sed -n 's/.*seconds: \([0-9.]*\) msgs\/s.*/\1/p' <<<"$1"; }
last_id_of() { sed -n 's/.*last message_id \([^ ]*\).*/\1/p' <<<"$1"; }
TICK=$(getconf CLK_TCK)
cpu_ms_of() { # PID...: user + system CPU of running processes, in ms (gone ones count 0)
    local p
    for p in "$@"; do cat "/proc/$p/stat" 2>/dev/null || true; done |
        awk -v tick="$TICK" '{ sub(/^.*\) /, ""); split($0, f, " "); s += f[12] + f[13] } END { printf "%.0f\n", s * 1000 / tick }'
}
# The consumer's clock starts once it is connected to both servers (and for Kafka holds its
# partitions): the latest of the first lines matching READY_RE.
ready_time() {
    local re ts latest=0 t
    for re in "${READY_RE[@]}"; do
        ts=$(grep -m 1 -E "$re" "$1" | cut -d' ' -f1)
        [[ -n $ts ]] || { echo "$NAME: no line matching '$re' in the consumer's log:" >&2; tail -n 20 "$1" >&2; exit 1; }
        t=$(date -d "$ts" +%s.%N)
        latest=$(awk -v a="$latest" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
    done
    echo "$latest"
}

# consume_once: one postbox consume run of the current binary on its database, on the backlog
# broker_run_setup made; prints "msgs/s msgs/s-with-start-up cpu-ms cpu-ms-per-1000
# pg-cpu-ms-per-1000"
consume_once() {
    sql "TRUNCATE postbox.inbox, postbox.inbox_failures, postbox.inbox_dead, postbox.inbox_sequences, bench_consumed;
         VACUUM ANALYZE postbox.inbox, postbox.inbox_sequences, bench_consumed" 2>/dev/null
    # The waiting session polls every 10 ms for the last message's inbox row (a primary key
    # lookup: a count(*) of the growing inbox at that pace would take a quarter of a core from
    # the measured run), then for all N (the last one sent need not be the last committed).
    PGAPPNAME=pb_bench_waiter psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" >"$TMP/done_at" 2>&1 <<SQL &
DO \$\$ BEGIN
  WHILE NOT EXISTS (SELECT 1 FROM postbox.inbox WHERE consumer = 'bench' AND message_id = '$LAST_ID') LOOP
    PERFORM pg_sleep(0.01);
  END LOOP;
  WHILE (SELECT count(*) FROM postbox.inbox) < $N LOOP PERFORM pg_sleep(0.01); END LOOP;
END \$\$;
SELECT extract(epoch FROM clock_timestamp());
SQL
    WAITER_PID=$!
    sleep 0.2 # the waiter is connected and polling
    local t0 t1 tr rc=0 cpu_ms pg_ms rows dead backends started
    t0=$(now)
    "$BIN" consume 2>"$TMP/consume.log" &
    CONSUMER_PID=$!
    started=$SECONDS
    # the end is the waiter's clock; this loop only notices a consumer that died or hangs
    while kill -0 "$WAITER_PID" 2>/dev/null; do
        if ! kill -0 "$CONSUMER_PID" 2>/dev/null; then
            echo "$NAME: postbox consume ($BIN) exited:" >&2; tail -n 20 "$TMP/consume.log" >&2; exit 1
        fi
        if ((SECONDS - started > TIMEOUT_S)); then
            echo "$NAME: the inbox holds $(sql "SELECT count(*) FROM postbox.inbox") of $N rows after $TIMEOUT_S s:" >&2
            tail -n 20 "$TMP/consume.log" >&2; exit 1
        fi
        sleep 0.1
    done
    wait "$WAITER_PID" || rc=$?
    WAITER_PID=
    ((rc == 0)) || { echo "$NAME: the waiting session failed: $(cat "$TMP/done_at")" >&2; exit 1; }
    t1=$(<"$TMP/done_at")
    cpu_ms=$(cpu_ms_of "$CONSUMER_PID")
    # its PostgreSQL backends (every session in the database but the waiter's and this one)
    backends=$(sql "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
                    AND application_name <> 'pb_bench_waiter' AND pid <> pg_backend_pid()")
    # shellcheck disable=SC2086 # one pid a word
    pg_ms=$(cpu_ms_of $backends)
    kill -0 "$CONSUMER_PID" 2>/dev/null || { echo "$NAME: postbox consume exited:" >&2; tail -n 20 "$TMP/consume.log" >&2; exit 1; }
    kill -TERM "$CONSUMER_PID"
    rc=0
    wait "$CONSUMER_PID" || rc=$?
    CONSUMER_PID=
    ((rc == 0)) || { echo "$NAME: postbox consume exited with $rc on SIGTERM:" >&2; tail -n 20 "$TMP/consume.log" >&2; exit 1; }
    # the inbox, and with the default handler its table, hold N rows; nothing failed
    rows=$(sql "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL")
    [[ -n ${BENCH_HANDLER:-} ]] || rows=$(sql "SELECT least($rows, count(*)) FROM bench_consumed")
    dead=$(sql "SELECT (SELECT count(*) FROM postbox.inbox_dead) + (SELECT count(*) FROM postbox.inbox_failures)")
    ((rows == N && dead == 0)) || { echo "$NAME: after postbox consume: $rows handled, $dead failed or dead (expected $N, 0)" >&2; exit 1; }
    broker_after_consume
    tr=$(ready_time "$TMP/consume.log")
    awk -v n="$N" -v t0="$t0" -v tr="$tr" -v t1="$t1" -v c="$cpu_ms" -v pg="$pg_ms" \
        'BEGIN { printf "%.0f %.0f %.0f %.1f %.1f\n", n / (t1 - tr), n / (t1 - t0), c, c / (n / 1000), pg / (n / 1000) }'
}

# consume_main: the rounds, alone (raw, consume) or --vs (raw, one side, raw, the other, raw, ...)
consume_main() {
    local r i raw rate whole cpu_ms per1000 pg1000 ratio before after
    if ((VS)); then
        echo "$NAME --vs: $ROUNDS round(s) of (old, new) in alternating order, a raw consumer run between every two consume runs"
        echo "            old ${VS_BINS[0]} (database ${DB_BASE}_old)"
        echo "            new ${VS_BINS[1]} (database ${DB_BASE}_new)"
        echo "            raw $TOOL"
        : >"$TMP/vs.rec"
        broker_run_setup
        before=$(broker_raw)
        for ((r = 1; r <= ROUNDS; r++)); do
            for i in $(vs_order "$r"); do
                side_use "$i"
                broker_run_setup
                consume_once >"$TMP/once"
                read -r rate whole cpu_ms per1000 pg1000 <"$TMP/once"
                broker_run_setup
                after=$(broker_raw)
                ratio=$(vs_record "$r" consume "${VS_SIDES[$i]}" "$rate" "$before" "$after" "$per1000" "$pg1000")
                printf 'round %d %s: consume %s msgs/s (%s with its start-up), raw %s msgs/s before, %s after, ratio %.2f, consumer CPU %s ms per 1000, its PostgreSQL backends %s ms per 1000\n' \
                    "$r" "${VS_SIDES[$i]}" "$rate" "$whole" "$before" "$after" "$ratio" "$per1000" "$pg1000"
                before=$after
            done
        done
        consume_vs_summary
        return
    fi
    : >"$TMP/raw"; : >"$TMP/consume"; : >"$TMP/cpu"; : >"$TMP/pgcpu"; : >"$TMP/ratio"
    for ((r = 1; r <= ROUNDS; r++)); do
        broker_run_setup
        raw=$(broker_raw)
        broker_run_setup
        consume_once >"$TMP/once"
        read -r rate whole cpu_ms per1000 pg1000 <"$TMP/once"
        ratio=$(awk -v a="$rate" -v b="$raw" 'BEGIN { printf "%.2f\n", a / b }')
        echo "$raw" >>"$TMP/raw"; echo "$rate" >>"$TMP/consume"; echo "$per1000" >>"$TMP/cpu"
        echo "$pg1000" >>"$TMP/pgcpu"; echo "$ratio" >>"$TMP/ratio"
        printf 'round %d: raw consumer %s msgs/s, postbox consume %s msgs/s (%s with its start-up), ratio %s, consumer CPU %s ms (%s ms per 1000 messages), its PostgreSQL backends %s ms per 1000\n' \
            "$r" "$raw" "$rate" "$whole" "$ratio" "$cpu_ms" "$per1000" "$pg1000"
    done
    awk -v rate="$(median <"$TMP/consume")" -v raw="$(median <"$TMP/raw")" -v cpu="$(median <"$TMP/cpu")" \
        -v pg="$(median <"$TMP/pgcpu")" -v ratio="$(median <"$TMP/ratio")" 'BEGIN {
        printf "median: postbox consume %.0f msgs/s; raw consumer %.0f msgs/s\n", rate, raw
        printf "ratio consume/raw: %.2f (median of the rounds; %.2f from the medians); target >= 0.8\n", ratio, rate / raw
        printf "CPU per 1000 messages (user+sys): consumer %.1f ms, its PostgreSQL backends %.1f ms; wall %.1f ms\n", cpu, pg, 1000000 / rate
        if (pg > 0)
            printf "(its PostgreSQL backends alone, at that CPU per message, allow at most %.0f msgs/s per lane)\n", 1000000 / pg
    }'
}

# consume_vs_summary: per side the medians; new/old = median over the rounds of ratio(new) /
# ratio(old) of the same round, and in how many rounds it is above 1
consume_vs_summary() {
    local s q
    echo
    echo "side by side: old = ${VS_BINS[0]}"
    echo "              new = ${VS_BINS[1]}"
    printf '%-4s %11s %10s %11s %15s %14s %14s\n' side "consume/s" "raw/s" "ratio(med)" "ratio(min..max)" "CPU ms/1000" "PG CPU ms/1000"
    for s in old new; do
        printf '%-4s %11.0f %10.0f %11.3f %15s %14.1f %14.1f\n' "$s" \
            "$(vs_column consume $s 4 | median)" "$(vs_column consume $s raw | median)" \
            "$(vs_column consume $s 8 | median)" "$(vs_column consume $s 8 | vs_minmax)" \
            "$(vs_column consume $s 7 | median)" "$(vs_column consume $s 9 | median)"
    done
    q=$(vs_quotients consume)
    printf 'ratio new/old: median %.3f, above 1 in %d of %d rounds (rounds: %s); ratio of the median ratios %.3f\n' \
        "$(median <<<"$q")" "$(awk '$1 > 1' <<<"$q" | wc -l)" "$(wc -l <<<"$q")" "$(tr '\n' ' ' <<<"$q" | sed 's/ $//')" \
        "$(awk -v a="$(vs_column consume new 8 | median)" -v b="$(vs_column consume old 8 | median)" 'BEGIN { printf "%.3f", a / b }')"
    echo "(ratio: consume msgs/s / the mean of the raw consumer's runs just before and just after it; targets:"
    echo " new/old >= 1 beyond the noise (run --vs OLD OLD to see it), each ratio >= 0.8)"
}
