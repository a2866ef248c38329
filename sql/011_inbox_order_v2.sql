-- postbox schema, version 11: the consumer's ordering v2.
--
-- An aggregate_sequence orders; it no longer decides that a message is a duplicate (only the
-- inbox row does). postbox.inbox_sequences keeps, per (consumer, aggregate), the highest number
-- handled, and a message at or below it whose id is new is handled as out of order. A consumer
-- whose subscription takes only some event types of an aggregate sees gaps in the numbers as a
-- matter of course and does not wait for them; its fast path moves an aggregate forward past
-- any gap, as long as the batch's first number is above the last one handled.

COMMENT ON TABLE postbox.inbox_sequences IS
    'per (consumer, aggregate): the highest aggregate_sequence handled, dead-lettered or given up '
    'waiting for; a message at or below it with a new id is handled out of order, never dropped';

-- Moves each aggregate (p_types[k], p_ids[k]) to p_lasts[k], or fails (and with it the batch's
-- transaction) unless every one of them was below p_firsts[k] (or had no row yet).
CREATE FUNCTION postbox.inbox_advance_past(p_consumer text, p_types text[], p_ids text[],
                                           p_firsts bigint[], p_lasts bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_moved bigint;
BEGIN
    WITH w AS (SELECT * FROM unnest(p_types, p_ids, p_firsts, p_lasts) AS w(t, i, f, l)),
    up AS (UPDATE postbox.inbox_sequences s SET last_sequence = w.l, updated_at = now()
           FROM w WHERE s.consumer = p_consumer AND s.aggregate_type = w.t
                    AND s.aggregate_id = w.i AND s.last_sequence < w.f
           RETURNING 1),
    ins AS (INSERT INTO postbox.inbox_sequences (consumer, aggregate_type, aggregate_id,
                                                 last_sequence)
            SELECT p_consumer, w.t, w.i, w.l FROM w
            ON CONFLICT DO NOTHING
            RETURNING 1)
    SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM ins) INTO v_moved;
    IF v_moved <> cardinality(p_types) THEN
        RAISE EXCEPTION 'postbox.inbox_advance_past: % of % aggregates are at or beyond the '
                        'batch''s first number', cardinality(p_types) - v_moved,
                        cardinality(p_types);
    END IF;
END
$$;
