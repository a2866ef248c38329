#!/usr/bin/env bash
# cdc capture: the events of committed transactions all arrive, in commit order, each
# transaction's events together and in the order they were written; events of rolled-back
# transactions and of rolled-back savepoints never arrive.
#
# Several producer sessions run concurrently (their statements interleave in the WAL), each
# writing transactions of 1-5 events (some of 40, more than a relay batch) that mix table rows
# (postbox.enqueue) and logical messages (postbox.emit). A committed transaction takes an
# advisory lock last and records nextval() of a sequence in a side table: the lock is held until
# the commit record is written, so that number is the commit order.
#
# With PB_CDC_PG_OPTS (cdc_commit_order_streamed.sh) on a PostgreSQL of the test's own started
# with those options, and PB_CDC_PAD bytes of padding in every payload: there, with a small
# logical_decoding_work_mem, transactions stream while in progress (pgoutput protocol 2), their
# blocks interleave, and they must still arrive whole, in commit order; the server must have
# streamed some (pg_stat_replication_slots.stream_txns).
source "$(dirname "$0")/lib.sh"

PRODUCERS=4 TXNS=80 BATCH=16
PAD=${PB_CDC_PAD:-0}
[[ -z ${PB_CDC_PG_OPTS:-} ]] || use_private_pg "$PB_CDC_PG_OPTS"
pb_init
use_least_privilege --set relay.capture=cdc # the relay: postbox_relay, REPLICATION
setup_queue '#'
if [[ -n ${PB_CDC_PG_OPTS:-} ]]; then
    export POSTBOX_CDC_SLOT=pb_$PB_TEST # on our server, gone with it
else
    cdc_use_slot
fi
psql_q "CREATE SEQUENCE commit_seq;
        CREATE TABLE commits (p int, t int, n int, cseq bigint, PRIMARY KEY (p, t))"
start_cdc_relay --set relay.batch_size=$BATCH --set log.level=debug

# producer P: TXNS transactions; one event statement per line, so sessions interleave
producer_sql() {
    awk -v p="$1" -v T="$TXNS" -v padlen="$PAD" 'BEGIN {
        seq = 0
        pad = ""
        for (c = 0; c < padlen; c++) pad = pad "x"
        if (padlen > 0) pad = ", \"pad\": \"" pad "\""
        for (t = 1; t <= T; t++) {
            n = (t % 7 == 3) ? 40 : 1 + (t * 7 + p * 3) % 5
            rb = (t % 5 == 2)            # rolled back
            sp = (!rb && t % 6 == 1)     # a rolled-back savepoint in a committed transaction
            print "BEGIN;"
            for (i = 1; i <= n; i++) {
                if (sp && i == 2) {
                    print "SAVEPOINT s;"
                    printf "SELECT postbox.enqueue(%s, %s, %s, %s);\n", "'\''order'\''", "'\''agg-sp'\''", "'\''created.v1'\''", "'\''{\"sp\": 1, \"p\": " p ", \"t\": " t "}'\''"
                    printf "SELECT postbox.emit(%s, %s, %s, %s);\n", "'\''order'\''", "'\''agg-sp'\''", "'\''created.v1'\''", "'\''{\"sp\": 1, \"p\": " p ", \"t\": " t "}'\''"
                    print "ROLLBACK TO SAVEPOINT s;"
                }
                seq++
                fn = (i % 2) ? "enqueue" : "emit"
                body = sprintf("{\"p\": %d, \"t\": %d, \"i\": %d, \"n\": %d, \"seq\": %d%s%s}", p, t, i, n, seq, rb ? ", \"rb\": 1" : "", pad)
                printf "SELECT postbox.%s('\''order'\'', '\''agg-%d-%d'\'', '\''created.v1'\'', '\''%s'\'');\n", fn, p, seq % 3, body
                if (i % 3 == 0) print "SELECT pg_sleep(0.001);"
            }
            if (rb) print "ROLLBACK;"
            else {
                print "SELECT pg_advisory_xact_lock(4242);"
                printf "INSERT INTO commits VALUES (%d, %d, %d, nextval('\''commit_seq'\''));\n", p, t, n
                print "COMMIT;"
            }
        }
    }'
}
producer_pids=()
for ((p = 1; p <= PRODUCERS; p++)); do
    producer_sql $p >"$PB_TMP/producer_$p.sql"
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f "$PB_TMP/producer_$p.sql" >/dev/null &
    producer_pids+=($!)
    PB_PIDS+=($!)
