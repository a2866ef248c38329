-- postbox schema, version 9: a sequence number per aggregate, assigned in the producer's
-- transaction, so that a consumer can apply each aggregate's events in their order whatever
-- the broker redelivers, and tell a gap from the end.
--
-- Every event written to postbox.outbox (postbox.enqueue, the postbox.capture trigger, the C
-- library, a plain INSERT, `postbox dlq replay`) and every event of postbox.emit gets a number in
-- column `sequence`: 1, 2, ... per (aggregate_type, aggregate_id), counted in one row of
-- postbox.aggregate_sequences that the producer's transaction updates. The row lock serialises
-- the producers of one aggregate only (a second transaction writing the same aggregate waits
-- for the first to commit or roll back), and a rolled-back transaction rolls its numbers back
-- with it: the committed events of an aggregate are numbered 1..n without gaps or repeats. Every
-- sink sends it as header "aggregate_sequence". A transaction that writes
-- several aggregates takes their rows in the order it writes them: two such transactions in
-- opposite orders can deadlock (PostgreSQL aborts one of them, to be retried); write them in
-- one order (e.g. sorted) where that matters. Under REPEATABLE READ or SERIALIZABLE a
-- concurrent producer of the same aggregate gets a serialization failure, to be retried, as for
-- any row both update.

CREATE TABLE postbox.aggregate_sequences (
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    last_sequence  bigint NOT NULL,  -- of the aggregate's last event written
    PRIMARY KEY (aggregate_type, aggregate_id)
);
REVOKE ALL ON postbox.aggregate_sequences FROM PUBLIC;

-- The next number of an aggregate, in the caller's transaction (only the functions below may
-- take one: a number taken and not used would be a gap every consumer waits for).
CREATE FUNCTION postbox.next_sequence(p_aggregate_type text, p_aggregate_id text)
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (p_aggregate_type, p_aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
    RETURNING s.last_sequence
$$;
REVOKE EXECUTE ON FUNCTION postbox.next_sequence(text, text) FROM PUBLIC;

ALTER TABLE postbox.outbox ADD COLUMN sequence bigint;  -- NULL: written before version 9
ALTER TABLE postbox.outbox_published ADD COLUMN sequence bigint;
ALTER TABLE postbox.dead_letters ADD COLUMN sequence bigint;
CREATE OR REPLACE VIEW postbox.outbox_all AS
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
           created_at, published_at, attempts, last_error, sequence
    FROM postbox.outbox
    UNION ALL
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
           created_at, published_at, attempts, last_error, sequence
    FROM postbox.outbox_published;

-- Numbers every row written to the outbox, whoever writes it (the statement of next_sequence,
-- inline: one function call per row less). Each event updates its aggregate's row once; a
-- transaction writing many events of one aggregate makes a chain of row versions that each
-- further update walks (20,000 events over 100 aggregates in one transaction: 2 to 4 times the
-- time without numbering), so bulk loads are best split into transactions.
CREATE FUNCTION postbox.assign_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
    RETURNING s.last_sequence INTO NEW.sequence;
    RETURN NEW;
END
$$;
CREATE TRIGGER outbox_sequence BEFORE INSERT ON postbox.outbox
    FOR EACH ROW EXECUTE FUNCTION postbox.assign_sequence();

-- postbox.emit as in version 7, with the event's number in field "sequence".
CREATE OR REPLACE FUNCTION postbox.emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT '{}'::jsonb,
    p_destination    text  DEFAULT NULL,
    p_prefix         text  DEFAULT 'postbox')
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_event_id uuid := gen_random_uuid();
    v_body     text;
    v_ipad     bytea;
    v_opad     bytea;
BEGIN
    SELECT k.ipad, k.opad INTO STRICT v_ipad, v_opad FROM postbox.emit_key k;
    v_body := jsonb_build_object(
        'event_id', v_event_id,
        'aggregate_type', p_aggregate_type,
        'aggregate_id', p_aggregate_id,
        'event_type', p_event_type,
        'payload', p_payload,
        'headers', coalesce(p_headers, '{}'::jsonb),
        'sequence', postbox.next_sequence(p_aggregate_type, p_aggregate_id),
        'destination', p_destination,
        'created_at_us', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)::text;
    PERFORM pg_logical_emit_message(true, p_prefix,
        'hmac-sha256:' || encode(sha256(v_opad || sha256(v_ipad || convert_to(v_body, 'UTF8'))), 'hex')
        || ':' || v_body);
    RETURN v_event_id;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text) FROM PUBLIC;

