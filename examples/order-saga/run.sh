#!/usr/bin/env bash
# The order saga: four services (orders, inventory, payment, shipping), each with its own
# database (its schema, postbox outbox and inbox), one `postbox relay` and one `postbox consume`
# each, talking only through RabbitMQ. Places orders at a steady rate (a share with a card that
# is declined, a share rolled back), SIGKILLs a random relay or consumer every moment and starts
# it again, waits until every order has ended, then checks the saga's invariants:
#   every order ended shipped or cancelled, and a cancelled one got its stock back;
#   no payment was charged twice (nor declined twice), no step was lost, none was applied twice;
#   no rolled-back order reached any service; nothing is left pending or dead.
# Exit 0 when they all hold. See README.md in this folder.
#
# Environment (defaults in brackets):
#   POSTBOX_PG_DSN, POSTBOX_AMQP_URL  the servers [from scripts/services env]
#   POSTBOX_BIN [build/release/postbox]   POSTBOX_AMQP_TOOL [amqp-tool beside POSTBOX_BIN]
#   SAGA_ORDERS [1000]  committed orders    SAGA_RATE [40]  orders placed per second
#   SAGA_DECLINE_PCT [20]  cards declined   SAGA_ROLLBACK_PCT [5]  orders rolled back
#   SAGA_KILL_EVERY_MS [1500]  a SIGKILL this often (random relay or consumer), 0: none
#   SAGA_MIN_KILLS [3]  fail unless at least this many relay and as many consumer kills happened
#   SAGA_PREFIX [saga]  databases <prefix>_<service>, exchange <prefix>.events, queues <prefix>.<service>
#   SAGA_WORK_DIR [a new /tmp/order-saga.XXXXXX]  logs; kept when the run fails
#   SAGA_TIMEOUT_S [180]  longest wait for the last order to end
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [[ -z ${POSTBOX_PG_DSN:-} || -z ${POSTBOX_AMQP_URL:-} ]]; then
    eval "$(bash "$root/scripts/services" env)"
fi
: "${POSTBOX_BIN:=$root/build/release/postbox}"
: "${POSTBOX_AMQP_TOOL:=$(dirname "$POSTBOX_BIN")/amqp-tool}"
ORDERS=${SAGA_ORDERS:-1000}
RATE=${SAGA_RATE:-40}
DECLINE_PCT=${SAGA_DECLINE_PCT:-20}
ROLLBACK_PCT=${SAGA_ROLLBACK_PCT:-5}
KILL_EVERY_MS=${SAGA_KILL_EVERY_MS:-1500}
MIN_KILLS=${SAGA_MIN_KILLS:-3}
PREFIX=${SAGA_PREFIX:-saga}
TIMEOUT_S=${SAGA_TIMEOUT_S:-180}
SERVICES=(orders inventory payment shipping)
ROLES=(relay consume)

[[ -x $POSTBOX_BIN ]] || { echo "run.sh: no postbox at $POSTBOX_BIN (build it, or set POSTBOX_BIN)" >&2; exit 2; }
[[ -x $POSTBOX_AMQP_TOOL ]] || { echo "run.sh: no amqp-tool at $POSTBOX_AMQP_TOOL (set POSTBOX_AMQP_TOOL)" >&2; exit 2; }
[[ $PREFIX =~ ^[a-z][a-z0-9_]*$ ]] || { echo "run.sh: SAGA_PREFIX must be lowercase letters, digits and _" >&2; exit 2; }
# the services' files and the variables below say how they run; a caller's relay or consume
# settings would change what is shown
for v in $(compgen -v POSTBOX_RELAY_ || true) $(compgen -v POSTBOX_CONSUME_ || true) POSTBOX_CONFIG; do
    unset "$v"
done

