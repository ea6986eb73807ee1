-- A request's position is the count of its project's live pending
-- requests (not past their time) up to it. With the expiry in the index,
-- that count is an index-only scan: a page counts once per project, and
-- the count reads no table rows however deep the queue (issue 64).
DROP INDEX queue_requests_pending_project_idx;
CREATE INDEX queue_requests_pending_project_idx ON queue_requests (project_id, seq)
    INCLUDE (expires_at) WHERE state = 'pending';
