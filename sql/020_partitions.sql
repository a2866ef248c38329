-- postbox schema, version 20: an opt-in partitioned layout for the history tables.
--
-- At tens of thousands of events a minute, retention by batched DELETE leaves published history
-- and the dead-letter tables to bloat and to vacuum. On the partitioned layout each of them is
-- range-partitioned by the time its retention counts from (published_at, dead_at), one
-- partition per interval (default one day), created ahead by the janitors, and retention drops
-- whole partitions. This migration changes no table: it adds the functions, and
-- `postbox init --partition-by INTERVAL` (postbox.partition_tables) switches the layout: an
-- empty table is made again, one holding rows is attached as a partition without a copy (the
-- online migration, below). The default layout stays as it was.
--
-- Not partitioned, on purpose: postbox.inbox. Its duplicate rule needs (consumer, message_id)
-- unique across all time, and a partitioned table's unique index must hold the partition key
-- (received_at): a redelivery received on another day would not conflict. See README,
-- "Partitioned storage", for the designs weighed and what is left.
--
-- Every partitioned table has a DEFAULT partition, so that a row whose time has no partition
-- (the janitor down for longer than the partitions made ahead) is stored all the same: a relay
-- settle or a dead-lettering never fails for want of a partition. `postbox check` reports a
-- missing partition ahead; the retention purge deletes the DEFAULT partition's old rows.

CREATE TABLE postbox.partitioned_tables (
    table_name  text     PRIMARY KEY
                CHECK (table_name IN ('outbox_published', 'dead_letters', 'inbox_dead')),
    time_column text     NOT NULL,
    every       interval NOT NULL
                -- date_bin (the partition bounds) takes no months; an hour at least keeps the
                -- number of partitions a janitor makes and drops small
                CHECK (date_part('month', every) = 0 AND date_part('year', every) = 0
                       AND every >= interval '1 hour'),
    ahead       integer  NOT NULL CHECK (ahead BETWEEN 1 AND 366)
);
COMMENT ON TABLE postbox.partitioned_tables IS
    'the tables on the partitioned layout (postbox init --partition-by), with their interval '
    'and how many intervals ahead the janitors keep partitions';

