-- The inventory service (its own database): reserves stock for a placed order, keeps it when
-- the payment went through, and gives it back when the payment was declined (compensation).
CREATE SCHEMA inventory;

CREATE TABLE inventory.stock (
    sku       text PRIMARY KEY,
    initial   int NOT NULL,
    available int NOT NULL CHECK (available >= 0)
);
INSERT INTO inventory.stock
SELECT 'sku-' || g, 1000000, 1000000 FROM generate_series(1, 10) g;

CREATE TABLE inventory.reservations (
    order_id bigint PRIMARY KEY,
    sku      text NOT NULL REFERENCES inventory.stock,
    qty      int NOT NULL,
    status   text NOT NULL CHECK (status IN ('reserved', 'committed', 'released'))
);

CREATE TABLE inventory.steps (
    order_id bigint NOT NULL,
    step     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- order.placed.v1: reserve, and tell the payment service (inbox row + reservation + next event
-- in one transaction)
CREATE FUNCTION inventory.on_order_placed(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    oid bigint := (e->>'order_id')::bigint;
BEGIN
    INSERT INTO inventory.steps (order_id, step) VALUES (oid, 'reserved');
    UPDATE inventory.stock SET available = available - (e->>'qty')::int WHERE sku = e->>'sku';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown sku %', e->>'sku';
    END IF;
    INSERT INTO inventory.reservations (order_id, sku, qty, status)
    VALUES (oid, e->>'sku', (e->>'qty')::int, 'reserved');
    PERFORM postbox.enqueue('stock', oid::text, 'stock.reserved.v1', e);
END $$;

-- payment.charged.v1: the goods are sold
CREATE FUNCTION inventory.on_payment_charged(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO inventory.steps (order_id, step) VALUES ((e->>'order_id')::bigint, 'committed');
    UPDATE inventory.reservations SET status = 'committed'
     WHERE order_id = (e->>'order_id')::bigint AND status = 'reserved';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payment.charged.v1 for order % without a reservation', e->>'order_id';
    END IF;
END $$;

-- payment.declined.v1: compensation, the stock goes back and the orders service is told
CREATE FUNCTION inventory.on_payment_declined(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    oid bigint := (e->>'order_id')::bigint;
    r inventory.reservations;
BEGIN
    INSERT INTO inventory.steps (order_id, step) VALUES (oid, 'released');
    UPDATE inventory.reservations SET status = 'released'
     WHERE order_id = oid AND status = 'reserved' RETURNING * INTO r;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payment.declined.v1 for order % without a reservation', oid;
    END IF;
    UPDATE inventory.stock SET available = available + r.qty WHERE sku = r.sku;
    PERFORM postbox.enqueue('stock', oid::text, 'stock.released.v1',
                            jsonb_build_object('order_id', oid, 'sku', r.sku, 'qty', r.qty));
END $$;
