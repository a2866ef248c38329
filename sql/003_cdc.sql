-- postbox schema, version 3: what the logical replication (cdc) capture needs.

-- Events written by postbox.emit() have no outbox row.
ALTER TABLE postbox.dead_letters ALTER COLUMN outbox_id DROP NOT NULL;

-- Table-free producer API for the cdc capture: the event travels in the WAL only, as a
-- transactional logical message; it is decoded (and published) only if the transaction commits.
CREATE FUNCTION postbox.emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT '{}'::jsonb,
    p_destination    text  DEFAULT NULL,
    p_prefix         text  DEFAULT 'postbox')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_event_id uuid := gen_random_uuid();
BEGIN
    PERFORM pg_logical_emit_message(true, p_prefix, jsonb_build_object(
        'event_id', v_event_id,
        'aggregate_type', p_aggregate_type,
        'aggregate_id', p_aggregate_id,
        'event_type', p_event_type,
        'payload', p_payload,
        'headers', coalesce(p_headers, '{}'::jsonb),
        'destination', p_destination,
        'created_at_us', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)::text);
    RETURN v_event_id;
END
$$;

-- cdc.delete_after_insert: the row is deleted by the transaction that inserted it. The insert
-- is still decoded from the WAL (the publication publishes inserts only), so the table stays
-- empty and needs no vacuuming of published rows.
CREATE FUNCTION postbox.delete_inserted_row() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM postbox.outbox WHERE id = NEW.id;
    RETURN NULL;
END
$$;