WORK=${SAGA_WORK_DIR:-$(mktemp -d /tmp/order-saga.XXXXXX)}
mkdir -p "$WORK"
rm -f "$WORK"/*.log
declare -A PID=() STARTS=()
relay_kills=0 consume_kills=0
PRODUCER_PID=

say() { printf '[saga %s] %s\n' "$(date +%T)" "$*"; }
dsn() { echo "${POSTBOX_PG_DSN%/*}/${PREFIX}_$1"; } # SERVICE
q() { psql -XAtq -v ON_ERROR_STOP=1 -d "$(dsn "$1")" -c "$2"; } # SERVICE SQL

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

cleanup() {
    local rc=$? k
    set +e
    [[ -n $PRODUCER_PID ]] && alive "$PRODUCER_PID" && kill -KILL "$PRODUCER_PID"
    for k in "${!PID[@]}"; do
        alive "${PID[$k]}" && kill -KILL "${PID[$k]}"
        wait "${PID[$k]}" 2>/dev/null
    done
    if ((rc == 0)) && [[ -z ${SAGA_WORK_DIR:-} ]]; then rm -rf "$WORK"; else say "logs in $WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
fail() { say "FAIL: $*"; exit 1; }

start() { # SERVICE ROLE
    local key=$1.$2
    STARTS[$key]=$((${STARTS[$key]:-0} + 1))
    printf '==== %s start %d\n' "$(date +%T.%N)" "${STARTS[$key]}" >>"$WORK/$key.log"
    POSTBOX_PG_DSN=$(dsn "$1") POSTBOX_AMQP_EXCHANGE=$PREFIX.events POSTBOX_AMQP_QUEUE=$PREFIX.$1 \
        "$POSTBOX_BIN" -c "$here/services/$1.ini" "$2" >>"$WORK/$key.log" 2>&1 &
    PID[$key]=$!
}

stop() { # SERVICE ROLE: SIGTERM, wait; fails unless it exits 0
    local key=$1.$2 rc=0 i
    kill -TERM "${PID[$key]}" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do alive "${PID[$key]}" || break; sleep 0.1; done
    wait "${PID[$key]}" || rc=$?
    ((rc == 0)) || { tail -n 20 "$WORK/$key.log" >&2; fail "postbox $2 of $1 exited with $rc on SIGTERM"; }
}

# ---- set-up: a database per service with postbox's schema and the service's own ------------
for s in "${SERVICES[@]}"; do
    psql -XAtq -v ON_ERROR_STOP=1 -d "${POSTBOX_PG_DSN%/*}/postgres" -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS ${PREFIX}_$s WITH (FORCE)" -c "CREATE DATABASE ${PREFIX}_$s" >/dev/null
    POSTBOX_PG_DSN=$(dsn "$s") "$POSTBOX_BIN" init >/dev/null 2>>"$WORK/init.log" || fail "postbox init of $s failed"
    psql -XAtq -v ON_ERROR_STOP=1 -d "$(dsn "$s")" -f "$here/sql/$s.sql" >/dev/null || fail "schema of $s failed"
    "$POSTBOX_AMQP_TOOL" delete "$POSTBOX_AMQP_URL" "$PREFIX.$s" || fail "cannot delete queue $PREFIX.$s"
done
"$POSTBOX_AMQP_TOOL" delete-exchange "$POSTBOX_AMQP_URL" "$PREFIX.events" || fail "cannot delete exchange $PREFIX.events"

# consumers first: their queues must be bound before a relay publishes (mandatory publishing)
for s in "${SERVICES[@]}"; do start "$s" consume; done
for s in "${SERVICES[@]}"; do
    for ((i = 0; i < 300; i++)); do grep -q 'consuming queue' "$WORK/$s.consume.log" && break; sleep 0.1; done
    grep -q 'consuming queue' "$WORK/$s.consume.log" || { tail "$WORK/$s.consume.log" >&2; fail "the $s consumer did not start"; }
done
for s in "${SERVICES[@]}"; do start "$s" relay; done
say "4 services, each with its database ${PREFIX}_<service>, a relay and a consumer; exchange $PREFIX.events"

# ---- the customers: one connection placing orders at a steady rate ---------------------------
say "placing $ORDERS orders at $RATE/s ($DECLINE_PCT% with a declined card, $ROLLBACK_PCT% more rolled back)"
psql -XAtq -v ON_ERROR_STOP=1 -d "$(dsn orders)" >"$WORK/producer.log" 2>&1 <<SQL &
CREATE TEMP TABLE rolled_back (n int);
DO \$\$
DECLARE
    committed int := 0;
    rolled int := 0;
BEGIN
    WHILE committed < $ORDERS LOOP
        PERFORM orders.place_order('sku-' || (1 + floor(random() * 10))::int,
                                   (1 + floor(random() * 3))::int,
                                   round((5 + random() * 200)::numeric, 2),
                                   CASE WHEN random() * 100 < $DECLINE_PCT THEN 'tok_declined' ELSE 'tok_visa' END);
        IF random() * 100 < $ROLLBACK_PCT THEN
            ROLLBACK;
            rolled := rolled + 1;
        ELSE
            COMMIT;
            committed := committed + 1;
        END IF;
        PERFORM pg_sleep(1.0 / $RATE);
    END LOOP;
    RAISE NOTICE 'rolled back: %', rolled;
END \$\$;
SQL
PRODUCER_PID=$!

# ---- chaos: a random relay or consumer SIGKILLed, started again 0.2-0.8 s later --------------
all_ended() {
    [[ $(q orders "SELECT count(*) = $ORDERS AND bool_and(status IN ('shipped', 'cancelled')) FROM orders.orders") == t ]]
}
t0=$(date +%s)
last_report=0
while :; do
    producing=0
    alive "$PRODUCER_PID" && producing=1
    enough_kills=1
    ((KILL_EVERY_MS > 0 && (relay_kills < MIN_KILLS || consume_kills < MIN_KILLS))) && enough_kills=0
    if ((!producing && enough_kills)) && all_ended; then break; fi
    (($(date +%s) - t0 < TIMEOUT_S + ORDERS / RATE)) || fail "not every order ended within the time allowed: $(q orders "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n FROM orders.orders GROUP BY 1) s")"
    for k in "${!PID[@]}"; do
        alive "${PID[$k]}" || { tail -n 20 "$WORK/$k.log" >&2; fail "postbox ${k#*.} of ${k%%.*} exited by itself"; }
    done
    # kill while orders are being placed and until the minimum of kills is reached
    if ((KILL_EVERY_MS > 0)) && { ((producing)) || ((!enough_kills)); }; then
        s=${SERVICES[RANDOM % 4]}
        r=${ROLES[RANDOM % 2]}
        ((relay_kills < MIN_KILLS && consume_kills >= MIN_KILLS)) && r=relay
        ((consume_kills < MIN_KILLS && relay_kills >= MIN_KILLS)) && r=consume
        kill -KILL "${PID[$s.$r]}"
        wait "${PID[$s.$r]}" 2>/dev/null || true
        if [[ $r == relay ]]; then relay_kills=$((relay_kills + 1)); else consume_kills=$((consume_kills + 1)); fi
        pause=$((2 + RANDOM % 7))
        say "SIGKILL $s $r (kills: $relay_kills relays, $consume_kills consumers); started again in ${pause}00 ms"
        sleep "0.$pause"
        start "$s" "$r"
        sleep "$((KILL_EVERY_MS / 1000)).$(printf '%03d' $((KILL_EVERY_MS % 1000 * (50 + RANDOM % 100) / 100 % 1000)))"
    else
        sleep 0.5
    fi
    if (($(date +%s) - last_report >= 5)); then
        last_report=$(date +%s)
        say "$(q orders "SELECT format('orders %s: %s placed, %s reserved, %s shipped, %s cancelled',
                 count(*), count(*) FILTER (WHERE status = 'placed'), count(*) FILTER (WHERE status = 'reserved'),
                 count(*) FILTER (WHERE status = 'shipped'), count(*) FILTER (WHERE status = 'cancelled'))
               FROM orders.orders"); kills: $relay_kills relays, $consume_kills consumers"
    fi
done
wait "$PRODUCER_PID" || { cat "$WORK/producer.log" >&2; fail "placing the orders failed"; }
PRODUCER_PID=
rolled_back=$(sed -n 's/.*rolled back: \([0-9]*\).*/\1/p' "$WORK/producer.log")
secs=$(($(date +%s) - t0))
sleep 1 # acknowledgements of the last batches
for s in "${SERVICES[@]}"; do stop "$s" relay; stop "$s" consume; done

