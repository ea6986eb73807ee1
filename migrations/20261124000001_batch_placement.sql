-- Batch placement (the LoadAware filter of §C.3) reads each provider's
-- latest measured usage on every batch candidates query: keep it beside
-- the last report's time instead of looking it up in usage_samples.
ALTER TABLE provider_colocation
    ADD COLUMN node_cpu_milli bigint NOT NULL DEFAULT 0,
    ADD COLUMN node_memory_mb bigint NOT NULL DEFAULT 0;

UPDATE provider_colocation pc SET node_cpu_milli = s.node_cpu_milli, node_memory_mb = s.node_memory_mb
  FROM (SELECT DISTINCT ON (resource_provider_id) resource_provider_id, node_cpu_milli, node_memory_mb
          FROM usage_samples ORDER BY resource_provider_id, sampled_at DESC) s
 WHERE s.resource_provider_id = pc.resource_provider_id;

-- Allocations made since a provider's last report are estimated, not
-- measured; only the last few minutes are ever read.
CREATE INDEX allocations_created_idx ON allocations (created_at);
