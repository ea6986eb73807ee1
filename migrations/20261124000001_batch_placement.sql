-- Batch placement (the LoadAware filter of §C.3) needs each provider's
-- latest measured usage: keep it beside the last report's time instead of
-- looking it up in usage_samples.
ALTER TABLE provider_colocation
    ADD COLUMN node_cpu_milli bigint NOT NULL DEFAULT 0,
    ADD COLUMN node_memory_mb bigint NOT NULL DEFAULT 0;

UPDATE provider_colocation pc SET node_cpu_milli = s.node_cpu_milli, node_memory_mb = s.node_memory_mb
  FROM (SELECT DISTINCT ON (resource_provider_id) resource_provider_id, node_cpu_milli, node_memory_mb
          FROM usage_samples ORDER BY resource_provider_id, sampled_at DESC) s
 WHERE s.resource_provider_id = pc.resource_provider_id;

-- The candidate engine keeps each provider's last report in its
-- snapshot, kept current through the change log like inventories.
CREATE TRIGGER provider_colocation_log_ins AFTER INSERT ON provider_colocation REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER provider_colocation_log_upd AFTER UPDATE ON provider_colocation REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
