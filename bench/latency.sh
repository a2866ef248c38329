# shellcheck shell=bash
# shellcheck disable=SC2153 # the globals of the including script
# The latency runs of bench/relay-cdc: a steady offered load from paced producer sessions while a
# relay runs, commit -> broker confirm per event; the raw publisher paced the same way (the
# broker's own floor); the plot of both against the offered load. Sourced by bench/relay-cdc,
# whose globals and helpers these functions use (BIN, TMP, BROKER, TOOL, MODES, LAT_RATES,
# LAT_SECS, PRODUCERS, PAD, SIZE, N, RAW_LAT, RELAY_PID, PRODUCER_PID; sql, fresh_queue,
# skip_slot, dai_trigger, global_args, capture_args, now).

# PRODUCERS sessions write 10 events per transaction each, paced against one clock so that
# together they offer RATE events/s evenly spread; each statement its own tiny transaction, so
# created_at (now(), or clock_timestamp() for postbox.emit) is about the commit. Each session
# writes its own 10 aggregates: sessions sharing aggregates wait for each other's numbering locks
# between created_at and the commit, which a commit -> confirm latency must not count. RATE max: the
# same transactions unpaced, from pgbench -T (PRODUCERS connections), the count from its report.
# latency_once MODE TAG [RATE [PRODUCERS]]: MODE with the current binary; "MODE p50 p99 max
# offered p99.9" in $TMP/latres.TAG (at max: the achieved rate for offered)
latency_once() {
    local m=$1 tag=$2 rate=${3:-1000} producers=${4:-1} fn t0 t1 want i k got start txns=0 gap pids=() achieved
    local seen=-1 last nap=0.1 out
    fresh_queue
    sql "TRUNCATE postbox.outbox, postbox.outbox_published, postbox.dead_letters" >/dev/null
    dai_trigger "$m"
    sql "CHECKPOINT" >/dev/null
    [[ $m == poll* ]] || skip_slot
    fn=enqueue
    [[ $m == emit ]] && fn=emit
    if [[ $rate == max ]]; then
        echo "SELECT count(postbox.$fn('bench', 'agg-' || :client_id || '-' || k, 'bench.event.v1', jsonb_build_object('pad', repeat('x', $PAD)))) FROM generate_series(1, 10) k;" >"$TMP/unpaced.sql"
    else
        txns=$((LAT_SECS * rate / 10 / producers))
        gap=$(awk -v r="$rate" -v p="$producers" 'BEGIN { printf "%.6f", 10 * p / r }')
    fi
    for ((k = 0; k < producers && txns; k++)); do
        for ((i = 0; i < txns; i++)); do
            echo "SELECT pg_sleep(greatest(0, :start + $k * $gap / $producers + $i * $gap - extract(epoch FROM clock_timestamp())));"
            echo "SELECT count(postbox.$fn('bench', 'agg-$k-' || k, 'bench.event.v1', jsonb_build_object('pad', repeat('x', $PAD)))) FROM generate_series(1, 10) k;"
        done >"$TMP/steady.$k.sql"
    done
    : >"$TMP/lat.log"
    # shellcheck disable=SC2046
    "$BIN" --set relay.batch_size="$BATCH" $(global_args "$m") relay $(capture_args "$m") 2>"$TMP/lat.log" &
    RELAY_PID=$!
    sleep 2 # connected, streaming or listening
    kill -0 "$RELAY_PID" 2>/dev/null || { echo "relay-cdc: $m: the relay exited:" >&2; tail -n 20 "$TMP/lat.log" >&2; exit 1; }
    if [[ $rate == max ]]; then
        # the events: pgbench's committed transactions x 10; the rate: its tps without the
        # connections' start
        pgbench -n -M prepared -c "$producers" -j "$producers" -T "$LAT_SECS" -f "$TMP/unpaced.sql" "$POSTBOX_PG_DSN" >"$TMP/pgbench.out" 2>&1 &
        PRODUCER_PID=$!
        wait "$PRODUCER_PID" || { echo "relay-cdc: $m: pgbench failed:" >&2; tail -n 20 "$TMP/pgbench.out" >&2; exit 1; }
        PRODUCER_PID=
        out=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$TMP/pgbench.out")
        achieved=$(awk '/^tps = / { printf "%.0f", $3 * 10 }' "$TMP/pgbench.out")
        [[ -n $out && -n $achieved ]] || { echo "relay-cdc: $m: no count or tps in pgbench's output:" >&2; cat "$TMP/pgbench.out" >&2; exit 1; }
        want=$((out * 10))
        nap=0.5 # the log grows fast at saturation: grep it less often while the relay catches up
    else
        start=$(awk -v t="$(now)" 'BEGIN { printf "%.6f", t + 0.3 }') # every session connected by then
        for ((k = 0; k < producers; k++)); do
            psql -XAtq -v ON_ERROR_STOP=1 -v start="$start" -d "$POSTBOX_PG_DSN" -f "$TMP/steady.$k.sql" >/dev/null &
            pids+=($!)
        done
        PRODUCER_PID=${pids[*]}
        for k in "${pids[@]}"; do wait "$k"; done
        PRODUCER_PID=
        t1=$(now)
        t0=$start
        want=$((txns * producers * 10))
        achieved=$(awk -v a="$t0" -v b="$t1" -v n="$want" 'BEGIN { printf "%.0f", n / (b - a) }')
    fi
    # until every event is published, or 10 s without progress (at saturation the relay may
    # still have a backlog of many seconds to work off)
    last=$SECONDS
    while :; do
        got=$(grep -c 'published event ' "$TMP/lat.log" || true)
        ((got < want)) || break
        if ((got > seen)); then seen=$got last=$SECONDS; elif ((SECONDS - last >= 10)); then break; fi
        sleep "$nap"
    done
    kill -TERM "$RELAY_PID"
    wait "$RELAY_PID" || true
    RELAY_PID=
    sed -n 's/.*published event .* \([0-9.]*\) ms after its commit.*/\1/p' "$TMP/lat.log" | sort -g >"$TMP/lat.$tag"
    got=$(wc -l <"$TMP/lat.$tag")
    ((got == want)) || { echo "relay-cdc: $m: $got of $want events published in the latency run" >&2; exit 1; }
    awk -v m="$m" -v achieved="$achieved" \
        '{ a[NR] = $1 }
         END { p50 = a[int(NR * 0.50 + 0.999999)]; p99 = a[int(NR * 0.99 + 0.999999)]
               p999 = a[int(NR * 0.999 + 0.999999)]
               printf "%s %.1f %.1f %.1f %s %.1f\n", m, p50, p99, a[NR], achieved, p999 }' "$TMP/lat.$tag" >"$TMP/latres.$tag"
}

