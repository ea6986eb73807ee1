-- The fair queue (POST /queue): requests wait here until a round admits
-- them. `seq` is the submission order (FIFO per project); a consumer is in
-- the queue at most once while pending or admitted.
CREATE TABLE queue_requests (
    id uuid PRIMARY KEY,
    seq bigserial NOT NULL UNIQUE,
    consumer_uuid uuid NOT NULL,
    project_id text NOT NULL,
    user_id text NOT NULL,
    -- The request as submitted (resources, required, member_of, priority).
    request jsonb NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'admitted', 'cancelled', 'expired')),
    -- The last round's reason while pending.
    reason text,
    round_id uuid,
    -- Provider uuid -> {"resources": {...}} once admitted.
    allocations jsonb,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    decided_at timestamptz
);

CREATE UNIQUE INDEX queue_requests_live_consumer_idx
    ON queue_requests (consumer_uuid) WHERE state IN ('pending', 'admitted');
CREATE INDEX queue_requests_pending_idx ON queue_requests (seq) WHERE state = 'pending';
CREATE INDEX queue_requests_project_idx ON queue_requests (project_id, seq);
CREATE INDEX queue_requests_decided_idx ON queue_requests (decided_at) WHERE decided_at IS NOT NULL;

-- Wake the round leader when requests arrive in an empty queue: a round
-- then runs at once instead of at the next tick.
CREATE FUNCTION queue_requests_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM queue_requests q
        WHERE q.state = 'pending' AND q.seq < (SELECT min(n.seq) FROM queued n)
    ) THEN
        PERFORM pg_notify('placement_queue', 'queued');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER queue_requests_wake AFTER INSERT ON queue_requests
    REFERENCING NEW TABLE AS queued FOR EACH STATEMENT EXECUTE FUNCTION queue_requests_wake();

-- Capacity freed while requests wait: a round runs at once.
CREATE FUNCTION queue_capacity_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone)
       AND EXISTS (SELECT 1 FROM queue_requests WHERE state = 'pending') THEN
        PERFORM pg_notify('placement_queue', 'freed');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_free_queue AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queue_capacity_freed();
