#!/usr/bin/env bash
# examples/order-saga, short: 300 orders through four services (each its own database, relay
# and consumer) with 20% declined payments, 5% rolled-back orders and a random relay or consumer
# SIGKILLed every second (at least 3 of each); run.sh checks the saga's invariants (every order
# shipped or cancelled with its stock back, no payment charged twice, no step lost or applied
# twice, nothing pending or dead) and exits 0 only when they hold. The databases
# pb_order_saga_<service> and the exchange and queues pb_order_saga.* are this test's.
source "$(dirname "$0")/lib.sh"

out=$PB_TMP/saga.out
rc=0
SAGA_ORDERS=300 SAGA_RATE=30 SAGA_KILL_EVERY_MS=1000 SAGA_MIN_KILLS=3 SAGA_PREFIX=pb_order_saga \
    SAGA_WORK_DIR=$PB_TMP/saga SAGA_TIMEOUT_S=90 \
    bash "$POSTBOX_SOURCE_DIR/examples/order-saga/run.sh" >"$out" 2>&1 || rc=$?
sed 's/^/  | /' "$out"
((rc == 0)) || fail "examples/order-saga/run.sh exited with $rc"
grep -q 'PASS: every invariant holds' "$out" || fail "no PASS line"
! grep -q '<- expected' "$out" || fail "an invariant is marked broken"
line=$(grep -m1 'orders in .* s: ' "$out") || fail "no result line"
[[ $line =~ ([0-9]+)\ shipped,\ ([0-9]+)\ cancelled.*SIGKILLs:\ ([0-9]+)\ relays,\ ([0-9]+)\ consumers ]] ||
    fail "cannot read the result line: $line"
shipped=${BASH_REMATCH[1]} cancelled=${BASH_REMATCH[2]} relays=${BASH_REMATCH[3]} consumers=${BASH_REMATCH[4]}
((shipped + cancelled == 300)) || fail "$shipped shipped + $cancelled cancelled is not 300"
((cancelled > 0 && shipped > 0)) || fail "the run did not take both paths ($shipped shipped, $cancelled cancelled)"
((relays >= 3 && consumers >= 3)) || fail "only $relays relay and $consumers consumer kills"
# the same figures straight from the services' databases
db() { psql -XAtq -v ON_ERROR_STOP=1 -d "${POSTBOX_PG_DSN%/*}/pb_order_saga_$1" -c "$2"; }
[[ $(db payment "SELECT count(*) || '/' || count(DISTINCT order_id) FROM payment.charges") == "300/300" ]] ||
    fail "payment.charges does not hold one payment per order"
[[ $(db shipping "SELECT count(*) FROM shipping.shipments") == "$shipped" ]] || fail "shipments differ from shipped orders"
[[ $(db inventory "SELECT count(*) FROM inventory.reservations WHERE status = 'released'") == "$cancelled" ]] ||
    fail "released reservations differ from cancelled orders"
[[ $(db orders "SELECT count(*) FROM postbox.inbox WHERE consumer = 'orders'") == $((300 + shipped + cancelled)) ]] ||
    fail "the orders service's inbox does not hold one row per stock.reserved, stock.released and shipment.dispatched"
say "saga: $shipped shipped, $cancelled cancelled, $relays relay and $consumers consumer kills"