# raw_latency RATE: the broker's own latency floor: the raw publisher (no database, no relay)
# paced at RATE for LAT_SECS on a fresh queue/stream (made as for the modes), 10 messages per
# tick like the producers' transactions, each timed from its publish to its confirm; "raw p50
# p99 max achieved p999" in $TMP/latres.raw.RATE (latency_once's format), the tool's line in
# $TMP/rawlat.RATE. No window that binds: RabbitMQ's is N, JetStream's nats.max_pending's
# default 4096 (800 ms of messages at 5,000/s). None at max (unpaced, the raw publisher is the
# ceiling of the throughput rounds) nor on Kafka and Redis (kafka-tool and redis-benchmark have
# no paced mode): then "raw - - - - -".
raw_latency() {
    local rate=$1 n out
    if [[ $rate == max ]] || ((RAW_LAT == 0)); then
        echo "raw - - - - -" >"$TMP/latres.raw.$rate"
        return 0
    fi
    n=$((LAT_SECS * rate))
    fresh_queue
    if [[ $BROKER == amqp ]]; then
        out=$("$TOOL" publish-raw "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" bench.raw.v1 "$n" "$SIZE" "$n" --rate "$rate" --burst 10)
    else
        out=$("$TOOL" publish-raw "$POSTBOX_NATS_URL" "${POSTBOX_NATS_SUBJECT_PREFIX}bench.raw.v1" "$n" "$SIZE" 4096 --rate "$rate" --burst 10)
    fi
    grep '^paced ' <<<"$out" >"$TMP/rawlat.$rate" || { echo "relay-cdc: no 'paced' line from the raw publisher: $out" >&2; exit 1; }
    awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "raw %.1f %.1f %.1f %.0f %.1f\n", v["p50_ms"], v["p99_ms"], v["max_ms"], v["achieved"], v["p999_ms"] }' \
        "$TMP/rawlat.$rate" >"$TMP/latres.raw.$rate"
}

