-- postbox schema, version 25: the online migration of an inbox holding rows to the partitioned
-- layout (sql/024 refused it).
--
-- `init --partition-by`, in one short transaction under the inbox's lock: the old table is
-- renamed postbox.inbox_legacy (no copy), the partitioned inbox is made beside it, and a
-- BEFORE INSERT trigger on the new inbox (cloned to every partition, those made later too)
-- moves the legacy row of the key being inserted, if there is one, into the new inbox first.
-- So every statement that inserts an inbox row, whatever consumer binary sent it (a prepared
-- statement is planned again against the new table after the rename), meets the old row in the
-- new inbox: the batch claim's ON CONFLICT DO NOTHING skips the copy (a duplicate), the fast
-- path's plain INSERT fails as it does on any duplicate, and the move rolls back with it.
-- Meanwhile the consumers' janitors move the legacy rows in small batches, each in its own
-- transaction (postbox.inbox_legacy_move); once the legacy table is empty the trigger and the
-- table are dropped and the inbox is the partitioned one alone.
--
-- The rows keep every column: a dead message's row (processed_at NULL), inbox_failures,
-- inbox_dead and inbox_sequences are untouched. Old rows whose ids have a time before the
-- current interval go to one partition, inbox_migrated (from the epoch to the first partition
-- made ahead), so that the DEFAULT partition, scanned at every partition made, stays small;
-- it is purged in batches by the time of receipt and dropped like any partition once its
-- interval is past the retention.
--
-- Locks: a move locks the legacy rows it takes (FOR UPDATE SKIP LOCKED: it never waits for a
-- consumer), a consumer's trigger waits for a move holding its key (then finds it in the new
-- inbox). Whoever deletes a legacy row inserts it into the new inbox in the same transaction,
-- so a key is always in one of the two tables for a transaction that waited for the other.