-- The relay's claim as in version 6 (sql/006_claim_functions.sql says how it works), with the
-- events' numbers in a last column. A changed result type needs the function dropped first;
-- the relay's statement names its columns, so a relay of version 8 still reads its own. It runs
-- with the search_path version 8 gave every function.
DROP FUNCTION postbox.claim(integer, integer, integer[], int8multirange);
CREATE FUNCTION postbox.claim(p_limit integer, p_shards integer, p_owned integer[],
                              p_in_flight int8multirange)
RETURNS TABLE (id bigint, event_id uuid, aggregate_type text, aggregate_id text,
               event_type text, payload text, headers text, destination text,
               created_at_us bigint, attempts integer, parked boolean, sequence bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
SET search_path = pg_catalog, postbox, pg_temp
AS $fn$
DECLARE
    v_waiting boolean := EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting);
    v_shards  integer[];
    v_rows    text;
    v_sql     text;
    r         record;
    c         refcursor;
    v_park    bigint[] := '{}';
    v_until   timestamptz[] := '{}';
    -- Sharded claims are composed per call: the shard index serves only a query naming the
    -- shard count as a constant. $1 p_limit, $2 p_in_flight.
    v_ready   constant text :=
        'SELECT o.* FROM postbox.outbox o '
        'WHERE o.published_at IS NULL AND NOT o.waiting AND NOT ($2 @> o.id) AND %s '
        'ORDER BY o.id LIMIT $1';
    -- the rows of v_ready's %s, with the retry time of the event each waits behind (%s)
    v_read    constant text := $q$
        SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
               o.payload::text AS payload, o.headers::text AS headers, o.destination,
               (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
               o.attempts, o.next_attempt_at, %s AS blocked_until, o.sequence
        FROM (%s) o ORDER BY o.id$q$;
    v_blocked constant text := $q$
        (SELECT b.next_attempt_at FROM postbox.outbox b
         WHERE b.waiting AND b.aggregate_type = o.aggregate_type
           AND b.aggregate_id = o.aggregate_id AND b.id < o.id
         ORDER BY b.id DESC LIMIT 1)$q$;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    IF p_shards > 1 THEN
        SELECT coalesce(array_agg(DISTINCT s ORDER BY s), '{}') INTO v_shards
        FROM unnest(p_owned) s WHERE s >= 0 AND s < p_shards;
        IF cardinality(v_shards) = 0 THEN
            RETURN;
        END IF;
    END IF;

    IF p_shards <= 1 OR cardinality(v_shards) = p_shards THEN
        -- every shard: static statements (v_read over v_ready without a shard condition),
        -- planned once per session; this is the hot path
        IF NOT v_waiting THEN
            RETURN QUERY
            SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                   o.payload::text, o.headers::text, o.destination,
                   (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts, false,
                   o.sequence
            FROM postbox.outbox o
            WHERE o.published_at IS NULL AND NOT o.waiting AND NOT (p_in_flight @> o.id)
            ORDER BY o.id LIMIT p_limit;
            RETURN;
        END IF;
        OPEN c FOR
            SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                   o.payload::text AS payload, o.headers::text AS headers, o.destination,
                   (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
                   o.attempts, o.next_attempt_at,
                   (SELECT b.next_attempt_at FROM postbox.outbox b
                    WHERE b.waiting AND b.aggregate_type = o.aggregate_type
                      AND b.aggregate_id = o.aggregate_id AND b.id < o.id
                    ORDER BY b.id DESC LIMIT 1) AS blocked_until, o.sequence
            FROM postbox.outbox o
            WHERE o.published_at IS NULL AND NOT o.waiting AND NOT (p_in_flight @> o.id)
            ORDER BY o.id LIMIT p_limit;
    ELSE
        IF cardinality(v_shards) <= 16 AND EXISTS (
                SELECT FROM pg_index i
                WHERE i.indexrelid = to_regclass('postbox.' || postbox.shard_index_name(p_shards))
                  AND i.indisvalid) THEN
            -- one walk of the shard index per owned shard, merged in id order (Merge Append):
            -- the batch plus one descent per owned shard. Planning costs about 0.1 ms per
            -- owned shard, hence the cap: an instance owning more shards than that owns a large
            -- part of them, and walks the ready rows of every shard like one without the index.
            SELECT 'SELECT o.* FROM (' ||
                   string_agg(format('(' || v_ready || ')',
                                     format('postbox.shard_of(o.aggregate_type, o.aggregate_id, %s) = %s',
                                            p_shards, s)), ' UNION ALL ' ORDER BY s) ||
                   ') o ORDER BY o.id LIMIT $1'
            INTO v_rows FROM unnest(v_shards) s;
        ELSE
            -- no index for this shard count (yet), or many shards owned: every shard's rows
            -- are walked
            v_rows := format(v_ready, format(
                'postbox.shard_of(o.aggregate_type, o.aggregate_id, %s) = ANY(%L::integer[])',
                p_shards, v_shards));
        END IF;
        IF NOT v_waiting THEN
            RETURN QUERY EXECUTE format(
                'SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, '
                'destination, created_at_us, attempts, false, sequence FROM (' || v_read || ') c',
                'NULL::timestamptz', v_rows) USING p_limit, p_in_flight;
            RETURN;
        END IF;
        OPEN c FOR EXECUTE format(v_read, v_blocked, v_rows) USING p_limit, p_in_flight;
    END IF;
    -- something waits: each row is returned with whether it is parked behind a waiting event
    LOOP
        FETCH c INTO r;
        EXIT WHEN NOT FOUND;
        id := r.id; event_id := r.event_id; aggregate_type := r.aggregate_type;
        aggregate_id := r.aggregate_id; event_type := r.event_type; payload := r.payload;
        headers := r.headers; destination := r.destination;
        created_at_us := r.created_at_us; attempts := r.attempts;
        parked := r.blocked_until IS NOT NULL;
        sequence := r.sequence;
        IF parked THEN
            v_park := v_park || r.id;
            v_until := v_until || greatest(r.next_attempt_at, r.blocked_until);
        END IF;
        RETURN NEXT;
    END LOOP;
    CLOSE c;
    IF cardinality(v_park) > 0 THEN
        UPDATE postbox.outbox o SET waiting = true, next_attempt_at = p.until
        FROM unnest(v_park, v_until) AS p(id, until) WHERE o.id = p.id;
    END IF;
END
$fn$;

-- The consumer's side: per (consumer, aggregate) the sequence number of the last message
-- handled (or moved to inbox_dead, or given up waiting for after consume.gap_timeout), written
-- in the handler's transaction. A message at or below it is a duplicate; one beyond the next is
-- held until the missing ones arrive. aggregate_type is '' for messages without that header.
CREATE TABLE postbox.inbox_sequences (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    last_sequence  bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);

-- The consumer's fast path: moves each aggregate (p_types[k], p_ids[k]) from p_firsts[k] - 1
-- to p_lasts[k] (a first number of 1: no row yet), or fails (and with it the batch's
-- transaction) unless every one of them was there.
CREATE FUNCTION postbox.inbox_advance(p_consumer text, p_types text[], p_ids text[],
                                      p_firsts bigint[], p_lasts bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_moved bigint;
BEGIN
    WITH w AS (SELECT * FROM unnest(p_types, p_ids, p_firsts, p_lasts) AS w(t, i, f, l)),
    up AS (UPDATE postbox.inbox_sequences s SET last_sequence = w.l, updated_at = now()
           FROM w WHERE s.consumer = p_consumer AND s.aggregate_type = w.t
                    AND s.aggregate_id = w.i AND s.last_sequence = w.f - 1
           RETURNING 1),
    ins AS (INSERT INTO postbox.inbox_sequences (consumer, aggregate_type, aggregate_id,
                                                 last_sequence)
            SELECT p_consumer, w.t, w.i, w.l FROM w WHERE w.f = 1
            ON CONFLICT DO NOTHING
            RETURNING 1)
    SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM ins) INTO v_moved;
    IF v_moved <> cardinality(p_types) THEN
        RAISE EXCEPTION 'postbox.inbox_advance: % of % aggregates are not at the number before '
                        'the batch', cardinality(p_types) - v_moved, cardinality(p_types);
    END IF;
END
$$;