# ---- the invariants --------------------------------------------------------------------------
failures=0
check() { # DESCRIPTION EXPECTED ACTUAL
    local mark=ok
    [[ $2 == "$3" ]] || { mark=FAIL; failures=$((failures + 1)); }
    printf '  %-62s %8s  %s\n' "$1" "$3" "$([[ $mark == ok ]] && echo "" || echo "<- expected $2")"
}
ids() { q "$1" "$2" | LC_ALL=C sort; } # SERVICE SQL: sorted order ids
ids orders "SELECT id FROM orders.orders" >"$WORK/all"
ids orders "SELECT id FROM orders.orders WHERE card = 'tok_declined'" >"$WORK/declined_cards"
ids orders "SELECT id FROM orders.orders WHERE status = 'shipped'" >"$WORK/shipped"
ids orders "SELECT id FROM orders.orders WHERE status = 'cancelled'" >"$WORK/cancelled"
ids inventory "SELECT order_id FROM inventory.reservations" >"$WORK/reserved"
ids inventory "SELECT order_id FROM inventory.reservations WHERE status = 'committed'" >"$WORK/committed"
ids inventory "SELECT order_id FROM inventory.reservations WHERE status = 'released'" >"$WORK/released"
ids payment "SELECT order_id FROM payment.charges" >"$WORK/payments"
ids payment "SELECT order_id FROM payment.charges WHERE outcome = 'charged'" >"$WORK/charged"
ids payment "SELECT order_id FROM payment.charges WHERE outcome = 'declined'" >"$WORK/declined"
ids shipping "SELECT order_id FROM shipping.shipments" >"$WORK/shipments"
same() { cmp -s "$WORK/$1" "$WORK/$2" && echo yes || echo "no ($(LC_ALL=C comm -3 "$WORK/$1" "$WORK/$2" | wc -l) differ)"; }

