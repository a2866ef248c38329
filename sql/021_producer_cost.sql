-- postbox schema, version 21: the producer's path closer to the cost of the outbox row itself.
--
-- Measured on version 19 (pgbench, 8 clients, synchronous_commit off, a one-row business
-- transaction plus one event; bench/producer): postbox.enqueue cost about as much again as the
-- INSERT it wraps, and the event id, random, put every new row in a random leaf of the unique
-- index on event_id. Hence:
--
-- Event ids are time-ordered (UUID version 7, RFC 9562): 48 bits of Unix milliseconds, 12 bits of
-- the sub-millisecond fraction, 62 random bits. New ids land at the right edge of the unique
-- index, as the identity does in the primary key: the index pages a producer touches stay the
-- same few, in cache, however large the table grows. The ids stay unique (the constraint is kept:
-- `postbox dlq replay` writes ids back) and unguessable enough for a message id; they now tell
-- when the event was written, to the millisecond. Only the column default changes: the C
-- library, postbox.enqueue, postbox.capture and a plain INSERT all get them; postbox.emit (a WAL
-- message, no index) keeps its random ids. Rows written before keep theirs.
--
-- postbox.enqueue is PL/pgSQL: an SQL function with an INSERT is never inlined, and PostgreSQL
-- plans its body again at every call from a new statement, that is, in every business
-- transaction; PL/pgSQL keeps the plan of its INSERT for the session.
--
-- The NOTIFY that wakes idle relays takes, at COMMIT, a lock that every notifying transaction of
-- the cluster queues for (PostgreSQL serialises them to keep the notification queue in commit
-- order): with 16 producers it cost a quarter of their throughput. It stays on by default;
-- `ALTER DATABASE ... SET postbox.notify = off` (or per role, or per session) turns it off where
-- the relays poll often enough (relay.poll_interval) for the latency wanted.
--
-- Applying this version replaces a column default and two functions: an online upgrade. An older
-- relay works unchanged with it.

-- A UUID version 7 from the clock of the statement's moment and 62 bits of gen_random_uuid():
-- the 60 bits of 1/4096 milliseconds since the epoch, the version digit put after the first 48
-- of them, then the variant and random part of a version 4 id. An SQL-standard body: bound when
-- created (no search_path at run time) and inlined into the INSERT that uses the default.
-- date_part's float8 carries these 60 bits exactly until 2039, one bit less after that.
CREATE FUNCTION postbox.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN (overlay(lpad(to_hex(floor(date_part('epoch', clock_timestamp()) * 4096000)::bigint), 15, '0')
                PLACING '7' FROM 13 FOR 0)
        || substr(gen_random_uuid()::text, 20))::uuid;
COMMENT ON FUNCTION postbox.uuid_v7() IS
    'a time-ordered UUID (version 7): the default of postbox.outbox.event_id';

ALTER TABLE postbox.outbox ALTER COLUMN event_id SET DEFAULT postbox.uuid_v7();

-- Producer API for any language, as in version 16 (same arguments, same result, same access).
CREATE OR REPLACE FUNCTION postbox.enqueue(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb       DEFAULT '{}'::jsonb,
    p_destination    text        DEFAULT NULL,
    p_available_at   timestamptz DEFAULT NULL,
    p_expires_at     timestamptz DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_event_id uuid;
BEGIN
    INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers,
                                destination, available_at, expires_at)
    VALUES (p_aggregate_type, p_aggregate_id, p_event_type, p_payload,
            coalesce(p_headers, '{}'::jsonb), p_destination, p_available_at, p_expires_at)
    RETURNING event_id INTO v_event_id;
    RETURN v_event_id;
END
$$;

-- The wake-up of version 1, which a database, role or session may turn off (postbox.notify = off).
CREATE OR REPLACE FUNCTION postbox.notify_outbox() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    IF current_setting('postbox.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('postbox_outbox', '');
    END IF;
    RETURN NULL;
END
$$;
