-- postbox schema, version 23: the per-aggregate numbering writes its counter row about once per
-- transaction, not once per event.
--
-- Until now every event updated its aggregate's row in postbox.aggregate_sequences. Inside one
-- transaction each update leaves a row version that the next update must walk past (versions of
-- one's own open transaction cannot be pruned): the cost grew with the square of the events per
-- aggregate (50,000 events over 10 aggregates in one transaction: 14 to 17 times the time without
-- numbering). Now:
--
-- The first event of an aggregate in a transaction takes the next number from the row as before
-- (the upsert that creates or advances it, and locks it until the transaction ends: producers of
-- one aggregate still number in commit order, and a concurrent producer of the aggregate still
-- waits at its first event). So does the second, which also stamps the row a microsecond after
-- the transaction's start (now()) and opens the aggregate's "slot": a transaction-local setting,
-- postbox_seq.s0 .. postbox_seq.s127, chosen by a hash of the aggregate, 4 tried from there. The
-- further events take their numbers from the slot; the third also updates the row without
-- changing it, which queues the deferred constraint trigger aggregate_sequences_flush: at commit
-- it writes the slot's last number into the row, once. A transaction writes each aggregate's row
-- at most four times, whatever its count of events; one with one event per aggregate, once, as
-- before, and sets no slot (a set_config cost that transaction 10-20% of its CPU). postbox.emit,
-- and an aggregate whose first slot holds another, open the slot at the first event. Settings
-- set in a subtransaction revert when it rolls back, as its rows and queued triggers do:
-- ROLLBACK TO SAVEPOINT leaves neither a gap nor a repeat.
-- An aggregate whose 4 slots hold others (a transaction of many aggregates) updates its row per
-- event, as before: correct, slower only when it has many events. After SET CONSTRAINTS ALL
-- IMMEDIATE the flush runs at once and the next event opens the aggregate again: correct.
--
-- A slot's value: "<last number, 19 digits><','|';'><first number, 19 digits>|<aggregate>", ','
-- once the flush is queued, ';' before; "written" padded to 39 characters instead of the numbers
-- once flushed. The aggregate is written length:type then id, so no two aggregates share it. Only
-- 128 slots: PostgreSQL 15 walks every setting of the session at each exit of a function with a
-- SET clause (as the numbering trigger is), and each slot used stays a setting of the session.
--
-- What a session can now do that it could not: change these settings itself. A transaction that
-- sets postbox_seq.* (or runs RESET ALL) between two events of an aggregate misnumbers them: a
-- lost slot is refused at commit (the transaction fails); a forged one is not detected. The
-- consumers' rules bound the harm (a number never makes a message a duplicate; a gap is waited
-- for at most consume.gap_timeout). Leave postbox_seq.* alone.
--
-- Every writer gets the slots: the outbox trigger (postbox.enqueue, libpostbox, a plain INSERT,
-- postbox.capture, `postbox dlq replay`) and postbox.emit (through postbox.next_sequence).
-- Applying this version replaces three functions and adds one and a trigger: an online upgrade;
-- the CREATE TRIGGER waits for producers' transactions holding aggregate rows. An older relay or
-- consumer works unchanged.

-- The next number of an aggregate in the caller's transaction, as described above. Runs with the
-- caller's rights: only the SECURITY DEFINER functions below call it (EXECUTE is revoked from
-- PUBLIC). The trigger calls it for an aggregate's third event in a transaction, or when the
-- aggregate's first slot holds another.
CREATE FUNCTION postbox.take_sequence(p_aggregate_type text, p_aggregate_id text)
RETURNS bigint
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
        RETURN v_last;
    END IF;
    IF v_value IS NULL THEN
        v_slot := v_free;  -- NULL: the 4 slots hold others; numbered on the row
    END IF;                -- else "written" (flushed early): opened again in its slot
    -- the first event: the upsert of version 18, which locks the row until the transaction ends
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (p_aggregate_type, p_aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id)
    DO UPDATE SET last_sequence = s.last_sequence + 1, updated_at = now()
    RETURNING s.last_sequence INTO v_last;
    IF v_slot IS NOT NULL THEN
        v_set := set_config(v_slot, lpad(v_last::text, 19, '0') || ';' || lpad(v_last::text, 19, '0')
                                    || '|' || v_key, true);
    END IF;
    RETURN v_last;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.take_sequence(text, text) FROM PUBLIC;

-- postbox.emit's numbering (versions 9, 14, 16), now through the slots.
CREATE OR REPLACE FUNCTION postbox.next_sequence(p_aggregate_type text, p_aggregate_id text)
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN postbox.take_sequence(p_aggregate_type, p_aggregate_id);
REVOKE EXECUTE ON FUNCTION postbox.next_sequence(text, text) FROM PUBLIC;

-- The numbering trigger of version 18, numbering through the slots; the usual cases (the
-- aggregate in its first slot, the flush queued; or its first event, its first slot free) inline,
-- a call less per row.
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
        INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
        VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
        ON CONFLICT (aggregate_type, aggregate_id)
        DO UPDATE SET last_sequence = s.last_sequence + 1,
                      updated_at = CASE WHEN s.updated_at >= now() THEN now() + interval '1 microsecond'
                                        ELSE now() END
        RETURNING s.last_sequence, s.updated_at > now() INTO NEW.sequence, v_again;
        IF v_again THEN
            v_set := set_config(v_slot, lpad(NEW.sequence::text, 19, '0') || ';'
                                        || lpad(NEW.sequence::text, 19, '0') || '|' || v_key, true);
        END IF;
    ELSE
        NEW.sequence := postbox.take_sequence(NEW.aggregate_type, NEW.aggregate_id);
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

-- Queued by an aggregate's second event in a transaction (an update of its row that changes
-- nothing, in the transaction that numbered it: no other writer's update, such as an operator's
-- backdating of updated_at, queues it), run at commit (or at once under SET
-- CONSTRAINTS ... IMMEDIATE): writes the last number taken from the aggregate's slot into its
-- row. A slot gone, or opened again since (RESET ALL, or postbox_seq.* set by the session), would
-- leave the row behind the numbers used: refused.
CREATE FUNCTION postbox.flush_sequence() RETURNS trigger
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
    UPDATE postbox.aggregate_sequences SET last_sequence = left(v_value, 19)::bigint
    WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER aggregate_sequences_flush
    AFTER UPDATE ON postbox.aggregate_sequences
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.last_sequence = NEW.last_sequence AND OLD.updated_at = NEW.updated_at
          AND NEW.updated_at >= now())
    EXECUTE FUNCTION postbox.flush_sequence();