done
for pid in "${producer_pids[@]}"; do wait "$pid" || fail "a producer session failed"; done

expected=$(psql_q "SELECT coalesce(sum(n), 0) FROM commits")
txns=$(psql_q "SELECT count(*) FROM commits")
rolled_back=$((PRODUCERS * TXNS - txns))
say "$PRODUCERS producers committed $txns transactions with $expected events, rolled back $rolled_back (plus a rolled-back savepoint in some)"
((expected > 500 && rolled_back > 0)) || fail "the producers did not write what the test needs"
cdc_wait_caught_up 60
sleep 1 # anything extra (a rolled-back event, a duplicate) would arrive now
pid_alive "$RELAY_PID" || fail "the relay exited"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
restarts=$(grep -c 'streaming slot' "$PB_RELAY_LOG" || true)
((restarts == 1)) || fail "the relay reconnected to the stream: $restarts 'streaming slot' lines"

drain_queue "$PB_TMP/got" "$expected" 1000 60
psql_q "SELECT p || ' ' || t || ' ' || n || ' ' || cseq FROM commits" >"$PB_TMP/commits"
stats=$(awk -F'\t' '
    FNR == NR { split($0, f, " "); k = f[1] ":" f[2]; n[k] = f[3]; cseq[k] = f[4]; want += f[3]; ntx++; next }
    function num(key,   s) {
        if (!match($6, "\"" key "\"[ ]*:[ ]*[0-9]+")) return -1
        s = substr($6, RSTART, RLENGTH); sub(/^.*:[ ]*/, "", s); return s + 0
    }
    function err(msg) { bad++; if (bad <= 10) print msg > "/dev/stderr" }
    {
        total++
        if ($1 in seen) { dup++; next }
        seen[$1] = 1; distinct++
        if (num("sp") >= 0) { err("event of a rolled-back savepoint arrived: " $6); next }
        if (num("rb") >= 0) { err("event of a rolled-back transaction arrived: " $6); next }
        k = num("p") ":" num("t"); i = num("i")
        if (!(k in n)) { err("event of an unknown transaction arrived: " $6); next }
        if (k != cur) {
            if (cur != "" && got[cur] < n[cur]) err("transaction " cur " interrupted after " got[cur] " of " n[cur] " events by " k)
            if (k in got) err("transaction " k " arrived in two pieces")
            else if (cur != "" && cseq[k] <= cseq[cur]) { order++; err("transaction " k " (commit #" cseq[k] ") arrived after " cur " (commit #" cseq[cur] ")") }
            cur = k; txs++
        }
        if (i != got[k] + 1) err("transaction " k ": event " i " arrived after event " got[k])
        got[k]++
    }
    END {
        for (k in n) if (got[k] != n[k]) { missing += n[k] - got[k]; err("transaction " k ": " got[k] + 0 " of " n[k] " events arrived") }
        printf "messages: %d total, %d distinct, %d duplicates; %d of %d transactions, in commit order: %s; events missing: %d; problems: %d\n",
            total, distinct, dup, txs, ntx, order ? "NO" : "yes", missing, bad
        exit bad > 0 ? 1 : 0
    }' "$PB_TMP/commits" "$PB_TMP/got") || fail "$stats"
say "$stats"
stats=$(check_order "$PB_TMP/got") || fail "per-aggregate order broken: $stats"
say "$stats"
dups=$(duplicates_in "$PB_TMP/got")
((dups == 0)) || fail "$dups duplicate(s) although the relay never restarted"
psql_q "SELECT event_id FROM postbox.outbox_all" | LC_ALL=C sort >"$PB_TMP/db_ids"
cut -f1 "$PB_TMP/got" | LC_ALL=C sort -u >"$PB_TMP/got_ids"
missing=$(LC_ALL=C comm -23 "$PB_TMP/db_ids" "$PB_TMP/got_ids" | wc -l)
((missing == 0)) || fail "$missing outbox row(s) never arrived"
rows=$(psql_q "SELECT count(*) FROM postbox.outbox_all")
say "outbox rows (table events): $rows; emitted events: $((expected - rows))"
check_cdc_marked
if [[ -n ${PB_CDC_PG_OPTS:-} ]]; then
    streamed=$(psql_q "SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = '$POSTBOX_CDC_SLOT'")
    say "transactions streamed while in progress: $streamed"
    ((streamed > 0)) || fail "the server streamed no transaction: the test tested nothing"
fi
