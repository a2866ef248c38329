-- postbox schema, version 12: duplicates stay duplicates after the retention purge.
--
-- Only an inbox row makes a message a duplicate; the purge deletes old rows. So that a message
-- handled before its row was purged is not handled again when the broker hands it out once more
-- (a Kafka offset reset, a replay from a stream), each inbox row now names its aggregate and
-- sequence number, and the purge folds the numbers of the rows it deletes into the aggregate's
-- postbox.inbox_sequences row: `purged`, the set of those numbers, and `purged_before`, the
-- latest receipt among them. A message whose id is new, whose number is in `purged` and which
-- the broker or producer stamped no later than `purged_before` (plus an hour of clock skew) was
-- handled: it is acknowledged as a duplicate. A number never handled is never in the set (an
-- event the relay dead-lettered and an operator replays later is handled), and a producer whose
-- numbering restarted stamps its new events after the purge's rows, so they are handled too.
-- Rows without a number (no aggregate_sequence, or written by postbox_inbox_process) leave no
-- trace: such a message is handled again once its row is purged.

ALTER TABLE postbox.inbox
    ADD COLUMN aggregate_type     text,
    ADD COLUMN aggregate_id       text,
    ADD COLUMN aggregate_sequence bigint;

ALTER TABLE postbox.inbox_sequences
    ADD COLUMN purged        int8multirange,
    ADD COLUMN purged_before timestamptz;

COMMENT ON COLUMN postbox.inbox_sequences.purged IS
    'aggregate_sequence numbers handled by this consumer whose inbox rows the retention purge '
    'deleted: a redelivery of one of them (stamped before purged_before) is a duplicate';
COMMENT ON COLUMN postbox.inbox_sequences.purged_before IS
    'the latest received_at among the purged rows of the aggregate';

-- The fast path of a consumer that does not wait for gaps: tries the inserts only when the
-- update did not move every aggregate, instead of trying (and conflicting on) each of them in
-- every batch. An aggregate moved by the update conflicts then and counts once.
CREATE OR REPLACE FUNCTION postbox.inbox_advance_past(p_consumer text, p_types text[],
                                                      p_ids text[], p_firsts bigint[],
                                                      p_lasts bigint[])
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
            WHERE (SELECT count(*) FROM up) < cardinality(p_types)
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
