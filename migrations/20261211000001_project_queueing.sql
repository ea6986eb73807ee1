-- How a project's queued requests wait: 'strict' (its head holds up the
-- requests behind it, as Kueue's StrictFIFO) or 'best_effort' (a head
-- that does not fit waits, and the requests behind it are tried, as
-- Kueue's BestEffortFIFO).

ALTER TABLE project_fairness
    ADD COLUMN queueing text NOT NULL DEFAULT 'strict' CHECK (queueing IN ('strict', 'best_effort'));
