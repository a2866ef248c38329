-- postbox schema, version 1: outbox, dead letters, producer functions, capture trigger, NOTIFY.
-- Applied by `postbox init` inside one transaction; the schema and postbox.schema_migrations
-- exist already (created by init itself).

CREATE TABLE postbox.outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- publish order
    event_id        uuid        NOT NULL DEFAULT gen_random_uuid() UNIQUE,  -- the message id
    aggregate_type  text        NOT NULL,
    aggregate_id    text        NOT NULL,
    event_type      text        NOT NULL,  -- versioned, e.g. order.paid.v1
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- trace / correlation
    destination     text,                  -- overrides the routing template when set
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,           -- NULL = pending
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    CONSTRAINT outbox_headers_object CHECK (jsonb_typeof(headers) = 'object')
);

-- The relay's claim walks pending rows in id order.
CREATE INDEX outbox_pending ON postbox.outbox (id) WHERE published_at IS NULL;
-- Pending rows that have failed at least once, by aggregate: the relay asks "is an earlier
-- event of this aggregate waiting for a retry?" for every candidate row, and this index is empty
-- while nothing fails, so the question costs almost nothing.
CREATE INDEX outbox_retrying ON postbox.outbox (aggregate_type, aggregate_id, id)
    WHERE published_at IS NULL AND attempts > 0;
-- Retention purges published rows by age.
CREATE INDEX outbox_published_at ON postbox.outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE postbox.dead_letters (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id       bigint      NOT NULL,
    event_id        uuid        NOT NULL,
    aggregate_type  text        NOT NULL,
    aggregate_id    text        NOT NULL,
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL,
    destination     text,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL,
    last_error      text,
    reason          text        NOT NULL,
    dead_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letters_event_type ON postbox.dead_letters (event_type, dead_at);

-- Producer API for any language: call inside the business transaction; returns the event id.
CREATE FUNCTION postbox.enqueue(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT '{}'::jsonb,
    p_destination    text  DEFAULT NULL)
RETURNS uuid
LANGUAGE sql
AS $$
    INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers, destination)
    VALUES (p_aggregate_type, p_aggregate_id, p_event_type, p_payload,
            coalesce(p_headers, '{}'::jsonb), p_destination)
    RETURNING event_id
$$;

-- Wakes idle relays at commit (NOTIFY is transactional and collapsed per transaction).
CREATE FUNCTION postbox.notify_outbox() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('postbox_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON postbox.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION postbox.notify_outbox();

-- Row-change capture: turns changes of a business table into outbox events.
--   CREATE TRIGGER orders_paid AFTER UPDATE ON shop.orders FOR EACH ROW
--     EXECUTE FUNCTION postbox.capture('order', 'id', 'order.paid.v1',
--                                      '($1).status = ''paid'' AND ($2).status IS DISTINCT FROM ''paid''');
-- Arguments: aggregate type; the column holding the aggregate id (default 'id'); the event type
-- (default <table>.<insert|update|delete>); an optional condition, a boolean SQL expression in
-- which $1 is the new row and $2 the old one (NULL where the operation has none). The payload is
-- the new row as JSON (the old row for DELETE).
CREATE FUNCTION postbox.capture() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_aggregate_type text := TG_ARGV[0];
    v_id_column      text := coalesce(TG_ARGV[1], 'id');
    v_event_type     text := coalesce(TG_ARGV[2], TG_TABLE_NAME || '.' || lower(TG_OP));
    v_condition      text := TG_ARGV[3];
    v_row            jsonb;
    v_wanted         boolean;
BEGIN
    IF TG_LEVEL <> 'ROW' OR TG_WHEN <> 'AFTER' THEN
        RAISE EXCEPTION 'postbox.capture must be an AFTER ... FOR EACH ROW trigger';
    END IF;
    IF v_aggregate_type IS NULL THEN
        RAISE EXCEPTION 'postbox.capture needs the aggregate type as its first argument';
    END IF;
    IF v_condition IS NOT NULL AND v_condition <> '' THEN
        IF TG_OP = 'INSERT' THEN
            EXECUTE 'SELECT ' || v_condition INTO v_wanted USING NEW, NULL::record;
        ELSIF TG_OP = 'DELETE' THEN
            EXECUTE 'SELECT ' || v_condition INTO v_wanted USING NULL::record, OLD;
        ELSE
            EXECUTE 'SELECT ' || v_condition INTO v_wanted USING NEW, OLD;
        END IF;
        IF v_wanted IS NOT TRUE THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        v_row := to_jsonb(OLD);
    ELSE
        v_row := to_jsonb(NEW);
    END IF;
    IF NOT v_row ? v_id_column THEN
        RAISE EXCEPTION 'postbox.capture: table %.% has no column "%"', TG_TABLE_SCHEMA, TG_TABLE_NAME, v_id_column;
    END IF;
    INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers)
    VALUES (v_aggregate_type, v_row ->> v_id_column, v_event_type, v_row,
            jsonb_build_object('source_table', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME,
                               'operation', lower(TG_OP)));
    RETURN NULL;
END
$$;