-- Partition bounds are multiples of the interval from this origin (a Monday at midnight UTC),
-- so that daily partitions start at midnight UTC and weekly ones on Mondays.
CREATE FUNCTION postbox.partition_lower(p_every interval, p_at timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT date_bin(p_every, p_at, timestamptz '2000-01-03 00:00:00+00') $$;

CREATE FUNCTION postbox.partition_name(p_table text, p_lower timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT p_table || '_p' || to_char(p_lower AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MI') $$;

-- The partitions of a table with their bounds (the DEFAULT partition has none).
CREATE FUNCTION postbox.partitions_of(p_table text)
RETURNS TABLE (partition regclass, lower_bound timestamptz, upper_bound timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    SELECT c.oid::regclass,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')::timestamptz,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')::timestamptz
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass('postbox.' || quote_ident(p_table))
$$;

-- Creates the partition of p_table for the interval holding p_at; true if it made one. Another
-- janitor making the same one at once, or a DEFAULT partition already holding rows of that
-- interval (the janitor was down), is a warning, not an error: the rows stay in the DEFAULT
-- partition, which the purge empties by age, and `postbox check` reports the gap.
CREATE FUNCTION postbox.partition_create(p_table text, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_every interval;
    v_lower timestamptz;
    v_name  text;
BEGIN
    SELECT every INTO STRICT v_every FROM postbox.partitioned_tables WHERE table_name = p_table;
    v_lower := postbox.partition_lower(v_every, p_at);
    v_name := postbox.partition_name(p_table, v_lower);
    IF to_regclass('postbox.' || quote_ident(v_name)) IS NOT NULL
       OR EXISTS (SELECT 1 FROM postbox.partitions_of(p_table) p  -- the migrated table's old rows
                  WHERE p.upper_bound > v_lower
                    AND (p.lower_bound IS NULL OR p.lower_bound <= v_lower)) THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('CREATE TABLE postbox.%I PARTITION OF postbox.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, p_table, v_lower, v_lower + v_every);
    EXCEPTION
        WHEN duplicate_table OR unique_violation THEN
            RETURN false;
        WHEN check_violation OR invalid_object_definition THEN
            RAISE WARNING 'postbox: partition % of postbox.% not created: %', v_name, p_table,
                          SQLERRM;
            RETURN false;
    END;
    RETURN true;
END
$$;

-- What the janitors run: the partitions of the current interval and of the `ahead` next ones,
-- for every partitioned table. Returns how many it made. p_now: a test's clock.
CREATE FUNCTION postbox.partitions_create_ahead(p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER  -- a partition is made by the tables' owner; the janitors run as lesser roles
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    t record;
    v_made integer := 0;
BEGIN
    FOR t IN SELECT * FROM postbox.partitioned_tables ORDER BY table_name LOOP
        FOR k IN 0 .. t.ahead LOOP
            IF postbox.partition_create(t.table_name, p_now + k * t.every) THEN
                v_made := v_made + 1;
            END IF;
        END LOOP;
    END LOOP;
    RETURN v_made;
END
$$;

-- For `postbox check`: the partitions missing for the current interval and the next one (the
-- janitor makes `ahead` of them; one missing means it has not run for that long).
CREATE FUNCTION postbox.partitions_missing(p_now timestamptz DEFAULT now())
RETURNS TABLE (table_name text, lower_bound timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    SELECT t.table_name, w.lower_bound
    FROM postbox.partitioned_tables t CROSS JOIN generate_series(0, 1) AS k
    CROSS JOIN LATERAL (SELECT postbox.partition_lower(t.every, p_now + k * t.every)) AS w(lower_bound)
    WHERE NOT EXISTS (SELECT 1 FROM postbox.partitions_of(t.table_name) p
                      WHERE p.upper_bound > w.lower_bound
                        AND (p.lower_bound IS NULL OR p.lower_bound <= w.lower_bound))
    ORDER BY 1, 2
$$;

-- Retention: drops the partitions of p_table whose whole interval ends at or before p_cutoff;
-- returns how many. Dropping a partition takes an ACCESS EXCLUSIVE lock on the parent for a
-- moment: the lock_timeout keeps the relay's settle or a consumer's commit from queueing behind
-- a drop that waits for a long transaction; the partition is dropped by the next round then.
CREATE FUNCTION postbox.partitions_drop_before(p_table text, p_cutoff timestamptz)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER  -- as partitions_create_ahead; only postbox's partitioned tables are touched
SET search_path = pg_catalog, postbox, pg_temp
SET lock_timeout = '500ms'
AS $$
DECLARE
    p record;
    v_dropped integer := 0;
BEGIN
    FOR p IN SELECT * FROM postbox.partitions_of(p_table)
             WHERE upper_bound <= p_cutoff ORDER BY upper_bound LOOP
        BEGIN
            EXECUTE format('DROP TABLE %s', p.partition);
            v_dropped := v_dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'postbox: partition % not dropped (busy; the next purge tries again)',
                          p.partition;
            EXIT;
        END;
    END LOOP;
    RETURN v_dropped;
END
$$;

-- Helpers of the layout switch. The grants of an ACL but its owner's, given on an object made
-- anew (a table or a view).
CREATE FUNCTION postbox.partition_grant_acl(p_object text, p_acl aclitem[], p_owner oid)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT a.grantee, a.privilege_type FROM aclexplode(p_acl) a
             WHERE a.grantee <> p_owner LOOP
        EXECUTE format('GRANT %s ON %s TO %s', g.privilege_type, p_object,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(g.grantee::regrole::text) END);
    END LOOP;
END
$$;

-- The new table's identity goes on from the old one's: dlq commands name rows by id.
CREATE FUNCTION postbox.partition_identity_follow(p_from text, p_to text, p_column text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_called boolean;
BEGIN
    EXECUTE format('SELECT last_value, is_called FROM %s',
                   pg_get_serial_sequence(format('postbox.%I', p_from), p_column))
        INTO v_last, v_called;
    PERFORM setval(pg_get_serial_sequence(format('postbox.%I', p_to), p_column), v_last,
                   v_called);
END
$$;

-- What both ways of switching end with: the DEFAULT partition, the table registered with its
-- partitions ahead, the old table's grants and comment.
CREATE FUNCTION postbox.partition_finish(p_table text, p_column text, p_every interval,
                                         p_ahead integer, p_old regclass, p_comment text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    EXECUTE format('CREATE TABLE postbox.%I PARTITION OF postbox.%I DEFAULT',
                   p_table || '_default', p_table);
    INSERT INTO postbox.partitioned_tables (table_name, time_column, every, ahead)
    VALUES (p_table, p_column, p_every, p_ahead);
    PERFORM postbox.partitions_create_ahead();
    PERFORM postbox.partition_grant_acl(format('postbox.%I', p_table), c.relacl, c.relowner)
    FROM pg_class c WHERE c.oid = p_old;
    IF p_comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON TABLE postbox.%I IS %L', p_table, p_comment);
    END IF;
END
$$;

-- The online migration of a table holding rows (`postbox init --partition-by` on a schema in
-- use): no copy. Beforehand, without blocking writers, init runs partition_online_steps: a CHECK
-- constraint <table>_partition_range (the time column before a bound a day or more ahead),
-- validated, and a unique index <table>_partition_key on the key plus the time column, built
-- concurrently. Then, under a lock held for a moment, the table becomes the partition
-- <table>_legacy of a new partitioned table, FROM (MINVALUE) TO (the bound): the validated
-- constraint spares the attach its scan, the index becomes the partition's primary key, the
-- other indexes are matched, not built. Retention drops the legacy partition whole once its
-- bound is past the retention (its rows stay that much longer than they would have).
CREATE FUNCTION postbox.partition_online_steps(p_every interval)
RETURNS TABLE (table_name text, step text)
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    t record;
    v_old regclass;
    v_has_rows boolean;
    v_upper timestamptz := postbox.partition_lower(p_every,
                               now() + greatest(2 * p_every, interval '1 day')) + p_every;
    v_pk text;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('outbox_published', 'published_at'), ('dead_letters', 'dead_at'),
                                   ('inbox_dead', 'dead_at')) AS v(name, col) LOOP
        v_old := to_regclass('postbox.' || quote_ident(t.name));
        CONTINUE WHEN (SELECT relkind FROM pg_class WHERE oid = v_old) <> 'r';
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_old) INTO v_has_rows;
        CONTINUE WHEN NOT v_has_rows;
        table_name := t.name;
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = v_old
                       AND conname = t.name || '_partition_range') THEN
            step := format('ALTER TABLE postbox.%I ADD CONSTRAINT %I CHECK (%I < %L) NOT VALID',
                           t.name, t.name || '_partition_range', t.col, v_upper);
            RETURN NEXT;
        END IF;
        step := format('ALTER TABLE postbox.%I VALIDATE CONSTRAINT %I', t.name,
                       t.name || '_partition_range');
        RETURN NEXT;
        IF EXISTS (SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                   WHERE x.indrelid = v_old AND c.relname = t.name || '_partition_key'
                     AND NOT (x.indisvalid AND x.indisready)) THEN
            step := format('DROP INDEX CONCURRENTLY postbox.%I', t.name || '_partition_key');
            RETURN NEXT;
        END IF;
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.o) INTO v_pk
        FROM pg_index x
        CROSS JOIN unnest(x.indkey) WITH ORDINALITY AS k(attnum, o)
        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
        WHERE x.indrelid = v_old AND x.indisprimary;
        step := format('CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS %I ON postbox.%I (%s, %I)',
                       t.name || '_partition_key', t.name, v_pk, t.col);
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE FUNCTION postbox.partition_attach_legacy(p_table text, p_column text, p_every interval,
                                                p_ahead integer, p_old regclass, p_pk text,
                                                p_indexes text[], p_comment text,
                                                p_identity text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_legacy   text := p_table || '_legacy';
    v_upper    timestamptz;
    v_ix       record;
    i          integer;
BEGIN
    SELECT substring(pg_get_constraintdef(c.oid) FROM '''([^'']*)''')::timestamptz INTO v_upper
    FROM pg_constraint c
    WHERE c.conrelid = p_old AND c.conname = p_table || '_partition_range' AND c.convalidated;
    IF v_upper IS NULL OR NOT EXISTS (
           SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
           WHERE x.indrelid = p_old AND c.relname = p_table || '_partition_key'
             AND x.indisvalid AND x.indisready) THEN
        RAISE EXCEPTION 'postbox.% holds rows and is not prepared for the online migration: '
                        'run `postbox init --partition-by INTERVAL`, which prepares it (or run '
                        'the steps of SELECT * FROM postbox.partition_online_steps(INTERVAL) '
                        'one by one, outside a transaction)', p_table;
    END IF;
    IF v_upper <= now() THEN
        RAISE EXCEPTION 'postbox.%: the bound of its prepared constraint (%) has passed: drop '
                        'constraint %_partition_range and run init again', p_table, v_upper,
                        p_table;
    END IF;
    -- the old table's indexes and key step aside for the new table's names
    FOR v_ix IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                WHERE x.indrelid = p_old AND c.relname <> p_table || '_partition_key'
                  AND NOT x.indisprimary LOOP
        EXECUTE format('ALTER INDEX postbox.%I RENAME TO %I', v_ix.relname,
                       left(v_ix.relname, 55) || '_legacy');
    END LOOP;
    FOR v_ix IN SELECT conname FROM pg_constraint WHERE conrelid = p_old AND contype = 'p' LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', p_old, v_ix.conname);
    END LOOP;
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY USING INDEX %I', p_old,
                   v_legacy || '_pkey', p_table || '_partition_key');
    EXECUTE format('ALTER TABLE %s RENAME TO %I', p_old, v_legacy);
    EXECUTE format('CREATE TABLE postbox.%I (LIKE postbox.%I INCLUDING DEFAULTS INCLUDING IDENTITY '
                   'INCLUDING COMMENTS INCLUDING GENERATED) PARTITION BY RANGE (%I)',
                   p_table, v_legacy, p_column);
    IF p_identity IS NOT NULL THEN
        PERFORM postbox.partition_identity_follow(v_legacy, p_table, p_identity);
    END IF;
    EXECUTE format('ALTER TABLE postbox.%I ADD PRIMARY KEY (%s, %I)', p_table, p_pk, p_column);
    EXECUTE format('ALTER TABLE postbox.%I ATTACH PARTITION postbox.%I FOR VALUES FROM (MINVALUE) '
                   'TO (%L)', p_table, v_legacy, v_upper);
    FOR i IN 1 .. coalesce(array_length(p_indexes, 1), 0) LOOP
        EXECUTE p_indexes[i];  -- matched with the legacy partition's index, not built
    END LOOP;
    PERFORM postbox.partition_finish(p_table, p_column, p_every, p_ahead, p_old, p_comment);
END
$$;

-- Switches one table to the partitioned layout. An empty one (`postbox init --partition-by` on a
-- new schema) is made again: a partitioned table with the same columns, defaults, identity
-- (going on from the old numbering), comments, indexes, grants and dependent views, the old one
-- dropped, under a lock held for a moment. One holding rows goes through
-- partition_attach_legacy (above). The primary key gains the partition column (an id stays
-- unique: the identity or the outbox's id hands each out once).
CREATE FUNCTION postbox.partition_table(p_table text, p_column text, p_every interval,
                                        p_ahead integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_old      regclass := to_regclass('postbox.' || quote_ident(p_table));
    v_kind     "char";
    v_known    interval;
    v_pk       text;
    v_indexes  text[];
    v_views    text[][];
    v_comment  text;
    v_identity text;
    v_has_rows boolean;
    i          integer;
BEGIN
    SELECT relkind INTO v_kind FROM pg_class WHERE oid = v_old;
    IF v_kind = 'p' THEN
        SELECT every INTO v_known FROM postbox.partitioned_tables WHERE table_name = p_table;
        IF v_known IS DISTINCT FROM p_every THEN
            RAISE EXCEPTION 'postbox.% is partitioned by % already; changing the interval is not '
                            'supported', p_table, coalesce(v_known::text, '(unknown)');
        END IF;
        UPDATE postbox.partitioned_tables SET ahead = p_ahead WHERE table_name = p_table;
        RETURN;
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_old);

    -- what the new table must get again: primary key columns, other indexes, views, grants
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.o) INTO v_pk
    FROM pg_index x
    CROSS JOIN unnest(x.indkey) WITH ORDINALITY AS k(attnum, o)
    JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
    WHERE x.indrelid = v_old AND x.indisprimary;
    IF EXISTS (SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
               WHERE x.indrelid = v_old AND x.indisunique AND NOT x.indisprimary
                 AND c.relname <> p_table || '_partition_key')  -- the online migration's
    THEN
        RAISE EXCEPTION 'postbox.% has a unique index besides its primary key: cannot partition '
                        'it', p_table;
    END IF;
    SELECT array_agg(pg_get_indexdef(x.indexrelid)) INTO v_indexes
    FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
    WHERE x.indrelid = v_old AND NOT x.indisprimary AND c.relname <> p_table || '_partition_key';
    SELECT array_agg(ARRAY[format('%I.%I', n.nspname, c.relname), pg_get_viewdef(c.oid),
                           c.relacl::text, c.relowner::text])
    INTO v_views
    FROM (SELECT DISTINCT r.ev_class AS oid FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
          WHERE d.refobjid = v_old AND r.ev_class <> v_old) v
    JOIN pg_class c ON c.oid = v.oid JOIN pg_namespace n ON n.oid = c.relnamespace;
    v_comment := obj_description(v_old, 'pg_class');
    SELECT a.attname INTO v_identity FROM pg_attribute a
    WHERE a.attrelid = v_old AND a.attidentity <> '' AND NOT a.attisdropped;

    -- dependent views go first (made again at the end, with their grants)
    FOR i IN 1 .. coalesce(array_length(v_views, 1), 0) LOOP
        EXECUTE format('DROP VIEW %s', v_views[i][1]);
    END LOOP;

    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_old) INTO v_has_rows;
    IF v_has_rows THEN
        PERFORM postbox.partition_attach_legacy(p_table, p_column, p_every, p_ahead, v_old, v_pk,
                                                v_indexes, v_comment, v_identity);
    ELSE
        PERFORM postbox.partition_remake_empty(p_table, p_column, p_every, p_ahead, v_old, v_pk,
                                               v_indexes, v_comment, v_identity);
    END IF;
    FOR i IN 1 .. coalesce(array_length(v_views, 1), 0) LOOP
        EXECUTE format('CREATE VIEW %s AS %s', v_views[i][1], v_views[i][2]);
        PERFORM postbox.partition_grant_acl(v_views[i][1], v_views[i][3]::aclitem[],
                                            v_views[i][4]::oid);
    END LOOP;
END
$$;

-- An empty table made again partitioned, under the caller's lock.
CREATE FUNCTION postbox.partition_remake_empty(p_table text, p_column text, p_every interval,
                                               p_ahead integer, p_old regclass, p_pk text,
                                               p_indexes text[], p_comment text,
                                               p_identity text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    i integer;
BEGIN
    EXECUTE format('ALTER TABLE %s RENAME TO %I', p_old, p_table || '_unpartitioned');
    EXECUTE format('CREATE TABLE postbox.%I (LIKE postbox.%I INCLUDING DEFAULTS INCLUDING IDENTITY '
                   'INCLUDING COMMENTS INCLUDING GENERATED INCLUDING CONSTRAINTS) '
                   'PARTITION BY RANGE (%I)', p_table, p_table || '_unpartitioned', p_column);
    IF p_identity IS NOT NULL THEN
        PERFORM postbox.partition_identity_follow(p_table || '_unpartitioned', p_table,
                                                  p_identity);
    END IF;
    PERFORM postbox.partition_finish(p_table, p_column, p_every, p_ahead, p_old, p_comment);
    EXECUTE format('DROP TABLE %s', p_old);  -- its index names are free after that
    IF p_pk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE postbox.%I ADD PRIMARY KEY (%s, %I)', p_table, p_pk,
                       p_column);
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_indexes, 1), 0) LOOP
        EXECUTE p_indexes[i];
    END LOOP;
END
$$;

-- `postbox init --partition-by INTERVAL`: the published history and both dead-letter tables on
-- the partitioned layout (a table on it already keeps its interval; a different one is an
-- error). Returns the partitioned tables.
CREATE FUNCTION postbox.partition_tables(p_every interval, p_ahead integer DEFAULT 3)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    IF p_every IS NULL OR date_part('month', p_every) <> 0 OR date_part('year', p_every) <> 0
       OR p_every < interval '1 hour' THEN
        RAISE EXCEPTION 'postbox: partition interval %: expected one hour or more, in hours, '
                        'days or weeks (months have no fixed length)', p_every;
    END IF;
    IF p_ahead IS NULL OR p_ahead NOT BETWEEN 1 AND 366 THEN
        RAISE EXCEPTION 'postbox: partitions ahead %: expected 1 to 366', p_ahead;
    END IF;
    PERFORM postbox.partition_table('outbox_published', 'published_at', p_every, p_ahead);
    PERFORM postbox.partition_table('dead_letters', 'dead_at', p_every, p_ahead);
    PERFORM postbox.partition_table('inbox_dead', 'dead_at', p_every, p_ahead);
    RETURN QUERY SELECT table_name FROM postbox.partitioned_tables ORDER BY 1;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.partition_tables(interval, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_online_steps(interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_remake_empty(text, text, interval, integer, regclass,
                                                          text, text[], text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_grant_acl(text, aclitem[], oid) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_finish(text, text, interval, integer, regclass, text)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_identity_follow(text, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_attach_legacy(text, text, interval, integer, regclass,
                                                           text, text[], text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_table(text, text, interval, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partition_create(text, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partitions_create_ahead(timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox.partitions_drop_before(text, timestamptz) FROM PUBLIC;
-- layout metadata, read by `postbox check` whichever role runs it
GRANT SELECT ON postbox.partitioned_tables TO PUBLIC;

-- Retention of a DEFAULT partition (rows of times no partition covered): one batch of up to
-- p_limit rows older than p_cutoff, deleted; returns how many. SECURITY DEFINER: grants are
-- given on the partitioned table, which a DELETE straight on the partition does not use.
CREATE FUNCTION postbox.partitions_purge_default(p_table text, p_cutoff timestamptz,
                                                 p_limit integer)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_column text;
    v_deleted bigint;
BEGIN
    SELECT time_column INTO STRICT v_column FROM postbox.partitioned_tables
    WHERE table_name = p_table;
    EXECUTE format('DELETE FROM postbox.%1$I WHERE ctid = ANY(ARRAY('
                   'SELECT ctid FROM postbox.%1$I WHERE %2$I < $1 LIMIT $2))',
                   p_table || '_default', v_column)
        USING p_cutoff, p_limit;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.partitions_purge_default(text, timestamptz, integer) FROM PUBLIC;
