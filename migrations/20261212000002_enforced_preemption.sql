-- Enforced preemption, opt in per victim project: a project whose
-- `preemption` is 'enforce' lets the service remove its consumers that
-- were admitted through the queue once they have been advised as victims
-- for `preemption_grace_seconds`; 'advise' (the default) leaves removing
-- to their owners, as before. Consumers that did not come through the
-- queue (a Nova server, say) are only ever advised.
ALTER TABLE project_fairness
    ADD COLUMN preemption text NOT NULL DEFAULT 'advise' CHECK (preemption IN ('advise', 'enforce')),
    ADD COLUMN preemption_grace_seconds integer NOT NULL DEFAULT 30
        CHECK (preemption_grace_seconds BETWEEN 0 AND 86400);

-- A queued request's consumer leaves the live states when the service
-- removes it ('preempted') or when its allocations are found gone as it
-- is queued again ('released'): either way it may be queued again at once.
ALTER TABLE queue_requests DROP CONSTRAINT queue_requests_state_check;
ALTER TABLE queue_requests ADD CONSTRAINT queue_requests_state_check
    CHECK (state IN ('pending', 'admitted', 'cancelled', 'expired', 'preempted', 'released'));

-- Each preemption the service carried out: what it removed, for which
-- waiting request, and when (kept as long as decided queued requests,
-- `--admission-round-retention`).
CREATE TABLE preemption_events (
    id bigserial PRIMARY KEY,
    consumer_uuid uuid NOT NULL,
    project_id text NOT NULL,
    resource_provider_uuid uuid NOT NULL,
    -- The waiting request it made room for; no reference: the event
    -- outlives the request.
    request_id uuid NOT NULL,
    request_project_id text NOT NULL,
    request jsonb NOT NULL,
    -- The allocations removed: provider uuid -> {"resources": {...}}.
    removed jsonb NOT NULL,
    round_id uuid NOT NULL,
    advised_at timestamptz NOT NULL,
    enforced_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX preemption_events_enforced_idx ON preemption_events (enforced_at);
CREATE INDEX preemption_events_project_idx ON preemption_events (project_id, id);
