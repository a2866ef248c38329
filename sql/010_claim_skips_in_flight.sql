-- postbox schema, version 10: the relay's claim walks around the ids in flight instead of over
-- them.
--
-- A relay keeps up to three batches out while it claims the next (the batch the broker is
-- confirming, the one being settled, the one whose COMMIT may still be under way), and names
-- their ids in p_in_flight. The claim of version 9 walked the ready rows in id order and
-- dropped those in flight one by one: each claim read about four batches of rows to return one.
-- Here, when nothing waits for a retry and the ids in flight form at most 8 ranges (the
-- relay's batches are mostly runs of consecutive ids), the claim reads the gaps between the
-- ranges, in id order, each with one range scan of the outbox_ready index, so it reads about
-- the rows it returns. Otherwise it works as in version 9. Same signature and result.

CREATE OR REPLACE FUNCTION postbox.claim(p_limit integer, p_shards integer, p_owned integer[],
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
    v_ranges  int8range[] := ARRAY(SELECT x FROM unnest(p_in_flight) x);  -- in id order
    v_from    bigint := -9223372036854775808;  -- the gap being walked starts here
    v_last    bigint;                          -- and ends here
    v_left    integer := p_limit;
    v_n       integer;
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
        IF NOT v_waiting AND cardinality(v_ranges) <= 8 THEN
            -- the gaps between the ranges in flight, in id order, each one index range scan:
            -- the rows in flight are not walked over (a relay has up to three batches out)
            -- gap i ends before range i; the last one (i = n + 1) is open at the top
            FOR i IN 1 .. cardinality(v_ranges) + 1 LOOP
                v_last := CASE WHEN i <= cardinality(v_ranges) THEN lower(v_ranges[i]) - 1
                               ELSE 9223372036854775807 END;
                IF v_last IS NOT NULL THEN
                    RETURN QUERY
                    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,
                           o.payload::text, o.headers::text, o.destination,
                           (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts,
                           false, o.sequence
                    FROM postbox.outbox o
                    WHERE o.published_at IS NULL AND NOT o.waiting
                      AND o.id BETWEEN v_from AND v_last
                    ORDER BY o.id LIMIT v_left;
                    GET DIAGNOSTICS v_n = ROW_COUNT;
                    v_left := v_left - v_n;
                END IF;
                EXIT WHEN v_left <= 0 OR i > cardinality(v_ranges) OR upper(v_ranges[i]) IS NULL;
                v_from := upper(v_ranges[i]);
            END LOOP;
            RETURN;
        END IF;
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
