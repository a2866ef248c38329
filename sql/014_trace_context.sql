-- postbox schema, version 14: W3C trace context captured with every event.
--
-- A producer that runs inside a trace says so once per transaction or session:
--     SET LOCAL postbox.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
--     SET LOCAL postbox.tracestate  = 'vendor=value';          -- optional
-- and every event written to the outbox afterwards (postbox.enqueue, a plain INSERT, a capture
-- trigger) gets headers "traceparent" (and "tracestate") unless its own headers carry one
-- already, which is the other way to pass it. A value that is not a W3C traceparent
-- (version-traceid-parentid-flags in lower-case hex, ids not all zero) is ignored, as the W3C
-- specification asks. The relay sends the headers as the broker's native headers; the consumer
-- hands them to the handler ($2).

CREATE FUNCTION postbox.with_trace_context(p_headers jsonb)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parent text := current_setting('postbox.traceparent', true);
    v_state  text;
BEGIN
    IF v_parent IS NULL OR v_parent = '' OR coalesce(p_headers ? 'traceparent', false)
       OR v_parent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
       OR left(v_parent, 2) = 'ff' OR substr(v_parent, 4, 32) = repeat('0', 32)
       OR substr(v_parent, 37, 16) = repeat('0', 16) THEN
        RETURN p_headers;
    END IF;
    v_state := current_setting('postbox.tracestate', true);
    RETURN coalesce(p_headers, '{}'::jsonb) || jsonb_build_object('traceparent', v_parent)
           || CASE WHEN v_state IS NULL OR v_state = '' THEN '{}'::jsonb
                   ELSE jsonb_build_object('tracestate', v_state) END;
END
$$;

-- The numbering trigger of version 9, which sees every row written to the outbox, also takes
-- the trace context (one trigger: one call per row).
CREATE OR REPLACE FUNCTION postbox.assign_sequence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO postbox.aggregate_sequences AS s (aggregate_type, aggregate_id, last_sequence)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_sequence = s.last_sequence + 1
    RETURNING s.last_sequence INTO NEW.sequence;
    IF current_setting('postbox.traceparent', true) <> '' THEN
        NEW.headers := postbox.with_trace_context(NEW.headers);
    END IF;
    RETURN NEW;
END
$$;
