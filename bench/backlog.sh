# shellcheck shell=bash
# Sourced by bench/relay-amqp, bench/relay-nats and bench/relay-cdc: how the backlog is written
# (BENCH_FILL) and whether the planner's statistics know about it (BENCH_STATS); the check that a
# scratch database is fresh. Not a script of its own; see bench/README.md.
#
#   BENCH_FILL=bulk       one statement enqueues the N events, as before (the default)
#   BENCH_FILL=txns       BENCH_FILL_CLIENTS (8) psql sessions in parallel commit the N events in
#                         transactions of 1-10 events each (SELECT postbox.enqueue(...) per event)
#   BENCH_STATS=analyzed  ANALYZE postbox.outbox once the backlog is written (the default)
#   BENCH_STATS=stale     autovacuum off on postbox.outbox; before each backlog the drained outbox
#                         is vacuumed and analyzed (as autovacuum would after the drain), the
#                         backlog is not: pg_class still says ~0 rows when the relay starts
#   BENCH_SEQUENCE=on     outbox rows get their aggregate's sequence number (schema 9), as
#                         every producer's do (the default)
#   BENCH_SEQUENCE=off    an ablation, not a user's case: the numbering trigger is disabled on
#                         the scratch outbox after init, so the rows have none and the relay sends
#                         no aggregate_sequence header, the messages of a binary before schema 9
#                         (the fill writes no aggregate_sequences rows either; postbox.emit,
#                         relay-cdc's emit mode, still numbers its events)
#
# The including script defines $TMP, $N, $PAD and sql (SQL on stdin-string -> the current
# database), and calls backlog_empty, backlog_fill FUNCTION, backlog_stats before each relay run.

FILL=${BENCH_FILL:-bulk}
STATS=${BENCH_STATS:-analyzed}
FILL_CLIENTS=${BENCH_FILL_CLIENTS:-8}
SEQUENCE=${BENCH_SEQUENCE:-on}
FILL_PIDS=()

backlog_check() { # NAME
    [[ $FILL == bulk || $FILL == txns ]] || { echo "$1: BENCH_FILL must be bulk or txns: '$FILL'" >&2; exit 2; }
    [[ $STATS == analyzed || $STATS == stale ]] || { echo "$1: BENCH_STATS must be analyzed or stale: '$STATS'" >&2; exit 2; }
    [[ $SEQUENCE == on || $SEQUENCE == off ]] || { echo "$1: BENCH_SEQUENCE must be on or off: '$SEQUENCE'" >&2; exit 2; }
    [[ $FILL_CLIENTS =~ ^[1-9][0-9]*$ ]] || { echo "$1: BENCH_FILL_CLIENTS must be a positive integer: '$FILL_CLIENTS'" >&2; exit 2; }
}
backlog_describe() {
    local f s
    if [[ $FILL == bulk ]]; then f="fill bulk"; else f="fill txns ($FILL_CLIENTS parallel sessions, transactions of 1-10 events)"; fi
    if [[ $STATS == analyzed ]]; then s="stats analyzed after the fill"; else s="stats stale (analyzed empty, autovacuum off on postbox.outbox)"; fi
    [[ $SEQUENCE == on ]] || s="$s, sequence numbering off (ablation: no aggregate_sequence header)"
    echo "$f, $s"
}

