-- postbox schema, version 16: events that wait until a time (available_at) and events that
-- expire (expires_at).
--
-- available_at: the relay publishes the event no earlier than this ("send this reminder
-- tomorrow"). Until then it waits, and so do the later events of its aggregate (per-aggregate
-- order holds); other aggregates flow on. The poll capture keeps a delayed event as a waiting
-- row (waiting = true, next_attempt_at = available_at: set by the numbering trigger below for
-- every way of writing the outbox), exactly like an event waiting for a retry: the claim never
-- walks over it, parks the later events of its aggregate behind it, and postbox.wake lets it go
-- when its time comes. The cdc capture sets such events aside in postbox.cdc_deferred (below).
--
-- expires_at: an event still unpublished at this time is not published any more: the relay moves
-- it to postbox.dead_letters with reason 'expired' (both captures), and the later events of its
-- aggregate go on. RabbitMQ also gets the lifetime left as the message's `expiration`.
--
-- Both are NULL by default: every existing caller and row behaves as before. An event that
-- expires before it becomes available could never be published: refused (expires_at must be
-- later than available_at).
--
-- Applying this version adds two nullable columns (no table rewrite), a constraint checked for
-- new rows only (the existing rows have neither time), functions and an empty table: an online
-- upgrade, with relays running. A relay older than this version keeps working: it claims a
-- delayed event only once it is due (the claim is the schema's), but publishes an expired event
-- instead of dead-lettering it, and a cdc relay older than this version publishes delayed events
-- at once. Upgrade the relays after `postbox init`.

ALTER TABLE postbox.outbox
    ADD COLUMN available_at timestamptz,  -- not published before (NULL: at once)
    ADD COLUMN expires_at   timestamptz;  -- dead-lettered as 'expired' instead of published from then on
-- NOT VALID: the rows written before this version have neither time; new rows are checked
ALTER TABLE postbox.outbox
    ADD CONSTRAINT outbox_expires_after_available CHECK (expires_at > available_at) NOT VALID,
    ADD CONSTRAINT outbox_times_finite CHECK (isfinite(available_at) AND isfinite(expires_at)) NOT VALID;
COMMENT ON COLUMN postbox.outbox.available_at IS
    'not published before this time; the later events of its aggregate wait behind it (NULL: at once)';
COMMENT ON COLUMN postbox.outbox.expires_at IS
    'not published from this time on: dead-lettered with reason ''expired'' (NULL: never)';

ALTER TABLE postbox.dead_letters
    ADD COLUMN available_at timestamptz,
    ADD COLUMN expires_at   timestamptz;

-- The numbering trigger of versions 9 and 13, which sees every row written to the outbox
-- (postbox.enqueue, libpostbox, a plain INSERT, a capture trigger, `postbox dlq replay`), also
-- sets a delayed event aside: waiting until its available_at, as the relay's claim expects.
CREATE OR REPLACE FUNCTION postbox.assign_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
    RETURNING s.last_sequence INTO NEW.sequence;
    IF current_setting('postbox.traceparent', true) <> '' THEN
        NEW.headers := postbox.with_trace_context(NEW.headers);
    END IF;
    IF NEW.available_at > now() THEN
        NEW.waiting := true;
        NEW.next_attempt_at := greatest(NEW.next_attempt_at, NEW.available_at);
    END IF;
    RETURN NEW;
END
$$;

-- A function gaining parameters is a new function beside the old one, and a call that both
-- match would be ambiguous: the old definitions go, and whoever could execute them can execute
-- the new ones (their access lists are carried over through a setting of this transaction).
SELECT set_config('postbox.v15_enqueue_acl',
                  coalesce((SELECT proacl::text FROM pg_proc
                            WHERE oid = 'postbox.enqueue(text,text,text,jsonb,jsonb,text)'::regprocedure), ''),
                  true),
       set_config('postbox.v15_emit_acl',
                  coalesce((SELECT proacl::text FROM pg_proc
                            WHERE oid = 'postbox.emit(text,text,text,jsonb,jsonb,text,text)'::regprocedure), ''),
                  true);
DROP FUNCTION postbox.enqueue(text, text, text, jsonb, jsonb, text);
DROP FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text);

