-- The payment service (its own database): charges the card once the stock is reserved. Cards
-- "tok_declined" are declined. payment.charges has no unique key, so that a payment charged
-- twice would show as two rows.
CREATE SCHEMA payment;

CREATE TABLE payment.charges (
    order_id bigint NOT NULL,
    amount   numeric(10, 2) NOT NULL,
    outcome  text NOT NULL CHECK (outcome IN ('charged', 'declined')),
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE payment.steps (
    order_id bigint NOT NULL,
    step     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- stock.reserved.v1: charge, and say how it went (payment.charged.v1 or payment.declined.v1)
CREATE FUNCTION payment.on_stock_reserved(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    oid bigint := (e->>'order_id')::bigint;
    outcome text := CASE WHEN e->>'card' = 'tok_declined' THEN 'declined' ELSE 'charged' END;
BEGIN
    INSERT INTO payment.steps (order_id, step) VALUES (oid, outcome);
    INSERT INTO payment.charges (order_id, amount, outcome)
    VALUES (oid, (e->>'amount')::numeric, outcome);
    PERFORM postbox.enqueue('payment', oid::text, 'payment.' || outcome || '.v1',
                            e - 'card' || jsonb_build_object('outcome', outcome));
END $$;
