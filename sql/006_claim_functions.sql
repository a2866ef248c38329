-- postbox schema, version 6: the relay's wake and claim become functions whose cost is bounded by
-- the batch size whatever the planner statistics say, the claim parks the events it finds
-- behind a waiting event itself, and a relay with relay.shards > 1 reads only its own shards.
--
-- Stale statistics. The outbox is analyzed while it is nearly empty (its normal state: published
-- rows leave it). When a backlog then builds (broker outage, burst, relay stopped) the planner
-- still believes the table is tiny, and until autovacuum analyzes it the claim was planned as a
-- bitmap scan of every pending row, a sort, and a sequential scan to find a waiting row: at
-- 200,000 pending rows 715 ms and 11,291 buffers per claim of 1,000 instead of 3 ms and 1,055
-- after ANALYZE; the wake's "is a waiting row due?" was a sequential scan of the table (9,516
-- buffers). Nothing in the statistics can make the right plan lose here, since the index walks
-- below are what the queries are written for: the functions turn off the plan types that scan
-- or sort the whole backlog (and JIT, which the resulting costs would switch on), so the planner
-- takes the index whose order and partial predicate are the query's.
--
-- Shards. A shard is postbox.shard_of(aggregate_type, aggregate_id, relay.shards), the one
-- definition of it. No index can serve "% $2 = ANY($3)" for every relay.shards, so `postbox
-- init` with relay.shards = n > 1 creates an index for n (postbox.shard_index_ddl), and the
-- claim walks it once per owned shard, merged in id order: it reads the batch plus one index
-- descent per owned shard, not the other shards' rows. Without that index, or with more than 16
-- shards owned, it walks every shard's ready rows as before (correct, just not bounded).
--
-- Only functions are added: applying this version does not touch the outbox's rows.

-- The shard of an aggregate for relay.shards = p_shards. Never change it: events already in
-- the outbox keep their shard only while this stays the same, and the shard indexes store it.
CREATE FUNCTION postbox.shard_of(p_aggregate_type text, p_aggregate_id text, p_shards integer)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (hashtext(p_aggregate_type || '/' || p_aggregate_id) & 2147483647) % p_shards;

-- The name of the claim's index for relay.shards = p_shards.
CREATE FUNCTION postbox.shard_index_name(p_shards integer)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN 'outbox_ready_shards_' || p_shards;

-- What `postbox init` with relay.shards = p_shards (the count every relay uses) must run, one statement at a time, outside any transaction block: the creation of the
-- index of its shard count when it is missing or invalid (a CREATE INDEX CONCURRENTLY that
-- failed), and the removal of the indexes of other shard counts, which every insert would
-- otherwise still maintain. Nothing when all is in place.
CREATE FUNCTION postbox.shard_index_ddl(p_shards integer)
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
    SELECT format('DROP INDEX CONCURRENTLY IF EXISTS postbox.%I', c.relname)
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = 'postbox.outbox'::regclass
      AND c.relname ~ '^outbox_ready_shards_[0-9]+$'
      AND (p_shards <= 1 OR c.relname <> postbox.shard_index_name(p_shards) OR NOT i.indisvalid)
    UNION ALL
    SELECT format('CREATE INDEX CONCURRENTLY %I ON postbox.outbox '
                  '(postbox.shard_of(aggregate_type, aggregate_id, %s), id) '
                  'WHERE published_at IS NULL AND NOT waiting',
                  postbox.shard_index_name(p_shards), p_shards)
    WHERE p_shards > 1 AND NOT EXISTS (
        SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'postbox.outbox'::regclass AND i.indisvalid
          AND c.relname = postbox.shard_index_name(p_shards))
$$;

-- Wakes up to p_limit waiting events whose retry time has come (outbox_waiting_due, in due
-- order), of the shards in p_owned when p_shards > 1 (another relay's due rows are its own to
-- wake); returns how many. When none is due it is one read of that index and no UPDATE runs
-- (statement-level triggers a user put on the outbox do not fire before every claim). Rows
-- another session holds locked are left for the next call.
CREATE FUNCTION postbox.wake(p_limit integer, p_shards integer DEFAULT 1,
                             p_owned integer[] DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
AS $$
DECLARE
    v_woken integer;
BEGIN
    IF NOT EXISTS (SELECT FROM postbox.outbox d WHERE d.waiting AND d.next_attempt_at <= now()
                     AND (p_shards <= 1 OR postbox.shard_of(d.aggregate_type, d.aggregate_id,
                                                            p_shards) = ANY(p_owned))) THEN
        RETURN 0;
    END IF;
    UPDATE postbox.outbox o SET waiting = false
    FROM (SELECT d.id FROM postbox.outbox d
          WHERE d.waiting AND d.next_attempt_at <= now()
            AND (p_shards <= 1 OR postbox.shard_of(d.aggregate_type, d.aggregate_id,
                                                   p_shards) = ANY(p_owned))
          ORDER BY d.next_attempt_at, d.id LIMIT p_limit
          FOR UPDATE SKIP LOCKED) due
    WHERE o.id = due.id;
    GET DIAGNOSTICS v_woken = ROW_COUNT;
    RETURN v_woken;
END
$$;

-- The claim: the next p_limit pending rows in id order that do not wait (outbox_ready) and
-- whose ids are not in p_in_flight (the caller's batches not yet settled); with p_shards > 1
-- only rows of the shards in p_owned. It takes no row locks: the shard locks make the caller
-- the only one claiming these rows (src/relay/shards.h).
--
-- Per aggregate order: a candidate behind an earlier waiting event of its aggregate (found
-- through outbox_waiting) must not overtake it. The same call parks it: waiting = true,
-- next_attempt_at = greatest(its own, the blocking event's), so no later claim walks over it
-- again, and returns it with parked = true, not for publishing. While nothing waits (checked
-- once per call) no candidate looks, and the rows are returned as read. The parking UPDATE runs
-- only when there is a row to park (a statement-level trigger on the outbox fires then only).
--
-- Rows come in id order: id, event_id, aggregate_type, aggregate_id, event_type, payload,
-- headers, destination, created_at in unix microseconds, attempts, parked.
CREATE FUNCTION postbox.claim(p_limit integer, p_shards integer, p_owned integer[],
                              p_in_flight int8multirange)
RETURNS TABLE (id bigint, event_id uuid, aggregate_type text, aggregate_id text,
               event_type text, payload text, headers text, destination text,
               created_at_us bigint, attempts integer, parked boolean)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off
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
               o.attempts, o.next_attempt_at, %s AS blocked_until
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
                   (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts, false
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
                    ORDER BY b.id DESC LIMIT 1) AS blocked_until
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
                'destination, created_at_us, attempts, false FROM (' || v_read || ') c',
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
