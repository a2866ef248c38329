-- postbox schema, version 2: the inbox, where consumers record every message they handled in
-- the same transaction as the handler's work, so each message takes effect once.

CREATE TABLE postbox.inbox (
    consumer      text        NOT NULL,  -- the consuming handler: dedup is per handler
    message_id    text        NOT NULL,  -- from any producer, so text, not uuid
    message_type  text,
    received_at   timestamptz NOT NULL DEFAULT now(),
    processed_at  timestamptz,           -- NULL: dead-lettered, or (commit_inbox_first) in progress
    PRIMARY KEY (consumer, message_id)
);
-- Retention purges handled rows by age.
CREATE INDEX inbox_received_at ON postbox.inbox (received_at);

-- Failed handler runs of messages that will be tried again (cleared on success).
CREATE TABLE postbox.inbox_failures (
    consumer        text        NOT NULL,
    message_id      text        NOT NULL,
    attempts        integer     NOT NULL,
    last_error      text        NOT NULL,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Messages whose handler kept failing, or that can never be handled (no message id).
CREATE TABLE postbox.inbox_dead (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer      text        NOT NULL,
    message_id    text,
    message_type  text,
    exchange      text,
    routing_key   text,
    headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    body          bytea       NOT NULL,
    error         text        NOT NULL,
    attempts      integer     NOT NULL,
    dead_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_dead_consumer ON postbox.inbox_dead (consumer, dead_at);