n_all=$(wc -l <"$WORK/all")
n_shipped=$(wc -l <"$WORK/shipped")
n_cancelled=$(wc -l <"$WORK/cancelled")
times=$(q orders "SELECT format('%s ms / %s ms', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d)),
                                        round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d)))
                    FROM (SELECT extract(epoch FROM finished_at - placed_at) * 1000 AS d FROM orders.orders) s")
say "$n_all orders in $secs s: $n_shipped shipped, $n_cancelled cancelled (payment declined), $rolled_back rolled back; SIGKILLs: $relay_kills relays, $consume_kills consumers"
check "orders committed" "$ORDERS" "$n_all"
check "orders that ended shipped or cancelled" "$n_all" "$((n_shipped + n_cancelled))"
check "orders still open" 0 "$(q orders "SELECT count(*) FROM orders.orders WHERE status NOT IN ('shipped', 'cancelled')")"
check "cancelled orders = orders with a declined card" yes "$(same cancelled declined_cards)"
check "payments: one per order (no payment lost)" yes "$(same payments all)"
check "payments charged twice (or declined twice)" 0 "$(q payment "SELECT count(*) FROM (SELECT order_id FROM payment.charges GROUP BY 1 HAVING count(*) > 1) d")"
check "declined payments = cancelled orders" yes "$(same declined cancelled)"
check "charged payments = shipped orders" yes "$(same charged shipped)"
check "reservations: one per order, none for a rolled-back one" yes "$(same reserved all)"
check "reservations released = cancelled orders (compensation)" yes "$(same released cancelled)"
check "reservations kept = shipped orders" yes "$(same committed shipped)"
check "shipments = shipped orders" yes "$(same shipments shipped)"
check "stock restored: SKUs not at initial minus what was sold" 0 \
    "$(q inventory "SELECT count(*) FROM inventory.stock s
                      WHERE s.available <> s.initial - coalesce((SELECT sum(qty) FROM inventory.reservations r
                                                                  WHERE r.sku = s.sku AND r.status = 'committed'), 0)")"
