-- postbox schema, version 14: postbox.emit writes under postbox's own prefix only, and takes the
-- trace context.
--
-- postbox.emit runs as the schema owner (SECURITY DEFINER) and took the prefix of its logical
-- message from its caller: a role allowed to emit postbox events could write, as the owner,
-- messages under any prefix, read by whatever else decodes logical messages from this database
-- (another application's prefix, postbox's drain markers). Now the prefix must be postbox's:
-- 'postbox' (the default of cdc.message_prefix) or 'postbox.' followed by a name of letters,
-- digits, '_' and '-' (a relay configured with cdc.message_prefix = postbox.orders); anything
-- else is refused with an error naming the prefix.
--
-- Events written with postbox.emit never touch the outbox, so the trigger of version 13 does not
-- see them: emit adds the session's postbox.traceparent / postbox.tracestate to the event's
-- headers itself, by the same rule (postbox.with_trace_context). The body is version 9's
-- otherwise.
CREATE OR REPLACE FUNCTION postbox.emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT '{}'::jsonb,
    p_destination    text  DEFAULT NULL,
    p_prefix         text  DEFAULT 'postbox')
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_event_id uuid := gen_random_uuid();
    v_body     text;
    v_ipad     bytea;
    v_opad     bytea;
BEGIN
    IF p_prefix IS NULL OR length(p_prefix) > 63
       OR p_prefix !~ '^postbox(\.[A-Za-z0-9_-]+)?$' THEN
        RAISE EXCEPTION 'postbox.emit: prefix % is not postbox''s own', coalesce(quote_literal(p_prefix), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'use ''postbox'' (the default) or ''postbox.NAME'' (letters, digits, _ and -), as in cdc.message_prefix';
    END IF;
    SELECT k.ipad, k.opad INTO STRICT v_ipad, v_opad FROM postbox.emit_key k;
    v_body := jsonb_build_object(
        'event_id', v_event_id,
        'aggregate_type', p_aggregate_type,
        'aggregate_id', p_aggregate_id,
        'event_type', p_event_type,
        'payload', p_payload,
        'headers', postbox.with_trace_context(coalesce(p_headers, '{}'::jsonb)),
        'sequence', postbox.next_sequence(p_aggregate_type, p_aggregate_id),
        'destination', p_destination,
        'created_at_us', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)::text;
    PERFORM pg_logical_emit_message(true, p_prefix,
        'hmac-sha256:' || encode(sha256(v_opad || sha256(v_ipad || convert_to(v_body, 'UTF8'))), 'hex')
        || ':' || v_body);
    RETURN v_event_id;
END
$$;
REVOKE EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text) FROM PUBLIC;
