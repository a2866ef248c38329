-- postbox schema, version 4: published events move out of the outbox into a history table.
--
-- Marking a row published in place (UPDATE ... SET published_at) cost six times a DELETE: the
-- new row version is written whole and, since published_at sits in index predicates, every
-- index of the outbox gets a new entry (the random event_id one included). Moving the row costs
-- one DELETE plus an append to a table whose only btree is on the ascending id, and the outbox
-- holds nothing but pending events, so the relay's claim never walks over published rows.

CREATE TABLE postbox.outbox_published (
    id              bigint      PRIMARY KEY,     -- the outbox id it had
    event_id        uuid        NOT NULL,
    aggregate_type  text        NOT NULL,
    aggregate_id    text        NOT NULL,
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL,
    destination     text,
    created_at      timestamptz NOT NULL,
    published_at    timestamptz NOT NULL,
    attempts        integer     NOT NULL,        -- failed attempts before the one that worked
    last_error      text
);
-- Retention deletes by age. Rows arrive in published_at order, so each insert lands on the
-- rightmost leaf of this index: cheap, unlike the random event_id index of the outbox.
CREATE INDEX outbox_published_by_age ON postbox.outbox_published (published_at);

INSERT INTO postbox.outbox_published
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
       created_at, published_at, attempts, last_error
FROM postbox.outbox WHERE published_at IS NOT NULL;
DELETE FROM postbox.outbox WHERE published_at IS NOT NULL;
DROP INDEX postbox.outbox_published_at;  -- the outbox index on published_at: nothing to find

COMMENT ON COLUMN postbox.outbox.published_at IS
    'always NULL since schema version 4: published rows move to postbox.outbox_published';

-- Every event still kept, pending or published (dead letters live in postbox.dead_letters):
-- the view to ask "what was written?" without caring where the relay has got to.
CREATE VIEW postbox.outbox_all AS
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
           created_at, published_at, attempts, last_error
    FROM postbox.outbox
    UNION ALL
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
           created_at, published_at, attempts, last_error
    FROM postbox.outbox_published;