psql -XAtq -d "$(dsn orders)" -c "SELECT sku, sum(qty) FROM orders.orders WHERE status = 'shipped' GROUP BY 1 ORDER BY 1" >"$WORK/sold_orders"
psql -XAtq -d "$(dsn inventory)" -c "SELECT sku, initial - available FROM inventory.stock WHERE initial <> available ORDER BY 1" >"$WORK/sold_stock"
check "stock taken per SKU = quantities of the shipped orders" yes "$(same sold_orders sold_stock)"
# steps: each service's log has no unique key; a step applied twice would be two rows. The
# orders service hears of an order from two aggregates (stock and shipment) that nothing orders
# against each other, so there only the set of steps counts, plus the stock's own order
# (reserved before released); elsewhere every step follows from the one before, in time order.
expected_steps() { # SERVICE: the paths an order may have left there
    case $1 in
    orders) echo "cancelled,placed,reserved|placed,reserved,shipped" ;; # as sets, sorted
    inventory) echo "reserved,committed|reserved,released" ;;
    payment) echo "charged|declined" ;;
    shipping) echo "dispatched" ;;
    esac
}
for s in "${SERVICES[@]}"; do
    twice=$(q "$s" "SELECT count(*) FROM (SELECT 1 FROM $s.steps GROUP BY order_id, step HAVING count(*) > 1) d")
    check "$s: steps applied twice" 0 "$twice"
    alts=$(expected_steps "$s")
    by=at
    [[ $s == orders ]] && by=step
    wrong=$(q "$s" "SELECT count(*) FROM (SELECT order_id, string_agg(step, ',' ORDER BY $by, step) AS path
                                             FROM $s.steps GROUP BY 1) p
                      WHERE path <> ALL (string_to_array('$alts', '|'))")
    check "$s: orders with a step missing, extra or out of place" 0 "$wrong"
    check "$s: events unpublished/dead-lettered, messages dead" "0/0/0" \
        "$(q "$s" "SELECT (SELECT count(*) FROM postbox.outbox) || '/' || (SELECT count(*) FROM postbox.dead_letters) || '/' || (SELECT count(*) FROM postbox.inbox_dead)")"
done
check "orders: cancelled before the stock was reserved" 0 \
    "$(q orders "SELECT count(*) FROM orders.steps c JOIN orders.steps r USING (order_id)
                  WHERE c.step = 'cancelled' AND r.step = 'reserved' AND c.at < r.at")"
dups=$(cat "$WORK"/*.consume.log | grep -c 'duplicate message' || true)
say "placed to shipped or cancelled, p50 / p99: $times; duplicates absorbed by the inboxes: $dups; relay runs: $(cat "$WORK"/*.relay.log | grep -c '^==== '), consumer runs: $(cat "$WORK"/*.consume.log | grep -c '^==== ')"
((relay_kills >= MIN_KILLS && consume_kills >= MIN_KILLS)) || fail "only $relay_kills relay and $consume_kills consumer kills (at least $MIN_KILLS each)"
((failures == 0)) || fail "$failures invariant(s) broken"
say "PASS: every invariant holds"
