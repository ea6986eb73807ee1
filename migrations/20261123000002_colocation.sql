-- Colocation of batch work with production (Koordinator's rules). Nothing
-- here changes what a Placement client sees while these tables are empty:
-- the BATCH_* classes appear only once a provider reports usage.

-- A consumer's priority, keyed by uuid so that it can be set before the
-- consumer's first allocation. class: 0 prod (the default for every
-- consumer without a row), 1 mid, 2 batch, 3 free.
CREATE TABLE consumer_priorities (
    consumer_uuid     uuid PRIMARY KEY,
    priority_class    smallint NOT NULL CHECK (priority_class BETWEEN 0 AND 3),
    priority          integer,
    eviction_enabled  boolean NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX consumer_priorities_low_idx ON consumer_priorities (consumer_uuid) WHERE priority_class >= 2;

-- The cluster policy (resource_provider_id NULL) and per-provider
-- overrides: only the fields set, merged over Koordinator's defaults.
CREATE TABLE colocation_policies (
    resource_provider_id  bigint REFERENCES resource_providers (id) ON DELETE CASCADE,
    policy                jsonb NOT NULL,
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX colocation_policies_scope_idx ON colocation_policies (COALESCE(resource_provider_id, 0));

-- Node usage samples, append-only and kept about an hour (each report
-- prunes its provider's older rows), so the table stays flat.
CREATE TABLE usage_samples (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    sampled_at            timestamptz NOT NULL,
    received_at           timestamptz NOT NULL DEFAULT now(),
    window_seconds        integer NOT NULL,
    node_cpu_milli        bigint NOT NULL,
    node_memory_mb        bigint NOT NULL,
    system_cpu_milli      bigint NOT NULL,
    system_memory_mb      bigint NOT NULL,
    be_cpu_used           bigint,
    be_cpu_request        bigint,
    be_cpu_real_limit     bigint
);
CREATE INDEX usage_samples_provider_idx ON usage_samples (resource_provider_id, sampled_at);

-- The latest measurement of each consumer on a provider (one row each).
CREATE TABLE consumer_usage (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    consumer_uuid         uuid NOT NULL,
    sampled_at            timestamptz NOT NULL,
    cpu_milli             bigint NOT NULL,
    memory_mb             bigint NOT NULL,
    PRIMARY KEY (resource_provider_id, consumer_uuid)
);

-- Per provider: the last report, the batch inventory's bookkeeping and
-- the evictors' cooldowns.
CREATE TABLE provider_colocation (
    resource_provider_id   bigint PRIMARY KEY REFERENCES resource_providers (id) ON DELETE CASCADE,
    last_sampled_at        timestamptz NOT NULL,
    batch_computed_at      timestamptz,
    batch_overcommitted    boolean NOT NULL DEFAULT false,
    cpu_cooldown_until     timestamptz,
    memory_cooldown_until  timestamptz
);

-- What node agents reported evicting. A consumer here that still holds
-- allocations is pending release.
CREATE TABLE evictions (
    id                    bigserial PRIMARY KEY,
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    consumer_uuid         uuid NOT NULL,
    trigger               text NOT NULL,
    recorded_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX evictions_provider_idx ON evictions (resource_provider_id, consumer_uuid);