-- Producer API for any language, as in version 1, with the two times:
--   SELECT postbox.enqueue('customer', '42', 'reminder.v1', '{}', p_available_at => now() + interval '1 day');
--   SELECT postbox.enqueue('price', 'SKU-1', 'price.changed.v1', '{"eur": 9.9}', p_expires_at => now() + interval '30 s');
CREATE FUNCTION postbox.enqueue(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb       DEFAULT '{}'::jsonb,
    p_destination    text        DEFAULT NULL,
    p_available_at   timestamptz DEFAULT NULL,
    p_expires_at     timestamptz DEFAULT NULL)
RETURNS uuid
LANGUAGE sql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers,
                                destination, available_at, expires_at)
    VALUES (p_aggregate_type, p_aggregate_id, p_event_type, p_payload,
            coalesce(p_headers, '{}'::jsonb), p_destination, p_available_at, p_expires_at)
    RETURNING event_id
$$;

-- postbox.emit as in version 14, with the two times as members available_at_us and expires_at_us
-- of the message (unix microseconds; absent when NULL).
CREATE FUNCTION postbox.emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb       DEFAULT '{}'::jsonb,
    p_destination    text        DEFAULT NULL,
    p_prefix         text        DEFAULT 'postbox',
    p_available_at   timestamptz DEFAULT NULL,
    p_expires_at     timestamptz DEFAULT NULL)
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
    IF p_prefix IS NULL OR length(p_prefix) > 63
       OR p_prefix !~ '^postbox(\.[A-Za-z0-9_-]+)?$' THEN
        RAISE EXCEPTION 'postbox.emit: prefix % is not postbox''s own', coalesce(quote_literal(p_prefix), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'use ''postbox'' (the default) or ''postbox.NAME'' (letters, digits, _ and -), as in cdc.message_prefix';
    END IF;
    IF NOT isfinite(p_available_at) OR NOT isfinite(p_expires_at) THEN
        RAISE EXCEPTION 'postbox.emit: available_at and expires_at must be finite times'
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_expires_at <= p_available_at THEN
        RAISE EXCEPTION 'postbox.emit: expires_at % is not later than available_at %: the event could never be published',
                        p_expires_at, p_available_at
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT k.ipad, k.opad INTO STRICT v_ipad, v_opad FROM postbox.emit_key k;
    v_body := (jsonb_build_object(
        'event_id', v_event_id,
        'aggregate_type', p_aggregate_type,
        'aggregate_id', p_aggregate_id,
        'event_type', p_event_type,
        'payload', p_payload,
        'headers', postbox.with_trace_context(coalesce(p_headers, '{}'::jsonb)),
        'sequence', postbox.next_sequence(p_aggregate_type, p_aggregate_id),
        'destination', p_destination,
        'created_at_us', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)
        || jsonb_strip_nulls(jsonb_build_object(
            'available_at_us', (extract(epoch FROM p_available_at) * 1000000)::bigint,
            'expires_at_us', (extract(epoch FROM p_expires_at) * 1000000)::bigint)))::text;
    PERFORM pg_logical_emit_message(true, p_prefix,
        'hmac-sha256:' || encode(sha256(v_opad || sha256(v_ipad || convert_to(v_body, 'UTF8'))), 'hex')
        || ':' || v_body);
    RETURN v_event_id;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text, timestamptz, timestamptz) FROM PUBLIC;

DO $$
DECLARE
    f   record;
    a   record;
BEGIN
    FOR f IN SELECT 'postbox.enqueue(text,text,text,jsonb,jsonb,text,timestamptz,timestamptz)'::regprocedure AS fn,
                    current_setting('postbox.v15_enqueue_acl') AS acl
             UNION ALL
             SELECT 'postbox.emit(text,text,text,jsonb,jsonb,text,text,timestamptz,timestamptz)'::regprocedure,
                    current_setting('postbox.v15_emit_acl') LOOP
        CONTINUE WHEN f.acl = '';  -- the default: PUBLIC may execute (enqueue), as the new one
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.fn);
        FOR a IN SELECT x.grantee, x.is_grantable FROM aclexplode(f.acl::aclitem[]) x
                 WHERE x.privilege_type = 'EXECUTE' LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f.fn,
                           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                           CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

