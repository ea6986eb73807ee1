-- Preemption advice for the fair queue: the consumers a round advises
-- their owners to remove, each for a waiting request of a project below
-- its guarantee. Replaced by every round; the service removes nothing.
CREATE TABLE preemption_advice (
    request_id uuid NOT NULL REFERENCES queue_requests (id) ON DELETE CASCADE,
    consumer_uuid uuid NOT NULL,
    victim_project_id text NOT NULL,
    resource_provider_uuid uuid NOT NULL,
    round_id uuid NOT NULL,
    advised_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (request_id, consumer_uuid)
);
CREATE INDEX preemption_advice_victim_project_idx ON preemption_advice (victim_project_id);

-- Room held for a waiting request while the advised owners free it: the
-- amount is added to the waiting project's reservation on the provider
-- and taken off again when the request leaves pending or the hold lapses.
CREATE TABLE preemption_holds (
    request_id uuid NOT NULL REFERENCES queue_requests (id) ON DELETE CASCADE,
    resource_provider_id bigint NOT NULL,
    project_id integer NOT NULL REFERENCES projects (id),
    resource_class_id integer NOT NULL,
    amount integer NOT NULL CHECK (amount > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (request_id, resource_provider_id, resource_class_id)
);
