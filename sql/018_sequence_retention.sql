-- postbox schema, version 18: the sequence tables get a retention.
--
-- postbox.aggregate_sequences (the producers' numbering, version 9) and postbox.inbox_sequences
-- (per consumer the highest number handled, version 11, with the purged numbers of version 12)
-- hold one row per aggregate, and per consumer and aggregate, for ever. The relay's janitor
-- (relay.sequence_retention, default 90d) and the consumer's (consume.sequence_retention,
-- default 60d) now delete the rows of aggregates idle for longer, as does
-- `postbox purge --sequences`. The rules, and why they keep effects exactly once and in order:
--
-- Producer. An aggregate's row goes only when its last event was numbered before the cutoff
-- (updated_at, below) and none of its events is left unpublished in postbox.outbox or set aside
-- in postbox.cdc_deferred (each carries a number taken from the row; an event of postbox.emit
-- still in the WAL is not seen: a cdc relay must not lag by the retention). The purge skips a row a producer holds (SKIP LOCKED) and
-- re-reads one updated since it looked (FOR UPDATE), so an event written meanwhile keeps it. The
-- aggregate's next event is numbered 1 again: a numbering that starts over.
--
-- Consumer. A row goes only when the consumer moved the aggregate forward before the cutoff
-- (updated_at) and none of the numbers the inbox purge folded into it (purged) was received
-- since (purged_before). The rows of messages received since the cutoff, or their folded numbers,
-- are all kept, so every message handled since the cutoff stays a duplicate; a copy of one
-- handled before it is handled again (as for a message without a number once its inbox row is
-- purged): keep consume.sequence_retention longer than the broker keeps or redelivers a message.
--
-- Together. A consumer whose row is gone takes the aggregate's next number as its first:
-- a numbering that started over (1, 2, ...) is handled in order, as for a new aggregate. Hence
-- the consumer's retention is the shorter: by the time the producer starts over, its consumers
-- have forgotten the aggregate unless one of them lagged by more than the difference (it then
-- handles the new numbers up to its old highest as late: exactly once, in the broker's order,
-- not held for gaps). An aggregate whose events resume between the two retentions continues its
-- numbering; a consumer that forgot it waits for the numbers before (consume.gap_timeout, only
-- when it waits for gaps) once, and goes on in order.
--
-- Applying this version adds a column with a constant default (no table rewrite; the existing
-- rows count as numbered at the upgrade) and replaces the two numbering functions: an online
-- upgrade. The ALTER TABLE waits for the producers' transactions holding aggregate rows, and
-- holds new ones back while it waits. An older relay or consumer keeps working and purges none.

ALTER TABLE postbox.aggregate_sequences
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN postbox.aggregate_sequences.updated_at IS
    'when the aggregate''s last event was numbered: the row goes after relay.sequence_retention '
    'once none of its events is pending (its next event is then numbered 1)';
COMMENT ON COLUMN postbox.inbox_sequences.updated_at IS
    'when this consumer last moved the aggregate forward: the row goes after '
    'consume.sequence_retention unless purged_before is later';

-- The numbering of versions 9, 13 and 16, which also stamps the aggregate's row. No index
-- reads updated_at (the purge reads the table once per round), so the update stays a HOT
-- update, as before.
CREATE OR REPLACE FUNCTION postbox.next_sequence(p_aggregate_type text, p_aggregate_id text)
RETURNS bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (p_aggregate_type, p_aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id)
    DO UPDATE SET last_sequence = s.last_sequence + 1, updated_at = now()
    RETURNING s.last_sequence
$$;

CREATE OR REPLACE FUNCTION postbox.assign_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id)
    DO UPDATE SET last_sequence = s.last_sequence + 1, updated_at = now()
    RETURNING s.last_sequence INTO NEW.sequence;
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