# latency_plot DIR: latency.tsv (a block per mode, the raw publisher last when it ran: load/s
# achieved/s p50 p99 p99.9 max paced|max; the paced rates first, load the offered rate, then max,
# load its achieved rate) and, with gnuplot, latency.png: lines through the paced points, and the
# saturation point on its own at its achieved rate (which can be below a paced point's offered
# rate when the producers could not keep that pace either)
latency_plot() {
    local dir=$1 m t rate i=0 c p50 p99 max got p999
    local -a plots=() blocks=("${MODES[@]}")
    ((RAW_LAT == 0)) || blocks+=(raw)
    mkdir -p "$dir"
    for m in "${blocks[@]}"; do
        printf '# mode %s on %s: load/s achieved/s p50_ms p99_ms p999_ms max_ms paced|max\n' "$m" "$BROKER"
        for rate in "${LAT_RATES[@]}"; do
            [[ $rate != max ]] || continue
            read -r _ p50 p99 max got p999 <"$TMP/latres.$m.$rate"
            printf '%s\t%s\t%s\t%s\t%s\t%s\tpaced\n' "$rate" "$got" "$p50" "$p99" "$p999" "$max"
        done
        if [[ " ${LAT_RATES[*]} " == *" max "* && $m != raw ]]; then
            read -r _ p50 p99 max got p999 <"$TMP/latres.$m.max"
            printf '%s\t%s\t%s\t%s\t%s\t%s\tmax\n' "$got" "$got" "$p50" "$p99" "$p999" "$max"
        fi
        printf '\n\n' # gnuplot: one data block per mode
    done >"$dir/latency.tsv"
    command -v gnuplot >/dev/null || { echo "latency: gnuplot not found, no plot (scripts/install-deps)"; return 0; }
    for m in "${blocks[@]}"; do
        t=$m
        [[ $m != raw ]] || t="raw publisher (publish -> confirm)"
        c=$((i + 1))
        plots+=("'$dir/latency.tsv' index $i using 1:(stringcolumn(7) eq 'paced' ? \$4 : 1/0) with linespoints lc $c title '$t p99'")
        plots+=("'$dir/latency.tsv' index $i using 1:(stringcolumn(7) eq 'paced' ? \$3 : 1/0) with linespoints dashtype 2 lc $c title '$t p50'")
        plots+=("'$dir/latency.tsv' index $i using 1:(stringcolumn(7) eq 'max' ? \$4 : 1/0) with points pt 7 ps 1.5 lc $c notitle")
        plots+=("'$dir/latency.tsv' index $i using 1:(stringcolumn(7) eq 'max' ? \$3 : 1/0) with points pt 6 ps 1.5 lc $c notitle")
        i=$((i + 1))
    done
    [[ " ${LAT_RATES[*]} " != *" max "* ]] ||
        plots+=("NaN with points pt 7 ps 1.5 lc 'black' title 'saturation (max), at its achieved rate: p99 filled, p50 open'")
    {
        echo 'set terminal pngcairo size 900,560 noenhanced'
        echo "set output '$dir/latency.png'"
        echo "set title 'commit -> broker confirm ($BROKER, $PRODUCERS producer sessions, ${LAT_SECS}s a point)'"
        echo 'set grid'
        echo 'set key top left'
        echo 'set logscale y'
        echo "set xlabel 'offered load (events/s); saturation: achieved rate'"
        echo "set ylabel 'latency (ms)'"
        echo "plot $(IFS=,; echo "${plots[*]}"), 10 with lines dashtype 3 title 'target: p99 <= 10 ms at 5,000/s'"
    } | gnuplot
    echo "latency plot: $dir/latency.png"
}
