-- postbox schema, version 13: W3C trace context captured with every event.
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

-- An SQL-standard body (bound when created, like a pinned search_path) of one SELECT, so that
-- the planner inlines it into its callers: no function call per event.
CREATE FUNCTION postbox.with_trace_context(p_headers jsonb)
RETURNS jsonb
LANGUAGE sql
STABLE
BEGIN ATOMIC
    SELECT CASE
        WHEN coalesce(p_headers ? 'traceparent', false)
             OR NOT coalesce(current_setting('postbox.traceparent', true) ~
                    '^(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$', false)
        THEN p_headers
        ELSE coalesce(p_headers, '{}'::jsonb)
             || jsonb_build_object('traceparent', current_setting('postbox.traceparent', true))
             || CASE WHEN coalesce(current_setting('postbox.tracestate', true), '') = ''
                     THEN '{}'::jsonb
                     ELSE jsonb_build_object('tracestate', current_setting('postbox.tracestate', true))
                END
    END;
END;

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
