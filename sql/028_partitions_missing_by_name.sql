-- postbox schema, version 28: postbox.partitions_missing looks for a partition by its name
-- first (issue 28).
--
-- Every relay and consumer runs it at start (the start-up check's schema.partitions, as
-- `postbox check` does). It read the bounds of every partition of every partitioned table, for
-- each table and interval it looks at (postbox.partitions_of: pg_get_expr of each partition's
-- bound, which in a new session loads every partition into the relation cache, and for the
-- inbox a function call per bound). With 30 daily partitions of the history and the inbox that
-- was 10.7 ms of a fresh backend's CPU, against 1.5 ms on the single tables: most of the 13 ms
-- that a relay start costs more on the partitioned layout (measured, README "Partitioned
-- storage"), which bench/partitions times in every relay round.
--
-- The janitors make a partition under the name partition_name gives for its lower bound
-- (partition_create, which takes an existing table of that name for the partition as well), so
-- a child of the table by that name is the partition of the interval; the bounds are read only
-- when there is none, to find the partition that covers the interval under another name (the
-- online migration's <table>_legacy). Same results, same signature.
CREATE OR REPLACE FUNCTION postbox.partitions_missing(p_now timestamptz DEFAULT now())
RETURNS TABLE (table_name text, lower_bound timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    SELECT t.table_name, w.lower_bound
    FROM postbox.partitioned_tables t CROSS JOIN generate_series(0, 1) AS k
    CROSS JOIN LATERAL (SELECT postbox.partition_lower(t.every, p_now + k * t.every)) AS w(lower_bound)
    WHERE CASE  -- a CASE, so that the bounds are read only when the name is not a partition
          WHEN EXISTS (SELECT 1 FROM pg_inherits i
                       WHERE i.inhrelid = to_regclass('postbox.'
                                 || quote_ident(postbox.partition_name(t.table_name, w.lower_bound)))
                         AND i.inhparent = to_regclass('postbox.' || quote_ident(t.table_name)))
          THEN false
          ELSE NOT EXISTS (SELECT 1 FROM postbox.partitions_of(t.table_name) p
                           WHERE p.upper_bound > w.lower_bound
                             AND (p.lower_bound IS NULL OR p.lower_bound <= w.lower_bound))
          END
    ORDER BY 1, 2
$$;