-- The move of one key's legacy row into the new inbox, if there is one (the trigger below, and
-- the statements that find a row by its id, inbox_row_settle). If a janitor's batch holds the
-- row, this waits for the batch, and the caller's next statement finds the row in the new
-- inbox. Called whatever the layout: the guard keeps the statement from being planned once the
-- table is gone. SECURITY DEFINER: roles granted on the inbox after the migration
-- (init --print-grants) need none on the legacy table.
CREATE FUNCTION postbox.inbox_legacy_take(p_consumer text, p_message_id text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    IF to_regclass('postbox.inbox_legacy') IS NULL THEN
        RETURN;
    END IF;
    WITH moved AS (
        DELETE FROM postbox.inbox_legacy
        WHERE consumer = p_consumer AND message_id = p_message_id
        RETURNING consumer, message_id, message_type, received_at, processed_at,
                  aggregate_type, aggregate_id, aggregate_sequence)
    INSERT INTO postbox.inbox (consumer, message_id, message_type, received_at, processed_at,
                               aggregate_type, aggregate_id, aggregate_sequence)
    SELECT * FROM moved
    ON CONFLICT DO NOTHING;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_legacy_take(text, text) FROM PUBLIC;

-- The trigger on the new inbox while the migration runs: the legacy row of the key being
-- inserted goes to the new inbox first. SECURITY DEFINER, as inbox_legacy_take: any role that
-- may insert into the inbox may run it.
CREATE FUNCTION postbox.inbox_take_legacy()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    PERFORM postbox.inbox_legacy_take(NEW.consumer, NEW.message_id);
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_take_legacy() FROM PUBLIC;

-- The release (p_done false: the row deleted) or the done mark (true: processed_at set) of the
-- row of one message, wherever the migration left it; how many rows (0 or 1). The comparison
-- of the partition key probes only the message's partition (on the single table it holds).
CREATE FUNCTION postbox.inbox_row_settle(p_consumer text, p_message_id text, p_done boolean)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_rows integer;
BEGIN
    PERFORM postbox.inbox_legacy_take(p_consumer, p_message_id);
    IF p_done THEN
        UPDATE postbox.inbox SET processed_at = now()
        WHERE consumer = p_consumer AND message_id = p_message_id
          AND postbox.inbox_message_key(message_id) = postbox.inbox_message_key(p_message_id);
    ELSE
        DELETE FROM postbox.inbox
        WHERE consumer = p_consumer AND message_id = p_message_id
          AND postbox.inbox_message_key(message_id) = postbox.inbox_message_key(p_message_id);
    END IF;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;

-- The partitioned inbox of sql/024, made from the table p_old (its columns, defaults, comments,
-- grants), with inbox_untimed, inbox_default and its row in partitioned_tables; the caller
-- makes the partitions ahead and the index.
CREATE FUNCTION postbox.inbox_partitioned_create(p_old regclass, p_every interval,
                                                 p_ahead integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_comment text := obj_description(p_old, 'pg_class');
BEGIN
    EXECUTE format('CREATE TABLE postbox.inbox (LIKE %s INCLUDING DEFAULTS INCLUDING COMMENTS '
                   'INCLUDING CONSTRAINTS) PARTITION BY RANGE '
                   '(postbox.inbox_message_key(message_id))', p_old);
    CREATE TABLE postbox.inbox_untimed PARTITION OF postbox.inbox (PRIMARY KEY (consumer, message_id))
        FOR VALUES FROM (MINVALUE) TO ('0');  -- '' and whatever sorts before a time
    CREATE TABLE postbox.inbox_default PARTITION OF postbox.inbox (PRIMARY KEY (consumer, message_id))
        DEFAULT;
    INSERT INTO postbox.partitioned_tables (table_name, time_column, every, ahead)
    VALUES ('inbox', 'postbox.inbox_message_key(message_id)', p_every, p_ahead);
    PERFORM postbox.partition_grant_acl('postbox.inbox', c.relacl, c.relowner)
    FROM pg_class c WHERE c.oid = p_old;
    IF v_comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON TABLE postbox.inbox IS %L', v_comment);
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_partitioned_create(regclass, interval, integer)
    FROM PUBLIC;

-- As in sql/024, and an inbox holding rows is migrated online (above).
CREATE OR REPLACE FUNCTION postbox.partition_inbox(p_every interval, p_ahead integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_old     regclass := to_regclass('postbox.inbox');
    v_kind    "char";
    v_known   interval;
    v_rows    boolean;
BEGIN
    SELECT relkind INTO v_kind FROM pg_class WHERE oid = v_old;
    IF v_kind = 'p' THEN
        SELECT every INTO v_known FROM postbox.partitioned_tables WHERE table_name = 'inbox';
        IF v_known IS DISTINCT FROM p_every THEN
            RAISE EXCEPTION 'postbox.inbox is partitioned by % already; changing the interval is '
                            'not supported', coalesce(v_known::text, '(unknown)');
        END IF;
        UPDATE postbox.partitioned_tables SET ahead = p_ahead WHERE table_name = 'inbox';
        RETURN;
    END IF;
    IF to_regclass('postbox.inbox_legacy') IS NOT NULL THEN
        RAISE EXCEPTION 'postbox.inbox_legacy exists but postbox.inbox is not partitioned: '
                        'rename or drop postbox.inbox_legacy first';
    END IF;
    LOCK TABLE postbox.inbox IN ACCESS EXCLUSIVE MODE;
    v_rows := EXISTS (SELECT 1 FROM postbox.inbox);
    ALTER TABLE postbox.inbox RENAME TO inbox_legacy;
    -- the new inbox's index names are free (either may be missing: `postbox check` says so)
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = v_old AND conname = 'inbox_pkey') THEN
        ALTER TABLE postbox.inbox_legacy RENAME CONSTRAINT inbox_pkey TO inbox_legacy_pkey;
    END IF;
    IF to_regclass('postbox.inbox_received_at') IS NOT NULL THEN
        ALTER INDEX postbox.inbox_received_at RENAME TO inbox_legacy_received_at;
    END IF;
    PERFORM postbox.inbox_partitioned_create(v_old, p_every, p_ahead);
    IF v_rows THEN
        -- the old ids' times before the first partition made ahead
        EXECUTE format('CREATE TABLE postbox.inbox_migrated PARTITION OF postbox.inbox '
                       '(PRIMARY KEY (consumer, message_id)) FOR VALUES FROM (%L) TO (%L)',
                       postbox.inbox_key_at('1970-01-01 00:00+00'),
                       postbox.inbox_key_at(postbox.partition_lower(p_every, now())));
        CREATE TRIGGER inbox_take_legacy BEFORE INSERT ON postbox.inbox
            FOR EACH ROW EXECUTE FUNCTION postbox.inbox_take_legacy();
        RAISE WARNING 'postbox.inbox holds rows: it is postbox.inbox_legacy now, beside the '
                      'partitioned inbox; the consumers'' janitors move its rows in batches '
                      '(a copy of an old message is a duplicate meanwhile) and drop it when '
                      'it is empty; `postbox check` shows the progress';
    END IF;
    PERFORM postbox.partitions_create_ahead();
    IF NOT v_rows THEN
        DROP TABLE postbox.inbox_legacy;
    END IF;
    CREATE INDEX inbox_received_at ON postbox.inbox USING brin (received_at)
        WITH (autosummarize = on);
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.partition_inbox(interval, integer) FROM PUBLIC;

-- What the janitors run while postbox.inbox_legacy exists: one batch of up to p_limit legacy
-- rows after the key (p_after_consumer, p_after_id) (NULL: from the start) moved into the new
-- inbox, in the caller's transaction; rows a consumer is moving are skipped (it moves them).
-- Returns how many and the last key moved; gone true: there is no migration (any more).
-- SECURITY DEFINER: the janitors run as lesser roles.
CREATE FUNCTION postbox.inbox_legacy_move(p_limit integer, p_after_consumer text,
                                          p_after_id text)
RETURNS TABLE (moved integer, last_consumer text, last_message_id text, gone boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
AS $$
BEGIN
    IF to_regclass('postbox.inbox_legacy') IS NULL THEN
        RETURN QUERY SELECT 0, NULL::text, NULL::text, true;
        RETURN;
    END IF;
    -- keyset order: the rows moved before are dead in the table, and a scan from the start
    -- would step over all of them at every batch
    RETURN QUERY
    WITH batch AS (
        SELECT l.ctid AS at FROM postbox.inbox_legacy l
        WHERE p_after_consumer IS NULL OR (l.consumer, l.message_id) > (p_after_consumer, p_after_id)
        ORDER BY l.consumer, l.message_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED),
    taken AS (
        DELETE FROM postbox.inbox_legacy
        WHERE ctid = ANY (ARRAY(SELECT at FROM batch))
        RETURNING consumer, message_id, message_type, received_at, processed_at,
                  aggregate_type, aggregate_id, aggregate_sequence),
    put AS (
        INSERT INTO postbox.inbox (consumer, message_id, message_type, received_at,
                                   processed_at, aggregate_type, aggregate_id,
                                   aggregate_sequence)
        SELECT * FROM taken
        ON CONFLICT DO NOTHING)
    SELECT count(*)::integer, max(t.consumer),
           (array_agg(t.message_id ORDER BY t.consumer DESC, t.message_id DESC))[1],
           false
    FROM taken t;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_legacy_move(integer, text, text) FROM PUBLIC;

-- The end of the migration, once a pass of inbox_legacy_move from the start moved nothing:
-- under the inbox's lock (at most 500 ms of waiting; else false, and the janitor tries again),
-- if the legacy table is still empty (a consumer's move may have rolled back a row into it),
-- the trigger and the table are dropped (and inbox_migrated if it is empty). Returns true when
-- the migration is over.
CREATE FUNCTION postbox.inbox_legacy_finish()
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
SET lock_timeout = '500ms'
AS $$
BEGIN
    IF to_regclass('postbox.inbox_legacy') IS NULL THEN
        RETURN true;
    END IF;
    -- rows left (held by a consumer's move, given back by a rollback): no lock taken
    IF EXISTS (SELECT 1 FROM postbox.inbox_legacy) THEN
        RETURN false;
    END IF;
    -- the inbox first, as a consumer's insert takes them (no deadlock with the consumers)
    LOCK TABLE postbox.inbox IN ACCESS EXCLUSIVE MODE;
    LOCK TABLE postbox.inbox_legacy IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM postbox.inbox_legacy) THEN
        RETURN false;
    END IF;
    DROP TRIGGER IF EXISTS inbox_take_legacy ON postbox.inbox;
    DROP TABLE postbox.inbox_legacy;
    -- no old row with a time went there (all untimed, or purged): the partitions of those
    -- days may be made again
    IF to_regclass('postbox.inbox_migrated') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM postbox.inbox_migrated) THEN
        DROP TABLE postbox.inbox_migrated;
    END IF;
    RETURN true;
EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
    RETURN false;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_legacy_finish() FROM PUBLIC;

-- For `postbox check` and `postbox status`: the rows left in postbox.inbox_legacy, NULL when
-- no migration is in progress (an estimate past 100,000: a count would scan it all). The
-- legacy table keeps the old inbox's grants, so the consumer's role may count it.
CREATE FUNCTION postbox.inbox_legacy_rows()
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_rows bigint;
BEGIN
    IF to_regclass('postbox.inbox_legacy') IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO v_rows FROM (SELECT 1 FROM postbox.inbox_legacy LIMIT 100001) x;
    IF v_rows > 100000 THEN
        SELECT greatest(reltuples::bigint, v_rows) INTO v_rows FROM pg_class
        WHERE oid = 'postbox.inbox_legacy'::regclass;
    END IF;
    RETURN v_rows;
END
$$;

-- As in sql/024, and the partition of the migrated rows (inbox_migrated), which holds rows of
-- years, is purged in batches too until the retention drops it whole.
CREATE OR REPLACE FUNCTION postbox.inbox_purge_unpartitioned(p_cutoff timestamptz,
                                                             p_limit integer, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_part text;
    v_deleted bigint := 0;
    v_batch bigint;
BEGIN
    FOREACH v_part IN ARRAY ARRAY['inbox_untimed', 'inbox_default', 'inbox_migrated'] LOOP
        EXIT WHEN v_deleted >= p_limit;
        CONTINUE WHEN to_regclass('postbox.' || v_part) IS NULL;
        EXECUTE format(
            'WITH old AS ('
            '  SELECT consumer, message_id, aggregate_type, aggregate_id, aggregate_sequence'
            '  FROM postbox.%1$I b'
            '  WHERE b.received_at < $1 AND ($3::text IS NULL OR b.consumer = $3)'
            '    AND (b.processed_at IS NOT NULL OR NOT EXISTS ('
            '         SELECT 1 FROM postbox.inbox_dead d'
            '         WHERE d.consumer = b.consumer AND d.message_id = b.message_id))'
            '  LIMIT $2 FOR UPDATE SKIP LOCKED), '
            'held AS ('
            '  SELECT s.consumer, s.aggregate_type, s.aggregate_id FROM postbox.inbox_sequences s'
            '  WHERE (s.consumer, s.aggregate_type, s.aggregate_id) IN ('
            '    SELECT consumer, aggregate_type, aggregate_id FROM old'
            '    WHERE aggregate_sequence IS NOT NULL)'
            '  FOR UPDATE SKIP LOCKED), '
            'gone AS ('
            '  DELETE FROM postbox.%1$I i USING old o'
            '  WHERE i.consumer = o.consumer AND i.message_id = o.message_id'
            '    AND (o.aggregate_sequence IS NULL'
            '         OR (o.consumer, o.aggregate_type, o.aggregate_id) IN (SELECT * FROM held)'
            '         OR NOT EXISTS (SELECT 1 FROM postbox.inbox_sequences s'
            '                        WHERE s.consumer = o.consumer'
            '                          AND s.aggregate_type = o.aggregate_type'
            '                          AND s.aggregate_id = o.aggregate_id))'
            '  RETURNING i.consumer, i.aggregate_type, i.aggregate_id, i.aggregate_sequence,'
            '            i.received_at), '
            'folded AS ('
            '  INSERT INTO postbox.inbox_sequences AS s (consumer, aggregate_type, aggregate_id,'
            '      last_sequence, purged, purged_before)'
            '  SELECT consumer, aggregate_type, aggregate_id, max(aggregate_sequence),'
            '         range_agg(int8range(aggregate_sequence, aggregate_sequence, ''[]'')),'
            '         max(received_at)'
            '  FROM gone WHERE aggregate_sequence IS NOT NULL GROUP BY 1, 2, 3'
            '  ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE'
            '  SET purged = coalesce(s.purged, ''{}''::int8multirange) + EXCLUDED.purged,'
            '      purged_before = greatest(s.purged_before, EXCLUDED.purged_before)) '
            'SELECT count(*) FROM gone', v_part)
            INTO v_batch USING p_cutoff, p_limit - v_deleted, p_consumer;
        v_deleted := v_deleted + v_batch;
    END LOOP;
    RETURN v_deleted;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_purge_unpartitioned(timestamptz, integer, text)
    FROM PUBLIC;
