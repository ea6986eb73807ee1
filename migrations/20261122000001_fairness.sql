-- Fair sharing between projects (the Mesos allocator's rules): weights and
-- the project tree for DRF, quotas (guarantees and limits), per-project
-- reservations on providers, decline filters and an audit row per
-- admission round. Nothing here changes what a Placement client sees
-- while these tables are empty.

-- A project's place in the DRF tree. allocation_count is the sorter's
-- tie-break; it only grows and is persisted so rounds are replayable.
CREATE TABLE project_fairness (
    project_id         integer PRIMARY KEY REFERENCES projects (id),
    parent_project_id  integer REFERENCES projects (id),
    weight             double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
    allocation_count   bigint NOT NULL DEFAULT 0 CHECK (allocation_count >= 0),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz,
    CHECK (parent_project_id IS DISTINCT FROM project_id)
);
CREATE INDEX project_fairness_parent_idx ON project_fairness (parent_project_id);

-- A quota per project and class: a guarantee (held back as headroom) and a
-- limit (a hard cap on consumption, enforced on every write path).
CREATE TABLE project_quotas (
    project_id         integer NOT NULL REFERENCES projects (id),
    resource_class_id  integer NOT NULL REFERENCES resource_classes (id) ON DELETE CASCADE,
    guarantee          bigint CHECK (guarantee >= 0),
    "limit"            bigint CHECK ("limit" >= 0),
    PRIMARY KEY (project_id, resource_class_id),
    CHECK (guarantee IS NULL OR "limit" IS NULL OR guarantee <= "limit")
);

-- Capacity on one inventory that only a project (and its sub-projects) may
-- allocate. It lives on the inventory: removing the inventory removes it.
CREATE TABLE project_reservations (
    resource_provider_id  bigint NOT NULL,
    resource_class_id     integer NOT NULL,
    project_id            integer NOT NULL REFERENCES projects (id),
    amount                integer NOT NULL CHECK (amount > 0),
    created_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_provider_id, project_id, resource_class_id),
    FOREIGN KEY (resource_provider_id, resource_class_id)
        REFERENCES inventories (resource_provider_id, resource_class_id) ON DELETE CASCADE
);
CREATE INDEX project_reservations_project_idx ON project_reservations (project_id);

-- A decline ("refuse") filter: hides a provider from a project's
-- admissions for requests no larger than `resources`, until expires_at.
CREATE TABLE decline_filters (
    id                    bigserial PRIMARY KEY,
    project_id            integer NOT NULL REFERENCES projects (id),
    user_id               text,
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    resources             jsonb NOT NULL,
    expires_at            timestamptz NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decline_filters_lookup_idx ON decline_filters (project_id, resource_provider_id, expires_at);

-- One row per committed admission round, for audit and replay. Plain
-- json: stored as sent (a 10,000-request round is megabytes, and nothing
-- queries inside it), without jsonb's conversion cost on the commit path.
CREATE TABLE admission_rounds (
    id          uuid PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seed        bigint NOT NULL,
    request     json NOT NULL,
    result      json NOT NULL
);