-- The relay's claim (sql/006_claim_functions.sql says how it works, sql/010 how it walks around
-- the ids in flight), returning the events' times as two more columns. Since delayed events are
-- waiting rows, "something waits" is the usual state of an outbox that holds a reminder for
-- tomorrow, and that path got cheaper: it walks the gaps between the ids in flight too (it
-- walked over them, reading about four batches of rows to return one), and while at most 32
-- rows wait it asks the waiting rows of a candidate's aggregate (one index probe, a few buffers)
-- only for candidates whose aggregate is among theirs (a list read once per claim; a key that
-- two aggregates share, '/' in their names, only costs a probe), instead of for every
-- candidate. A changed result type needs the function dropped first; a relay of an earlier
-- version names the columns it reads, and reads them still.
DROP FUNCTION postbox.claim(integer, integer, integer[], int8multirange);
CREATE FUNCTION postbox.claim(p_limit integer, p_shards integer, p_owned integer[],
                              p_in_flight int8multirange)
RETURNS TABLE (id bigint, event_id uuid, aggregate_type text, aggregate_id text,
               event_type text, payload text, headers text, destination text,
               created_at_us bigint, attempts integer, parked boolean, sequence bigint,
               available_at_us bigint, expires_at_us bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
SET search_path = pg_catalog, postbox, pg_temp
AS $fn$
DECLARE
    v_waiting boolean := EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting);
    -- while few rows wait: the aggregates they belong to ("type/id"); NULL: probe every row
    v_keys    text[];
    v_shards  integer[];
    v_rows    text;
    r         record;
    c         refcursor;
    v_park    bigint[] := '{}';
    v_until   timestamptz[] := '{}';
    v_ranges  int8range[] := ARRAY(SELECT x FROM unnest(p_in_flight) x);  -- in id order
    v_gaps    boolean := false;  -- walking the gaps between the ranges in flight
    v_from    bigint := -9223372036854775808;  -- the gap being walked starts here
    v_last    bigint;                          -- and ends here
    v_left    integer := p_limit;
    v_n       integer;
    v_i       integer := 0;
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
               o.attempts, o.next_attempt_at, %s AS blocked_until, o.sequence,
               (extract(epoch FROM o.available_at) * 1000000)::bigint AS available_at_us,
               (extract(epoch FROM o.expires_at) * 1000000)::bigint AS expires_at_us
        FROM (%s) o ORDER BY o.id$q$;
    v_blocked constant text := $q$
        CASE WHEN $3::text[] IS NULL OR o.aggregate_type || '/' || o.aggregate_id = ANY($3) THEN
        (SELECT b.next_attempt_at FROM postbox.outbox b
         WHERE b.waiting AND b.aggregate_type = o.aggregate_type
           AND b.aggregate_id = o.aggregate_id AND b.id < o.id
         ORDER BY b.id DESC LIMIT 1) END$q$;
