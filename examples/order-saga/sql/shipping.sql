-- The shipping service (its own database): ships what was paid for.
CREATE SCHEMA shipping;

CREATE TABLE shipping.shipments (
    order_id bigint PRIMARY KEY,
    sku      text NOT NULL,
    qty      int NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE shipping.steps (
    order_id bigint NOT NULL,
    step     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- payment.charged.v1: ship, and tell the orders service
CREATE FUNCTION shipping.on_payment_charged(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    oid bigint := (e->>'order_id')::bigint;
BEGIN
    INSERT INTO shipping.steps (order_id, step) VALUES (oid, 'dispatched');
    INSERT INTO shipping.shipments (order_id, sku, qty) VALUES (oid, e->>'sku', (e->>'qty')::int);
    PERFORM postbox.enqueue('shipment', oid::text, 'shipment.dispatched.v1',
                            jsonb_build_object('order_id', oid, 'sku', e->>'sku', 'qty', (e->>'qty')::int));
END $$;
