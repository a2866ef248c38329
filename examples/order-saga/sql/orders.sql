-- The orders service (its own database): places orders, and follows each one to its end from
-- the other services' events. Every step is logged in orders.steps, which has no unique key,
-- so that a step applied twice would show as two rows.
CREATE SCHEMA orders;

CREATE TABLE orders.orders (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku          text NOT NULL,
    qty          int NOT NULL CHECK (qty > 0),
    amount       numeric(10, 2) NOT NULL,
    card         text NOT NULL,
    status       text NOT NULL DEFAULT 'placed'
                 CHECK (status IN ('placed', 'reserved', 'shipped', 'cancelled')),
    placed_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    reserved_at  timestamptz,
    finished_at  timestamptz
);

CREATE TABLE orders.steps (
    order_id bigint NOT NULL,
    step     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The saga's first step, in the caller's transaction: the order and its event commit together.
CREATE FUNCTION orders.place_order(p_sku text, p_qty int, p_amount numeric, p_card text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    oid bigint;
BEGIN
    INSERT INTO orders.orders (sku, qty, amount, card) VALUES (p_sku, p_qty, p_amount, p_card)
        RETURNING id INTO oid;
    INSERT INTO orders.steps (order_id, step) VALUES (oid, 'placed');
    PERFORM postbox.enqueue('order', oid::text, 'order.placed.v1',
                            jsonb_build_object('order_id', oid, 'sku', p_sku, 'qty', p_qty,
                                               'amount', p_amount, 'card', p_card));
    RETURN oid;
END $$;

-- Handlers (postbox consume, consumer "orders"), each in the transaction of its inbox row.
-- Final states are written whatever the order of arrival of events of different aggregates.
CREATE FUNCTION orders.on_stock_reserved(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orders.steps (order_id, step) VALUES ((e->>'order_id')::bigint, 'reserved');
    UPDATE orders.orders SET reserved_at = clock_timestamp(),
                             status = CASE WHEN status = 'placed' THEN 'reserved' ELSE status END
     WHERE id = (e->>'order_id')::bigint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stock.reserved.v1 for unknown order %', e->>'order_id';
    END IF;
END $$;

-- compensation, last step: the stock is back, the order is cancelled
CREATE FUNCTION orders.on_stock_released(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orders.steps (order_id, step) VALUES ((e->>'order_id')::bigint, 'cancelled');
    UPDATE orders.orders SET status = 'cancelled', finished_at = clock_timestamp()
     WHERE id = (e->>'order_id')::bigint AND status IN ('placed', 'reserved');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stock.released.v1 for order % which is not open', e->>'order_id';
    END IF;
END $$;

CREATE FUNCTION orders.on_shipment_dispatched(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orders.steps (order_id, step) VALUES ((e->>'order_id')::bigint, 'shipped');
    UPDATE orders.orders SET status = 'shipped', finished_at = clock_timestamp()
     WHERE id = (e->>'order_id')::bigint AND status IN ('placed', 'reserved');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shipment.dispatched.v1 for order % which is not open', e->>'order_id';
    END IF;
END $$;