BEGIN
    IF p_limit IS NULL OR p_limit <= 0 THEN
        RETURN;
    END IF;
    IF v_waiting AND (SELECT count(*) FROM (SELECT FROM postbox.outbox w WHERE w.waiting LIMIT 33) f) <= 32 THEN
        v_keys := ARRAY(SELECT DISTINCT w.aggregate_type || '/' || w.aggregate_id
                        FROM postbox.outbox w WHERE w.waiting);
    END IF;
    IF p_shards > 1 THEN
        SELECT coalesce(array_agg(DISTINCT s ORDER BY s), '{}') INTO v_shards
        FROM unnest(p_owned) s WHERE s >= 0 AND s < p_shards;
        IF cardinality(v_shards) = 0 THEN
            RETURN;
        END IF;
    END IF;

    IF p_shards <= 1 OR cardinality(v_shards) = p_shards THEN
        -- every shard: static statements, planned once per session; this is the hot path
        v_gaps := cardinality(v_ranges) <= 8;
        IF NOT v_gaps AND NOT v_waiting THEN
            RETURN QUERY
            SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                   o.payload::text, o.headers::text, o.destination,
                   (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts, false,
                   o.sequence, (extract(epoch FROM o.available_at) * 1000000)::bigint,
                   (extract(epoch FROM o.expires_at) * 1000000)::bigint
            FROM postbox.outbox o
            WHERE o.published_at IS NULL AND NOT o.waiting AND NOT (p_in_flight @> o.id)
            ORDER BY o.id LIMIT p_limit;
            RETURN;
        END IF;
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
                'destination, created_at_us, attempts, false, sequence, available_at_us, '
                'expires_at_us FROM (' || v_read || ') c',
                'NULL::timestamptz', v_rows) USING p_limit, p_in_flight;
            RETURN;
        END IF;
    END IF;

    -- The gaps between the ranges in flight, in id order, each one index range scan, so that
    -- the rows in flight are not walked over (a relay has up to three batches out): gap i ends
    -- before range i; the last one (i = n + 1) is open at the top. Otherwise one walk: the rows
    -- not in flight of every shard (more than 8 ranges) or of the shards owned.
    LOOP
        v_i := v_i + 1;
        IF v_gaps THEN
            v_last := CASE WHEN v_i <= cardinality(v_ranges) THEN lower(v_ranges[v_i]) - 1
                           ELSE 9223372036854775807 END;
        END IF;
        IF v_gaps AND v_last IS NOT NULL AND NOT v_waiting THEN
            RETURN QUERY
            SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                   o.payload::text, o.headers::text, o.destination,
                   (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts,
                   false, o.sequence, (extract(epoch FROM o.available_at) * 1000000)::bigint,
                   (extract(epoch FROM o.expires_at) * 1000000)::bigint
            FROM postbox.outbox o
            WHERE o.published_at IS NULL AND NOT o.waiting
              AND o.id BETWEEN v_from AND v_last
            ORDER BY o.id LIMIT v_left;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
        ELSIF NOT v_gaps OR v_last IS NOT NULL THEN
            -- something waits: each row is returned with whether it is parked behind a waiting
            -- event of its aggregate
            IF NOT v_gaps AND v_rows IS NOT NULL THEN
                OPEN c FOR EXECUTE format(v_read, v_blocked, v_rows) USING p_limit, p_in_flight, v_keys;
            ELSIF NOT v_gaps THEN
                OPEN c FOR
                    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                           o.payload::text AS payload, o.headers::text AS headers, o.destination,
                           (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
                           o.attempts, o.next_attempt_at,
                           CASE WHEN v_keys IS NULL
                                     OR o.aggregate_type || '/' || o.aggregate_id = ANY(v_keys) THEN
                           (SELECT b.next_attempt_at FROM postbox.outbox b
                            WHERE b.waiting AND b.aggregate_type = o.aggregate_type
                              AND b.aggregate_id = o.aggregate_id AND b.id < o.id
                            ORDER BY b.id DESC LIMIT 1) END AS blocked_until, o.sequence,
                           (extract(epoch FROM o.available_at) * 1000000)::bigint AS available_at_us,
                           (extract(epoch FROM o.expires_at) * 1000000)::bigint AS expires_at_us
                    FROM postbox.outbox o
                    WHERE o.published_at IS NULL AND NOT o.waiting AND NOT (p_in_flight @> o.id)
                    ORDER BY o.id LIMIT p_limit;
            ELSE
                OPEN c FOR
                    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                           o.payload::text AS payload, o.headers::text AS headers, o.destination,
                           (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
                           o.attempts, o.next_attempt_at,
                           CASE WHEN v_keys IS NULL
                                     OR o.aggregate_type || '/' || o.aggregate_id = ANY(v_keys) THEN
                           (SELECT b.next_attempt_at FROM postbox.outbox b
                            WHERE b.waiting AND b.aggregate_type = o.aggregate_type
                              AND b.aggregate_id = o.aggregate_id AND b.id < o.id
                            ORDER BY b.id DESC LIMIT 1) END AS blocked_until, o.sequence,
                           (extract(epoch FROM o.available_at) * 1000000)::bigint AS available_at_us,
                           (extract(epoch FROM o.expires_at) * 1000000)::bigint AS expires_at_us
                    FROM postbox.outbox o
                    WHERE o.published_at IS NULL AND NOT o.waiting
                      AND o.id BETWEEN v_from AND v_last
                    ORDER BY o.id LIMIT v_left;
            END IF;
            LOOP
                FETCH c INTO r;
                EXIT WHEN NOT FOUND;
                id := r.id; event_id := r.event_id; aggregate_type := r.aggregate_type;
                aggregate_id := r.aggregate_id; event_type := r.event_type; payload := r.payload;
                headers := r.headers; destination := r.destination;
                created_at_us := r.created_at_us; attempts := r.attempts;
                parked := r.blocked_until IS NOT NULL;
                sequence := r.sequence;
                available_at_us := r.available_at_us; expires_at_us := r.expires_at_us;
                IF parked THEN
                    v_park := v_park || r.id;
                    v_until := v_until || greatest(r.next_attempt_at, r.blocked_until);
                END IF;
                v_left := v_left - 1;
                RETURN NEXT;
            END LOOP;
            CLOSE c;
        END IF;
        EXIT WHEN NOT v_gaps OR v_left <= 0 OR v_i > cardinality(v_ranges)
                  OR upper(v_ranges[v_i]) IS NULL;
        v_from := upper(v_ranges[v_i]);
    END LOOP;
    IF cardinality(v_park) > 0 THEN
        UPDATE postbox.outbox o SET waiting = true, next_attempt_at = p.until
        FROM unnest(v_park, v_until) AS p(id, until) WHERE o.id = p.id;
    END IF;
END
$fn$;

-- The cdc capture's delayed events. A replication stream cannot hold an event back without
-- holding back everything after it (and the WAL with it, for as long as the delay: a day for a
-- reminder), so the cdc relay sets aside, in this table, each event whose available_at is still
-- to come, and each later event of an aggregate that has one here; it publishes them from here,
-- in this table's order per aggregate, once due, and confirms the stream's position as soon as
-- the rows are written. A row is claimed only once the slot's confirmed position has passed the
-- transaction that wrote its event (commit_lsn): a relay that dies after publishing it cannot
-- meet the event in the stream again and set it aside a second time. Only the relay streaming
-- `slot` reads and writes its rows.
CREATE TABLE postbox.cdc_deferred (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- stream order
    slot           text        NOT NULL,     -- the replication slot of the relay that set it aside
    event_id       uuid        NOT NULL,
    outbox_id      bigint,                   -- its postbox.outbox row (NULL: postbox.emit)
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        text        NOT NULL,     -- the JSON texts as the stream carried them
    headers        text,
    destination    text,
    created_at_us  bigint      NOT NULL,
    sequence       bigint,
    available_at   timestamptz,
    expires_at     timestamptz,
    due_at         timestamptz NOT NULL,     -- its available_at, or a later one of an earlier event of its aggregate
    commit_lsn     pg_lsn      NOT NULL,     -- of the transaction that wrote the event
    deferred_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (slot, event_id)                  -- met again in the stream after a restart: there already
);
-- due rows in publish order; due_at never decreases along an aggregate's rows
CREATE INDEX cdc_deferred_due ON postbox.cdc_deferred (slot, due_at, id);
-- "does this aggregate have an event set aside?" for each event of a batch from the stream
CREATE INDEX cdc_deferred_aggregate ON postbox.cdc_deferred (slot, aggregate_type, aggregate_id, id);
REVOKE ALL ON postbox.cdc_deferred FROM PUBLIC;
