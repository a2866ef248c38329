-- postbox schema, version 5: events waiting for a retry are set aside, so the relay's claim does
-- a bounded amount of work however many of them there are.
--
-- Before, the claim walked the pending rows in id order and, per row, asked the outbox_retrying
-- index "is an earlier event of this aggregate waiting for a retry?". While a broker hiccup had
-- thousands of rows waiting (attempts > 0, next_attempt_at in the future), every claim walked
-- over all of them and over every later event of their aggregates, with a probe per row: work
-- proportional to the backlog, with a nested-loop anti join proportional to backlog x retrying
-- rows, repeated by every claim until the retries came due.
--
-- Now a row is `waiting` when it failed and waits for its next_attempt_at, or when it was found
-- behind such a row of its aggregate (parked by the claim, with the same next_attempt_at). The
-- claim walks only rows that are not waiting (outbox_ready), and wakes a bounded number of due
-- waiting rows first (outbox_waiting_due). The per-aggregate question is asked of the waiting
-- rows only (outbox_waiting).

ALTER TABLE postbox.outbox ADD COLUMN waiting boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN postbox.outbox.waiting IS
    'set aside until next_attempt_at: the event, or an earlier event of its aggregate, failed';

-- Rows the claim may take, in publish order.
CREATE INDEX outbox_ready ON postbox.outbox (id) WHERE published_at IS NULL AND NOT waiting;
-- Waiting rows by due time: the claim wakes those whose time has come.
CREATE INDEX outbox_waiting_due ON postbox.outbox (next_attempt_at, id) WHERE waiting;
-- Waiting rows by aggregate: "does an earlier event of this aggregate wait?" (empty while
-- nothing fails, so the question costs almost nothing). outbox_retrying stays for the metrics'
-- count of retried rows.
CREATE INDEX outbox_waiting ON postbox.outbox (aggregate_type, aggregate_id, id) WHERE waiting;

-- Rows that failed before this version and are not due yet wait like those failing from now on.
UPDATE postbox.outbox SET waiting = true
WHERE published_at IS NULL AND attempts > 0 AND next_attempt_at > now();

-- Replaced by outbox_ready for the claim; the metrics' oldest/newest pending row and bounded
-- backlog count walk the primary key (since version 4 every outbox row is pending), so inserts
-- still maintain as many indexes as before.
DROP INDEX postbox.outbox_pending;
