-- A queue round's most common reason, recorded once instead of once per
-- request.
--
-- A deep queue's round defers most of its requests for one reason
-- (no_capacity, or not_reached when its step budget runs out): a round
-- over 80,000 new pending requests spent 0.4 s inserting 80,000 rows of
-- queue_reasons that all said the same. Now the round records that reason
-- here, with the PostgreSQL snapshot its read of the pending requests
-- used, and queue_reasons keeps only the requests whose reason differs.
--
-- A pending request's reason is then its own row's, or else this one when
-- the round saw the request: its submitting transaction (`xact`) is
-- visible in the round's snapshot. A request queued after that read has no
-- reason yet, as before.

-- Rows queued before this migration have none, and count as seen by any
-- round recorded after it (they were committed before it ran). Added
-- without a default first, so the table is not rewritten.
ALTER TABLE queue_requests ADD COLUMN xact xid8;
ALTER TABLE queue_requests ALTER COLUMN xact SET DEFAULT pg_current_xact_id();

-- At most one row: the last queue round that read pending requests.
CREATE TABLE queue_last_round (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    -- The snapshot of that round's read of the pending requests.
    snapshot pg_snapshot NOT NULL,
    -- The reason it gave most deferred requests (none deferred: NULL).
    reason text
);
