-- postbox schema, version 30: within an aggregate, id order is numbering order.
--
-- An outbox row's id (its identity default) is drawn before the numbering trigger locks the
-- row's aggregate (postbox.aggregate_sequences) and takes the next number. Two producers of one
-- aggregate could thus draw ids 99 and 100, and the one holding 100 take the lock first: number
-- N went to id 100 and N+1 to id 99. The poll relay publishes in id order, so the broker got
-- N+1 before N (8 producers on 3 hot aggregates: 3,118 of 16,231 events; the postbox consumer
-- put them back in order by their numbers, other consumers did not). The cdc capture, in
-- commit order, was right.
--
-- Now the aggregate's row keeps max_id, an id at or above every id of the aggregate's events
-- numbered so far: the upsert that locks the row (an aggregate's first event in a
-- transaction, and its second) draws the row's id again when max_id is above it, and records
-- the id; the flush at commit (an aggregate's third and later events, numbered in its slot
-- with ids drawn under the lock) raises max_id to the last id drawn. Uncontended producers draw
-- each id once, as before: the ids stay dense, which keeps the relay's ranges of ids in flight
-- few. tests/integration/sequence_id_order.sh checks it under contention. Applying this
-- version adds a column (no rewrite) and replaces functions: an online upgrade; rows of
-- earlier versions have no max_id (their next event keeps its id).

ALTER TABLE postbox.aggregate_sequences ADD COLUMN max_id bigint;

-- take_sequence (version 23) for an outbox row: p_id, the row's id, comes back drawn again when
-- the upsert finds an event of the aggregate with a higher one (max_id). postbox.next_sequence
-- (postbox.emit: no row, no id) keeps the two-argument form.
CREATE FUNCTION postbox.take_sequence(p_aggregate_type text, p_aggregate_id text,
                                      INOUT p_id bigint, OUT p_sequence bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   constant text := length(p_aggregate_type) || ':' || p_aggregate_type || p_aggregate_id;
    v_home  constant integer := hashtext(v_key) & 127;
    v_slot  text;
    v_value text;
    v_free  text;
    v_last  bigint;
    v_set   text;  -- set_config's result (an assignment costs less than PERFORM)
BEGIN
    -- the aggregate's slot, or the first free one
    FOR k IN 0..3 LOOP
        v_slot := 'postbox_seq.s' || ((v_home + k) & 127);
        v_value := current_setting(v_slot, true);
        EXIT WHEN substr(v_value, 41) = v_key;
        IF coalesce(v_value, '') = '' AND v_free IS NULL THEN
            v_free := v_slot;
        END IF;
        v_value := NULL;
    END LOOP;
    IF substr(v_value, 20, 1) IN (',', ';') THEN
        -- numbered in this transaction: the slot counts (set first: a flush run at once by the
        -- UPDATE below, under SET CONSTRAINTS ALL IMMEDIATE, reads it)
        v_last := left(v_value, 19)::bigint + 1;
        v_set := set_config(v_slot, lpad(v_last::text, 19, '0') || ',' || substr(v_value, 21), true);
        IF substr(v_value, 20, 1) = ';' THEN
            -- the slot's second number: queue the flush (by an update that changes nothing;
            -- the trigger fires WHEN nothing changes on a row numbered in this transaction)
            UPDATE postbox.aggregate_sequences SET last_sequence = last_sequence
            WHERE aggregate_type = p_aggregate_type AND aggregate_id = p_aggregate_id;
        END IF;
        p_sequence := v_last;
        RETURN;
    END IF;
    IF v_value IS NULL THEN
        v_slot := v_free;  -- NULL: the 4 slots hold others; numbered on the row
    END IF;                -- else "written" (flushed early): opened again in its slot
    -- the first event: the upsert of version 18, which locks the row until the transaction ends
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, max_id)
    VALUES (p_aggregate_type, p_aggregate_id, 1, p_id)
    ON CONFLICT (aggregate_type, aggregate_id)
    DO UPDATE SET last_sequence = s.last_sequence + 1, updated_at = now(),
                  max_id = CASE WHEN s.max_id > p_id
                                THEN nextval(pg_get_serial_sequence('postbox.outbox', 'id')::regclass)
                                ELSE p_id END
    RETURNING s.last_sequence, s.max_id INTO v_last, p_id;
    IF v_slot IS NOT NULL THEN
        v_set := set_config(v_slot, lpad(v_last::text, 19, '0') || ';' || lpad(v_last::text, 19, '0')
                                    || '|' || v_key, true);
    END IF;
    p_sequence := v_last;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.take_sequence(text, text, bigint) FROM PUBLIC;

