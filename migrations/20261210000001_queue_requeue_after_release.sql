-- A consumer admitted through the queue may be queued again once its
-- allocations are gone (preempted, or its work ended): only a pending
-- request keeps its consumer from being queued again (one that still
-- holds allocations is refused as an existing consumer). The admitted
-- requests of a consumer are found by the index below, newest first.
DROP INDEX IF EXISTS queue_requests_live_consumer_idx;
CREATE UNIQUE INDEX queue_requests_pending_consumer_idx
    ON queue_requests (consumer_uuid) WHERE state = 'pending';
CREATE INDEX queue_requests_admitted_consumer_idx
    ON queue_requests (consumer_uuid, seq DESC) WHERE state = 'admitted';
