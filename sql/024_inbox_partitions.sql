-- postbox schema, version 24: the inbox on the partitioned layout too.
--
-- sql/020 left the inbox one table: its duplicate rule needs (consumer, message_id) unique for
-- all time, and a unique index of a table partitioned by the time of receipt would let a
-- redelivery received on another day in. Here the inbox is partitioned by the time written in
-- the message id, a function of the id alone (postbox.inbox_message_key): every copy of a
-- message goes to the same partition, so a primary key (consumer, message_id) on each
-- partition catches every redelivery with one index probe, as on the single table.
--
-- * An id shaped as a UUIDv7 (postbox's producers make them, sql/021) gives the time written
--   in it (its first 48 bits, milliseconds since 1970), kept as hexadecimal text.
-- * Any other id (a foreign producer's UUIDv4, an order number) has no time of its own: its
--   key is '' and it goes to the partition inbox_untimed (FROM MINVALUE TO '0', which no time
--   reaches). It is never dropped; the batched purge empties it by the time of receipt as on
--   the single table. Such messages cost no more than the others.
-- * A time older than the oldest partition (retention dropped it) or beyond the partitions
--   made ahead goes to inbox_default, purged like inbox_untimed.
-- The time a message carries besides its id (created_at header, AMQP timestamp, CloudEvents
-- time, Kafka record timestamp) is not used: nothing makes it the same on every copy (a Kafka
-- record produced again gets a new timestamp), and the partition key must be a function of
-- the id alone.
--
-- PostgreSQL refuses a unique index on a table partitioned by an expression, so the key is
-- made on each partition (partition_create, below) and `postbox check` verifies it. The
-- consumer's INSERT ... ON CONFLICT DO NOTHING names no arbiter, so it uses the key of the
-- partition the row goes to; the plain INSERT of the fast path fails on it as before.
--
-- Retention drops a partition once its whole interval is older than the retention and no row
-- in it was received since (a replayed old message keeps its partition until its own
-- retention is over); before the drop, the numbers of its handled rows are folded into
-- postbox.inbox_sequences as the batched purge does (sql/012), under a lock on the inbox held
-- for the fold, so that the duplicate rule after a purge holds.

-- The partition key, on the consumer's hottest path (every message, in tuple routing), so it
-- only looks: an id shaped as a UUIDv7 (36 characters, hyphens in place, version digit 7) gives
-- its first 13 characters, the time in hexadecimal ('0193e0a1-2b00'), which sort as the times
-- do (collation "C"); any other id gives ''. Nothing is decoded, so no id can make it fail
-- (measured under load, per id: a regular expression of the UUID shape took 12-16 us,
-- decoding the time into a timestamptz with its checks 2.5 us, this LIKE about 0.5 us).
-- An id that has the shape without being a UUIDv7 (non-hexadecimal, upper case) sorts
-- somewhere all the same: always the same partition for the same id, which is what the key
-- needs; only its retention runs by that partition's time.
CREATE FUNCTION postbox.inbox_message_key(p_message_id text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (CASE WHEN p_message_id LIKE '________-____-7___-____-____________'
             THEN left(p_message_id, 13) ELSE '' END) COLLATE "C";
COMMENT ON FUNCTION postbox.inbox_message_key(text) IS
    'the partition key of the partitioned inbox: the hexadecimal time of a UUIDv7 message id, '
    '(empty) for any other id; the same for every copy of a message';

-- The key is a SQL-standard body: bound when it is created (no caller's search_path reaches it)
-- and still inlined where the inbox routes and prunes, which a pinned search_path would prevent.
-- The key of a time (a partition bound), and the time of a key (NULL if it is none).
CREATE FUNCTION postbox.inbox_key_at(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4)
    FROM lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0') AS h
$$;
CREATE FUNCTION postbox.inbox_key_time(p_key text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_key ~ '^[0-9a-f]{8}-[0-9a-f]{4}$'
                THEN to_timestamp(('x' || replace(p_key, '-', ''))::bit(48)::bigint / 1000.0::float8)
           END
$$;
-- For people and tests: the time of a message id, -infinity if it has none.
CREATE FUNCTION postbox.inbox_message_time(p_message_id text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(postbox.inbox_key_time(postbox.inbox_message_key(p_message_id)),
                    timestamptz '-infinity')
$$;

-- As in sql/020; the inbox's bounds are keys, given as their times.
CREATE OR REPLACE FUNCTION postbox.partitions_of(p_table text)
RETURNS TABLE (partition regclass, lower_bound timestamptz, upper_bound timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    SELECT c.oid::regclass,
           CASE WHEN p_table = 'inbox' THEN postbox.inbox_key_time(b.lower_text)
                ELSE b.lower_text::timestamptz END,
           CASE WHEN p_table = 'inbox' THEN postbox.inbox_key_time(b.upper_text)
                ELSE b.upper_text::timestamptz END
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (
        SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)'),
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)')
    ) AS b(lower_text, upper_text)
    WHERE i.inhparent = to_regclass('postbox.' || quote_ident(p_table))
$$;

ALTER TABLE postbox.partitioned_tables DROP CONSTRAINT partitioned_tables_table_name_check,
    ADD CONSTRAINT partitioned_tables_table_name_check
        CHECK (table_name IN ('outbox_published', 'dead_letters', 'inbox_dead', 'inbox'));

-- As in sql/020, and a partition of the inbox gets its key (consumer, message_id) in the same
-- statement, before any row can reach it.
CREATE OR REPLACE FUNCTION postbox.partition_create(p_table text, p_at timestamptz)
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
        IF p_table = 'inbox' THEN
            EXECUTE format('CREATE TABLE postbox.%I PARTITION OF postbox.inbox '
                           '(PRIMARY KEY (consumer, message_id)) FOR VALUES FROM (%L) TO (%L)',
                           v_name, postbox.inbox_key_at(v_lower),
                           postbox.inbox_key_at(v_lower + v_every));
        ELSE
            EXECUTE format('CREATE TABLE postbox.%I PARTITION OF postbox.%I FOR VALUES FROM (%L) TO (%L)',
                           v_name, p_table, v_lower, v_lower + v_every);
        END IF;
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

-- Retention of the partitioned inbox, before partitions_drop_before drops p_partition: false
-- (keep it) if a row in it was received at or after p_cutoff (a replayed old message stays its
-- whole retention); else the numbers of its handled rows are folded into inbox_sequences, as
-- the batched purge does (src/store/purge.c; a dead message's row, processed_at NULL, was never
-- handled and is not folded). The lock on the inbox, taken first as the DROP would (so that a
-- consumer's insert never deadlocks with it), keeps rows from arriving between the fold and the
-- drop; the caller's lock_timeout bounds the wait.
CREATE FUNCTION postbox.inbox_partition_fold(p_partition regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_recent boolean;
BEGIN
    LOCK TABLE postbox.inbox IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE received_at >= $1)', p_partition)
        INTO v_recent USING p_cutoff;
    IF v_recent THEN
        RETURN false;
    END IF;
    EXECUTE format(
        'INSERT INTO postbox.inbox_sequences AS s (consumer, aggregate_type, aggregate_id, '
        '    last_sequence, purged, purged_before) '
        'SELECT consumer, aggregate_type, aggregate_id, max(aggregate_sequence), '
        '       range_agg(int8range(aggregate_sequence, aggregate_sequence, ''[]'')), '
        '       max(received_at) '
        'FROM %s WHERE aggregate_sequence IS NOT NULL AND processed_at IS NOT NULL '
        'GROUP BY 1, 2, 3 '
        'ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE '
        'SET purged = coalesce(s.purged, ''{}''::int8multirange) + EXCLUDED.purged, '
        '    purged_before = greatest(s.purged_before, EXCLUDED.purged_before)',
        p_partition);
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.inbox_partition_fold(regclass, timestamptz) FROM PUBLIC;

-- As in sql/020, and the inbox's partitions go through inbox_partition_fold first; its
-- inbox_untimed (no lower bound) is never dropped. A busy inbox (the lock, or a deadlock with a
-- consumer holding a sequence row the fold updates) leaves the partition to the next round.
CREATE OR REPLACE FUNCTION postbox.partitions_drop_before(p_table text, p_cutoff timestamptz)
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
             WHERE upper_bound <= p_cutoff AND (p_table <> 'inbox' OR lower_bound IS NOT NULL)
             ORDER BY upper_bound LOOP
        BEGIN
            CONTINUE WHEN p_table = 'inbox'
                          AND NOT postbox.inbox_partition_fold(p.partition, p_cutoff);
            EXECUTE format('DROP TABLE %s', p.partition);
            v_dropped := v_dropped + 1;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            RAISE WARNING 'postbox: partition % not dropped (busy; the next purge tries again)',
                          p.partition;
            EXIT;
        END;
    END LOOP;
    RETURN v_dropped;
END
$$;

-- The batched retention of the inbox's two partitions that are never dropped (inbox_untimed,
-- inbox_default): one batch of up to p_limit rows received before p_cutoff (of p_consumer, or
-- of all consumers), deleted with their numbers folded exactly as the single table's purge
-- (src/store/purge.c, purge_inbox_sql: rows a consumer holds are skipped, a dead message's row
-- stays while its inbox_dead row does). Returns how many. SECURITY DEFINER: grants are given
-- on the partitioned table, which a statement straight on a partition does not use.
CREATE FUNCTION postbox.inbox_purge_unpartitioned(p_cutoff timestamptz, p_limit integer,
                                                  p_consumer text)
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
    FOREACH v_part IN ARRAY ARRAY['inbox_untimed', 'inbox_default'] LOOP
        EXIT WHEN v_deleted >= p_limit;
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

-- For `postbox check`: the partitions of the partitioned inbox without their key on
-- (consumer, message_id) (made by hand, or attached): a redelivery there is not caught.
CREATE FUNCTION postbox.inbox_partitions_without_key()
RETURNS SETOF regclass
LANGUAGE sql STABLE
SET search_path = pg_catalog, postbox, pg_temp
AS $$
    SELECT p.partition FROM postbox.partitions_of('inbox') p
    WHERE NOT EXISTS (
        SELECT 1 FROM pg_index x
        WHERE x.indrelid = p.partition AND x.indisunique AND x.indisvalid AND x.indisready
          AND x.indpred IS NULL AND x.indexprs IS NULL AND x.indnkeyatts = 2
          AND x.indkey[0] = (SELECT attnum FROM pg_attribute
                             WHERE attrelid = p.partition AND attname = 'consumer')
          AND x.indkey[1] = (SELECT attnum FROM pg_attribute
                             WHERE attrelid = p.partition AND attname = 'message_id'))
    ORDER BY 1
$$;

-- The layout switch of the inbox (`postbox init --partition-by`), under a lock held for a
-- moment. An empty inbox is made again: the same columns, defaults and comments, partitioned
-- by postbox.inbox_message_key(message_id), with inbox_untimed, inbox_default and the
-- partitions ahead, each with its key, the BRIN index on received_at, the old grants. An inbox
-- holding rows stays one table, with a warning: its online migration is not built (see
-- README, "Partitioned storage").
CREATE FUNCTION postbox.partition_inbox(p_every interval, p_ahead integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_old     regclass := to_regclass('postbox.inbox');
    v_kind    "char";
    v_known   interval;
    v_comment text;
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
    LOCK TABLE postbox.inbox IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM postbox.inbox) THEN
        RAISE WARNING 'postbox.inbox holds rows: it stays one table (the online migration of the '
                      'inbox is not built; partition it on a new schema, or once it is empty)';
        RETURN;
    END IF;
    v_comment := obj_description(v_old, 'pg_class');
    ALTER TABLE postbox.inbox RENAME TO inbox_unpartitioned;
    CREATE TABLE postbox.inbox (LIKE postbox.inbox_unpartitioned INCLUDING DEFAULTS
                                INCLUDING COMMENTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (postbox.inbox_message_key(message_id));
    CREATE TABLE postbox.inbox_untimed PARTITION OF postbox.inbox (PRIMARY KEY (consumer, message_id))
        FOR VALUES FROM (MINVALUE) TO ('0');  -- '' and whatever sorts before a time
    CREATE TABLE postbox.inbox_default PARTITION OF postbox.inbox (PRIMARY KEY (consumer, message_id))
        DEFAULT;
    INSERT INTO postbox.partitioned_tables (table_name, time_column, every, ahead)
    VALUES ('inbox', 'postbox.inbox_message_key(message_id)', p_every, p_ahead);
    PERFORM postbox.partitions_create_ahead();
    PERFORM postbox.partition_grant_acl('postbox.inbox', c.relacl, c.relowner)
    FROM pg_class c WHERE c.oid = v_old;
    IF v_comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON TABLE postbox.inbox IS %L', v_comment);
    END IF;
    DROP TABLE postbox.inbox_unpartitioned;  -- its index names are free after that
    CREATE INDEX inbox_received_at ON postbox.inbox USING brin (received_at)
        WITH (autosummarize = on);
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.partition_inbox(interval, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION postbox.partition_tables(p_every interval, p_ahead integer DEFAULT 3)
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
    PERFORM postbox.partition_inbox(p_every, p_ahead);
    RETURN QUERY SELECT table_name FROM postbox.partitioned_tables ORDER BY 1;
END
$$;
