-- postbox schema, version 29: the claim reads the outbox in one snapshot.
--
-- With ids in flight, the claim walks the gaps between their ranges, one statement per gap, and
-- in a VOLATILE function each statement reads the outbox as committed when it starts. A producer
-- transaction that committed between two of those reads an event whose id lies in an earlier
-- gap (the id was drawn before the batches in flight were claimed) and the next event of its
-- aggregate in a later gap had the later event returned without the earlier one: the relay
-- published the two out of order (tests/integration/claim_gap_snapshot.sh forces that
-- interleaving, with nothing waiting and with an event waiting).
--
-- The claim is now STABLE: every statement of a STABLE function reads the snapshot of the
-- statement that calls it (the relay's SELECT ... FROM postbox.claim(...)), so all its reads
-- agree, and the hot path is as before (one index range scan per gap). The one write, setting
-- aside the rows parked behind a waiting event of their aggregate, cannot run in a STABLE
-- function: it moves to postbox.claim_park, VOLATILE, called once after every read. The claim is
-- called once per statement from FROM, as the relay does; its result type is unchanged.

-- Parks the claimed rows p_ids behind the waiting events of their aggregates until p_until. (A
-- body as a string: the table is looked up by name when it runs, so the partitioned layout's
-- switch to a new postbox.outbox needs no new function.)
CREATE FUNCTION postbox.claim_park(p_ids bigint[], p_until timestamptz[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    UPDATE postbox.outbox o SET waiting = true, next_attempt_at = p.until
    FROM unnest(p_ids, p_until) AS p(id, until) WHERE o.id = p.id;
$$;

CREATE OR REPLACE FUNCTION postbox.claim(p_limit integer, p_shards integer, p_owned integer[],
                              p_in_flight int8multirange)
RETURNS TABLE (id bigint, event_id uuid, aggregate_type text, aggregate_id text,
               event_type text, payload text, headers text, destination text,
               created_at_us bigint, attempts integer, parked boolean, sequence bigint,
               available_at_us bigint, expires_at_us bigint)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
SET search_path = pg_catalog, postbox, pg_temp
AS $fn$
DECLARE
    -- a read found a waiting row: the reads from here on ask, per candidate, whether an
    -- earlier event of its aggregate waits
    v_waiting boolean := false;
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
    v_done    boolean;
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
    -- while at most 32 rows wait, the aggregates they belong to ("type/id"), read in the same
    -- statement as the candidates; NULL: probe every candidate
    v_keys    constant text := $q$
        WITH wk AS MATERIALIZED (
            SELECT CASE WHEN count(*) <= 32 THEN coalesce(array_agg(DISTINCT k), '{}') END AS keys
            FROM (SELECT w.aggregate_type || '/' || w.aggregate_id AS k
                  FROM postbox.outbox w WHERE w.waiting LIMIT 33) f) $q$;
    v_blocked constant text := $q$
        CASE WHEN (SELECT keys FROM wk) IS NULL
                  OR o.aggregate_type || '/' || o.aggregate_id = ANY((SELECT keys FROM wk)::text[]) THEN
        (SELECT b.next_attempt_at FROM postbox.outbox b
         WHERE b.waiting AND b.aggregate_type = o.aggregate_type
           AND b.aggregate_id = o.aggregate_id AND b.id < o.id
         ORDER BY b.id DESC LIMIT 1) END$q$;
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
        -- every shard: static statements, planned once per session; this is the hot path
        v_gaps := cardinality(v_ranges) <= 8;
        IF NOT v_gaps THEN
            RETURN QUERY
            SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                   o.payload::text, o.headers::text, o.destination,
                   (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts, false,
                   o.sequence, (extract(epoch FROM o.available_at) * 1000000)::bigint,
                   (extract(epoch FROM o.expires_at) * 1000000)::bigint
            FROM postbox.outbox o
            WHERE o.published_at IS NULL AND NOT o.waiting AND NOT (p_in_flight @> o.id)
              AND NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting)
            ORDER BY o.id LIMIT p_limit;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            -- no row: nothing ready, or something waits (the filter): ask which
            IF v_n > 0 OR NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting) THEN
                RETURN;
            END IF;
            v_waiting := true;
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
        RETURN QUERY EXECUTE format(
            'SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, '
            'destination, created_at_us, attempts, false, sequence, available_at_us, '
            'expires_at_us FROM (' || v_read || ') c '
            'WHERE NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting)',
            'NULL::timestamptz', v_rows) USING p_limit, p_in_flight;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n > 0 OR NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting) THEN
            RETURN;
        END IF;
        v_waiting := true;
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
        v_done := false;
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
              AND NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting)
            ORDER BY o.id LIMIT v_left;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
            -- no row: nothing ready in this gap, or something waits now; then the gap again,
            -- the other way
            v_done := v_n > 0 OR NOT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting);
            v_waiting := NOT v_done;
        END IF;
        IF NOT v_done AND (NOT v_gaps OR v_last IS NOT NULL) THEN
            -- something waits: each row is returned with whether it is parked behind a waiting
            -- event of its aggregate
            IF NOT v_gaps AND v_rows IS NOT NULL THEN
                OPEN c FOR EXECUTE format(v_keys || v_read, v_blocked, v_rows) USING p_limit, p_in_flight;
            ELSIF NOT v_gaps THEN
                OPEN c FOR
                    WITH wk AS MATERIALIZED (
                        SELECT CASE WHEN count(*) <= 32 THEN coalesce(array_agg(DISTINCT k), '{}') END AS keys
                        FROM (SELECT w.aggregate_type || '/' || w.aggregate_id AS k
                              FROM postbox.outbox w WHERE w.waiting LIMIT 33) f)
                    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                           o.payload::text AS payload, o.headers::text AS headers, o.destination,
                           (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
                           o.attempts, o.next_attempt_at,
                           CASE WHEN (SELECT keys FROM wk) IS NULL
                                     OR o.aggregate_type || '/' || o.aggregate_id = ANY((SELECT keys FROM wk)::text[]) THEN
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
                    WITH wk AS MATERIALIZED (
                        SELECT CASE WHEN count(*) <= 32 THEN coalesce(array_agg(DISTINCT k), '{}') END AS keys
                        FROM (SELECT w.aggregate_type || '/' || w.aggregate_id AS k
                              FROM postbox.outbox w WHERE w.waiting LIMIT 33) f)
                    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                           o.payload::text AS payload, o.headers::text AS headers, o.destination,
                           (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_at_us,
                           o.attempts, o.next_attempt_at,
                           CASE WHEN (SELECT keys FROM wk) IS NULL
                                     OR o.aggregate_type || '/' || o.aggregate_id = ANY((SELECT keys FROM wk)::text[]) THEN
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
        -- after every read: the UPDATE runs in a VOLATILE function (not allowed in this one)
        PERFORM postbox.claim_park(v_park, v_until);
    END IF;
END
$fn$;
