# postbox demo as a test (tests/integration/demo_amqp.sh, demo_nats.sh), sourced after lib.sh:
# run_demo BROKER runs a short demo (600 orders over 20 s, 3 SIGKILLs each of the relay and the
# consumer) in the test's database, then checks its exit status, the figures of its summary,
# and the same figures counted straight from the database.

# summary_figure LABEL: the number on the summary line that starts with LABEL (commas removed)
summary_figure() {
    local line
    line=$(grep -E "^  $1  " "$PB_TMP/demo.out" | head -1) || fail "the summary has no line \"$1\""
    line=${line#  "$1"}
    line=$(sed -E 's/^ +//; s/ .*//; s/,//g' <<<"$line")
    [[ $line =~ ^[0-9]+$ ]] || fail "summary line \"$1\": no number ($line)"
    echo "$line"
}

run_demo() {
    local broker=$1 orders=600 rc=0
    local out=$PB_TMP/demo.out
    say "postbox demo --broker $broker --orders $orders --duration 20s --kills 3"
    "$POSTBOX_BIN" demo --broker "$broker" --orders $orders --duration 20s --kills 3 \
        --database "$PB_DB" --keep >"$out" 2>&1 || rc=$?
    sed 's/^/  | /' "$out"
    ((rc == 0)) || fail "postbox demo exited with $rc"
    grep -q '^  verdict: PASS' "$out" || fail "no PASS verdict"

    local committed published effects twice order rolled dups absorbed
    committed=$(summary_figure "orders committed")
    rolled=$(summary_figure "orders rolled back")
    published=$(summary_figure "events published")
    effects=$(summary_figure "effects applied")
    twice=$(summary_figure "effects applied twice")
    order=$(summary_figure "effects out of order")
    dups=$(summary_figure "duplicates delivered by the broker")
    absorbed=$(summary_figure "duplicates absorbed by the inbox")
    ((committed == orders)) || fail "orders committed $committed, expected $orders"
    ((rolled > 0)) || fail "no order was rolled back"
    ((published == orders && effects == orders)) || fail "published $published, effects $effects, expected $orders"
    ((twice == 0 && order == 0)) || fail "effects applied twice $twice, out of order $order"
    ((dups == absorbed)) || fail "duplicates delivered $dups, absorbed $absorbed"
    grep -qE '^  kills: relay / consumer +3 / 3 ' "$out" || fail "the summary does not show 3 relay and 3 consumer kills"
    (($(grep -c 'SIGKILL relay' "$out") == 3 && $(grep -c 'SIGKILL consumer' "$out") == 3)) ||
        fail "the progress does not show 3 kills of each"

    # the same, counted from the database and the children's logs the demo kept
    local dir
    dir=$(sed -n 's/.*configuration and logs in \(.*\)$/\1/p' "$out" | head -1)
    [[ -d $dir ]] || fail "the demo's directory \"$dir\" is missing"
    on_exit "rm -rf '$dir'"
    (($(grep -c '^==== .* postbox relay' "$dir/relay.log") == 4)) || fail "the relay did not run 4 times"
    (($(grep -c '^==== .* postbox consume' "$dir/consume.log") == 4)) || fail "the consumer did not run 4 times"
    (($(grep -c 'duplicate message' "$dir/consume.log") == dups)) || fail "the consumer's log disagrees on the duplicates"
    [[ $(psql_q "SELECT count(*) FROM orders.orders") == "$orders" ]] || fail "orders.orders does not hold $orders rows"
    [[ $(psql_q "SELECT count(*) FROM postbox.outbox_published") == "$orders" ]] || fail "published rows differ"
    [[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'shipping' AND processed_at IS NOT NULL") == "$orders" ]] ||
        fail "the inbox does not hold $orders handled messages"
    [[ $(psql_q "SELECT count(*) FROM shipping.shipments s JOIN orders.orders o ON o.id = s.order_id") == "$orders" ]] ||
        fail "shipments do not match the committed orders one to one"
    [[ $(psql_q "SELECT count(*) FROM (SELECT customer FROM shipping.shipments GROUP BY customer
                   HAVING array_agg(n ORDER BY id) <> array_agg(n ORDER BY n)) s") == 0 ]] ||
        fail "a customer's shipments were applied out of order"
    say "demo on $broker: $orders orders, $rolled rolled back, $dups duplicates absorbed, 3 + 3 kills"
}