-- The numbering trigger of version 23; where it upserts the aggregate's row (the lock), the
-- row's id is drawn again when an event of the aggregate already holds a higher one.
CREATE OR REPLACE FUNCTION postbox.assign_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   constant text := length(NEW.aggregate_type) || ':' || NEW.aggregate_type || NEW.aggregate_id;
    v_slot  constant text := 'postbox_seq.s' || (hashtext(v_key) & 127);
    v_value constant text := current_setting(v_slot, true);
    v_set   text;
    v_again boolean;
    v_taken record;  -- take_sequence's (p_id, p_sequence): one expression, no query
BEGIN
    IF substr(v_value, 20, 1) = ',' AND substr(v_value, 41) = v_key THEN
        NEW.sequence := left(v_value, 19)::bigint + 1;
        v_set := set_config(v_slot, lpad(NEW.sequence::text, 19, '0') || substr(v_value, 20), true);
    ELSIF coalesce(v_value, '') = '' THEN
        -- the aggregate's first event in the transaction, or its second: its first slot is free
        -- (no slot after it can hold it then). The one-event transaction's path: numbered on the
        -- row as before, no slot (a set_config costs that transaction 10-20% of its CPU). A row
        -- numbered in this transaction already (updated_at = now()) is stamped a microsecond
        -- later, and the aggregate opened in its slot: its further events count there.
        INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence, max_id)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, 1, NEW.id)
        ON CONFLICT (aggregate_type, aggregate_id)
        DO UPDATE SET last_sequence = s.last_sequence + 1,
                      updated_at = CASE WHEN s.updated_at >= now() THEN now() + interval '1 microsecond'
                                        ELSE now() END,
                      max_id = CASE WHEN s.max_id > NEW.id
                                    THEN nextval(pg_get_serial_sequence('postbox.outbox', 'id')::regclass)
                                    ELSE NEW.id END
        RETURNING s.last_sequence, s.updated_at > now(), s.max_id INTO NEW.sequence, v_again, NEW.id;
        IF v_again THEN
            v_set := set_config(v_slot, lpad(NEW.sequence::text, 19, '0') || ';'
                                        || lpad(NEW.sequence::text, 19, '0') || '|' || v_key, true);
        END IF;
    ELSE
        v_taken := postbox.take_sequence(NEW.aggregate_type, NEW.aggregate_id, NEW.id);
        NEW.id := v_taken.p_id;
        NEW.sequence := v_taken.p_sequence;
    END IF;
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

-- The flush of version 23; it also raises max_id past every id drawn so far, which covers the
-- events the slot numbered (their ids were drawn under the lock, unrecorded).
CREATE OR REPLACE FUNCTION postbox.flush_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   constant text := length(NEW.aggregate_type) || ':' || NEW.aggregate_type || NEW.aggregate_id;
    v_home  constant integer := hashtext(v_key) & 127;
    v_slot  text;
    v_value text;
    v_set   text;
BEGIN
    FOR k IN 0..3 LOOP
        v_slot := 'postbox_seq.s' || ((v_home + k) & 127);
        v_value := current_setting(v_slot, true);
        EXIT WHEN substr(v_value, 41) = v_key;
        v_value := NULL;
    END LOOP;
    IF starts_with(v_value, 'written') THEN
        RETURN NULL;
    END IF;
    IF v_value IS NULL OR substr(v_value, 20, 1) <> ','
       OR substr(v_value, 21, 19)::bigint <> NEW.last_sequence THEN
        RAISE EXCEPTION 'postbox: the numbering of aggregate (%, %) in this transaction was lost',
                        NEW.aggregate_type, NEW.aggregate_id
            USING HINT = 'a setting postbox_seq.* was changed, or RESET ALL run, between its events';
    END IF;
    v_set := set_config(v_slot, rpad('written', 39) || '|' || v_key, true);
    UPDATE postbox.aggregate_sequences
    SET last_sequence = left(v_value, 19)::bigint,
        max_id = greatest(max_id, pg_sequence_last_value(
                     pg_get_serial_sequence('postbox.outbox', 'id')::regclass))
    WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id;
    RETURN NULL;
END
$$;
