#!/usr/bin/env bash
# Per-aggregate sequence numbers under concurrent producers (sql/008_aggregate_sequence.sql): 8
# producer sessions write events of 10 aggregates at once, 300 transactions of 5 events each,
# every sixth transaction rolled back: 10,000 committed events. The producers write in the ways
# there are: postbox.enqueue (producers 0-3), a plain INSERT into postbox.outbox (4), the
# postbox.capture trigger on a business table (5), postbox.emit, which writes no row, only a WAL
# message (6, read back through a test_decoding slot), and a mix of enqueue and emit (7). Each
# transaction takes its aggregates in sorted order (see the migration on deadlocks). At the end
# each aggregate's committed events, rows and WAL messages together, carry the sequence numbers
# 1..n exactly once each, n = its committed events, and the counter row says n.
source "$(dirname "$0")/lib.sh"

N_PROD=8 N_TX=300 PER_TX=5 N_AGG=10
SLOT=pb_sequence_concurrent
pb_init
psql_q "CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL, n int NOT NULL DEFAULT 0);
        INSERT INTO orders SELECT 'agg-' || a, 'new' FROM generate_series(0, $((N_AGG - 1))) a;
        CREATE TRIGGER orders_changed AFTER UPDATE ON orders FOR EACH ROW
            EXECUTE FUNCTION postbox.capture('order', 'id', 'order.changed.v1');"
psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT pg_drop_replication_slot('$SLOT') FROM pg_replication_slots WHERE slot_name = '$SLOT'" >/dev/null
on_exit "psql -XAtq -d '$POSTBOX_PG_DSN' -c \"SELECT pg_drop_replication_slot('$SLOT')\" >/dev/null 2>&1"
psql_q "SELECT 1 FROM pg_create_logical_replication_slot('$SLOT', 'test_decoding')" >/dev/null

producer_script() { # P: N_TX transactions, each with its aggregates sorted
    awk -v p="$1" -v ntx=$N_TX -v per=$PER_TX -v nagg=$N_AGG -v seed="$1$RANDOM" '
        function ev(a,   way) {
            way = p
            if (p == 7) way = rand() < 0.5 ? 0 : 6
            if (way == 4) return "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES (\x27order\x27, \x27" a "\x27, \x27step.v1\x27, \x27{\"p\": " p "}\x27);"
            if (way == 5) return "UPDATE orders SET n = n + 1 WHERE id = \x27" a "\x27;"
            if (way == 6) return "SELECT postbox.emit(\x27order\x27, \x27" a "\x27, \x27step.v1\x27, \x27{\"p\": " p "}\x27);"
            return "SELECT postbox.enqueue(\x27order\x27, \x27" a "\x27, \x27step.v1\x27, \x27{\"p\": " p "}\x27);"
        }
        BEGIN {
            srand(seed)
            for (t = 1; t <= ntx; t++) {
                print "BEGIN;"
                for (k = 0; k < per; k++) x[k] = int(rand() * nagg)
                for (i = 1; i < per; i++) for (j = i; j > 0 && x[j - 1] > x[j]; j--) { y = x[j]; x[j] = x[j - 1]; x[j - 1] = y }
                for (k = 0; k < per; k++) print ev("agg-" x[k])
                print (t % 6 == 0) ? "ROLLBACK;" : "COMMIT;"
            }
        }'
}
pids=()
for ((p = 0; p < N_PROD; p++)); do
    producer_script $p >"$PB_TMP/producer-$p.sql"
done
t0=$(date +%s%N)
for ((p = 0; p < N_PROD; p++)); do
    psql -Xq -d "$POSTBOX_PG_DSN" -f "$PB_TMP/producer-$p.sql" >"$PB_TMP/producer-$p.out" 2>&1 &
    pids+=($!)
    PB_PIDS+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
say "8 producers done in $((($(date +%s%N) - t0) / 1000000)) ms"
deadlocks=$(cat "$PB_TMP"/producer-*.out | grep -c 'deadlock detected' || true)
errors=$(cat "$PB_TMP"/producer-*.out | grep -c 'ERROR' || true)
((errors == deadlocks)) || { grep -h ERROR "$PB_TMP"/producer-*.out | sort | uniq -c | head >&2; fail "producer errors other than deadlocks"; }

# every committed event with its aggregate and number: outbox rows, then emitted WAL messages
psql_q "SELECT aggregate_id || E'\\t' || coalesce(sequence::text, '-') FROM postbox.outbox_all" >"$PB_TMP/seqs"
rows=$(wc -l <"$PB_TMP/seqs")
psql_q "SELECT data FROM pg_logical_slot_get_changes('$SLOT', NULL, NULL) WHERE data LIKE 'message: transactional: 1 prefix: postbox,%'" |
    sed -n 's/^[^{]*\({.*}\)$/\1/p' | jq -r '[.aggregate_id, (.sequence | tostring)] | @tsv' >>"$PB_TMP/seqs"
emitted=$(($(wc -l <"$PB_TMP/seqs") - rows))
total=$(wc -l <"$PB_TMP/seqs")
expected=$((N_PROD * (N_TX - N_TX / 6) * PER_TX - deadlocks * PER_TX))
say "committed events: $total ($rows outbox rows, $emitted emitted), expected $expected; $deadlocks transaction(s) aborted by deadlocks"
((total == expected)) || fail "$total committed events, expected $expected"
((emitted > 0 && rows > 0)) || fail "no emitted events or no rows"

# per aggregate: the numbers sorted must be exactly 1..n
bad=$(sort -k1,1 -k2,2n "$PB_TMP/seqs" | awk -F'\t' '
    $2 !~ /^[0-9]+$/ { print "no sequence: " $0; next }
    $1 != agg { if (agg != "" && n != last) print agg ": " n " events, last number " last; agg = $1; n = 0; last = 0 }
    { n++; if ($2 != n) { print agg ": number " $2 " where " n " was due"; n = $2 }; last = $2 }
    END { if (n != last) print agg ": " n " events, last number " last }')
[[ -z $bad ]] || fail "sequence numbers with gaps or repeats: $(head -5 <<<"$bad")"
counters=$(cut -f1 "$PB_TMP/seqs" | sort | uniq -c | awk '{print $2 "|" $1}' | sort)
stored=$(psql_q "SELECT aggregate_id || '|' || last_sequence FROM postbox.aggregate_sequences WHERE aggregate_type = 'order' ORDER BY 1" | sort)
[[ $counters == "$stored" ]] || fail "counter rows differ from the committed events: $(diff <(echo "$counters") <(echo "$stored") | head -5)"
say "$(psql_q "SELECT count(*) || ' aggregates, ' || sum(last_sequence) || ' numbers' FROM postbox.aggregate_sequences"): each aggregate 1..n without gaps or repeats"
