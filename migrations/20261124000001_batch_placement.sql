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
-- snapshot, kept current through the change log like inventories. Row
-- triggers (one row per report), and only for what the snapshot holds:
-- the batch bookkeeping and cooldowns change nothing it reads.
CREATE FUNCTION log_provider_report() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (NEW.resource_provider_id, false);
    RETURN NULL;
END $$;

CREATE TRIGGER provider_colocation_log_ins AFTER INSERT ON provider_colocation
    FOR EACH ROW EXECUTE FUNCTION log_provider_report();
CREATE TRIGGER provider_colocation_log_upd AFTER UPDATE OF last_sampled_at, node_cpu_milli, node_memory_mb
    ON provider_colocation FOR EACH ROW
    WHEN (OLD.last_sampled_at IS DISTINCT FROM NEW.last_sampled_at
          OR OLD.node_cpu_milli IS DISTINCT FROM NEW.node_cpu_milli
          OR OLD.node_memory_mb IS DISTINCT FROM NEW.node_memory_mb)
    EXECUTE FUNCTION log_provider_report();
