-- A request's position is the count of its project's pending requests up
-- to it. The (project_id, seq) index holds every request the retention
-- window keeps, so that count visited a project's whole history; this one
-- holds only the pending ones.
CREATE INDEX queue_requests_pending_project_idx ON queue_requests (project_id, seq)
    WHERE state = 'pending';