# fresh_db_before / fresh_db_after BIN: around `BIN init` of a just created scratch database:
# no postbox schema before, an empty outbox after (and autovacuum off on it with BENCH_STATS=stale)
fresh_db_before() {
    [[ $(psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'postbox'") == 0 ]] ||
        { echo "bench: database ${POSTBOX_PG_DSN##*/} is not fresh: it has a postbox schema before init" >&2; exit 1; }
}
fresh_db_after() { # BIN
    local rows
    rows=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "SELECT count(*) FROM postbox.outbox") ||
        { echo "bench: ${POSTBOX_PG_DSN##*/}: no postbox.outbox after $1 init" >&2; exit 1; }
    ((rows == 0)) || { echo "bench: ${POSTBOX_PG_DSN##*/}: $rows rows in postbox.outbox after init" >&2; exit 1; }
    if [[ $STATS == stale ]]; then
        psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "ALTER TABLE postbox.outbox SET (autovacuum_enabled = false)" >/dev/null
    fi
    local av= trig
    [[ $STATS == analyzed ]] || av=", autovacuum off on postbox.outbox"
    if [[ $SEQUENCE == off ]]; then
        trig=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'postbox.outbox'::regclass AND tgname = 'outbox_sequence'")
        if ((trig)); then
            psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c "ALTER TABLE postbox.outbox DISABLE TRIGGER outbox_sequence" >/dev/null
            av="$av, sequence numbering off"
        fi
    fi
    echo "            database ${POSTBOX_PG_DSN##*/}: created fresh (no postbox schema before), initialised by $1 init, outbox empty$av"
}

# the outbox empty before a backlog: truncated (BENCH_STATS=analyzed, as before), or, stale: what a
# drain leaves (rows deleted), vacuumed and analyzed empty without giving back its pages, so
# pg_class says relpages P, reltuples 0 (the first round on a fresh database: 0 pages)
backlog_empty() {
    if [[ $STATS == analyzed ]]; then
        sql "TRUNCATE postbox.outbox, postbox.outbox_published, postbox.dead_letters" >/dev/null
    else
        sql "DELETE FROM postbox.outbox;
             TRUNCATE postbox.outbox_published, postbox.dead_letters;
             VACUUM (ANALYZE, TRUNCATE false) postbox.outbox" >/dev/null
    fi
}

# the SQL of each fill session, made once per function (enqueue, emit): session k gets events
# k+1, k+1+C, ...; transactions of 1-10 events (a fixed pseudo-random sequence per session), each
# BEGIN, one SELECT postbox.FUNCTION(...) per event, COMMIT, sent as one request (psql's \;: a
# round trip per transaction, not per statement); aggregate agg-(i % 100) and a payload of SIZE
# bytes as the bulk fill's
backlog_scripts() { # FUNCTION
    [[ -s $TMP/fill.$1.0.sql ]] && return 0
    awk -v n="$N" -v c="$FILL_CLIENTS" -v pad="$PAD" -v fn="$1" -v dir="$TMP" 'BEGIN {
        p = sprintf("%" pad "s", ""); gsub(/ /, "x", p)
        for (k = 0; k < c; k++) {
            f = dir "/fill." fn "." k ".sql"; seed = 7919 * (k + 1); left = 0; open = 0
            for (i = k + 1; i <= n; i += c) {
                if (left == 0) {
                    if (open) print "COMMIT;" > f
                    seed = (seed * 16807) % 2147483647; left = 1 + seed % 10
                    printf "BEGIN \\; " > f; open = 1; txns++
                }
                printf "SELECT postbox.%s(%cbench%c, %cagg-%d%c, %cbench.event.v1%c, %c{\"pad\": \"%s\"}%c) \\; ",
                       fn, 39, 39, 39, i % 100, 39, 39, 39, 39, p, 39 > f
                left--
            }
            if (open) print "COMMIT;" > f
            close(f)
        }
        print txns > (dir "/fill." fn ".txns")
    }'
}

# backlog_fill FUNCTION BULK_SQL: the N events into the current database, timed; BULK_SQL is the
# including script's own fill (BENCH_FILL=bulk), FUNCTION (enqueue/emit) the one the sessions call
backlog_fill() {
    local fn=$1 bulk=$2 t0 t1 k p rc=0 txns=
    t0=$(date +%s.%N)
    if [[ $FILL == bulk ]]; then
        sql "$bulk" >/dev/null
    else
        backlog_scripts "$fn"
        FILL_PIDS=()
        for ((k = 0; k < FILL_CLIENTS; k++)); do
            psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$TMP/fill.$fn.$k.sql" >/dev/null &
            FILL_PIDS+=($!)
        done
        for p in "${FILL_PIDS[@]}"; do wait "$p" || rc=$?; done
        FILL_PIDS=()
        ((rc == 0)) || { echo "bench: a fill session failed ($rc)" >&2; exit 1; }
        txns=$(<"$TMP/fill.$fn.txns")
    fi
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" -v t="${txns:-1}" 'BEGIN { printf "%.2f %s\n", b - a, t }' >"$TMP/fill.time"
}
backlog_kill() { local p; for p in "${FILL_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }

# backlog_stats [ROWS_EXPECTED]: ANALYZE (analyzed) or not (stale), a CHECKPOINT (the drain that
# follows does not write out the fill's pages and WAL, whose size depends on the schema of the
# side), then what the planner sees of postbox.outbox just before the relay starts, into
# $TMP/fill.last: "fill-seconds transactions reltuples relpages planner-rows pages"
backlog_stats() {
    local want=${1:-$N} st
    [[ $STATS == stale ]] || sql "ANALYZE postbox.outbox" >/dev/null
    sql "CHECKPOINT" >/dev/null
    st=$(sql "SELECT c.reltuples::bigint, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int
                FROM pg_class c WHERE c.oid = 'postbox.outbox'::regclass;
              EXPLAIN SELECT * FROM postbox.outbox" |
         awk -F'|' 'NR == 1 { t = $1; rp = $2; pg = $3 } NR == 2 { match($0, /rows=[0-9]+/); r = substr($0, RSTART + 5, RLENGTH - 5) }
                    END { print t, rp, r, pg }')
    echo "$(<"$TMP/fill.time") $st" >"$TMP/fill.last"
    if [[ $STATS == stale ]] && (($(cut -d' ' -f1 <<<"$st") * 10 > want)); then
        echo "bench: warning: BENCH_STATS=stale but postbox.outbox's reltuples is $(cut -d' ' -f1 <<<"$st") with $want events written" >&2
    fi
}
# ", fill S s (R events/s), reltuples T (planner E rows, P of C pages)" of the last backlog
backlog_note() {
    awk -v n="$N" '{ printf ", fill %.2fs (%.0f events/s), reltuples %s (planner %s rows, relpages %s of %s)", $1, n / $1, $3, $5, $4, $6 }' "$TMP/fill.last"
}
# backlog_record ROUND MODE SIDE: appends the last backlog's figures to $TMP/fill.rec
backlog_record() { echo "$1 $2 $3 $(<"$TMP/fill.last")" >>"$TMP/fill.rec"; }
# backlog_summary MODE...: per mode and side, the fill time and what pg_class said at the relay's start
backlog_summary() {
    local m s k
    [[ -s $TMP/fill.rec ]] || return 0
    col() { awk -v m="$1" -v s="$2" -v f="$3" '$2 == m && $3 == s { print $f }' "$TMP/fill.rec"; }
    range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s..%s\n", lo, hi }'; }
    echo
    echo "backlog: $(backlog_describe)"
    for m in "$@"; do
        for s in old new -; do
            k=$(col "$m" "$s" 4 | wc -l)
            ((k > 0)) || continue
            awk -v m="$m" -v s="$s" -v n="$N" -v f="$(col "$m" "$s" 4 | median)" -v t="$(col "$m" "$s" 6 | range)" \
                -v x="$(col "$m" "$s" 8 | range)" -v r1="$(awk -v m="$m" -v s="$s" '$1 == 1 && $2 == m && $3 == s { print $6 " (planner " $8 " rows)" }' "$TMP/fill.rec")" \
                'BEGIN { printf "%-11s %-4s fill median %.2fs (%.0f events/s); at the relay start reltuples %s, planner rows %s; round 1: reltuples %s\n", m, s, f, n / f, t, x, r1 }'
        done
    done
}
