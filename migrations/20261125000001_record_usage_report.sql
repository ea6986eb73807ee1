-- One round trip per usage report: lock the provider, read what the
-- report is checked against, and store it (issue 12's ingestion rate).
-- The caller's transaction rolls the rows back when the checks that
-- follow refuse the report.
--
-- plan_cache_mode: the statements below are planned once per session.
-- Left to itself PostgreSQL re-planned the sample insert on every report
-- (its generic plan looked dearer than a custom one), and planning cost
-- as much as executing it.
CREATE FUNCTION record_usage_report(
    p_provider uuid, p_vcpu_class integer, p_memory_class integer,
    p_sampled_at timestamptz, p_window_seconds integer,
    p_node_cpu bigint, p_node_memory bigint, p_system_cpu bigint, p_system_memory bigint,
    p_be_used bigint, p_be_request bigint, p_be_real_limit bigint,
    p_consumers uuid[], p_consumer_cpu bigint[], p_consumer_memory bigint[],
    p_retention_seconds double precision)
RETURNS TABLE (rp bigint, cluster_policy jsonb, own_policy jsonb,
               vcpu_total bigint, vcpu_reserved bigint, memory_total bigint, memory_reserved bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    target record;
BEGIN
    SELECT r.id AS rp,
           (SELECT policy FROM colocation_policies WHERE resource_provider_id IS NULL) AS cluster_policy,
           (SELECT policy FROM colocation_policies WHERE resource_provider_id = r.id) AS own_policy,
           v.total::bigint AS vcpu_total, v.reserved::bigint AS vcpu_reserved,
           m.total::bigint AS memory_total, m.reserved::bigint AS memory_reserved
      INTO target
      FROM resource_providers r
      LEFT JOIN inventories v ON v.resource_provider_id = r.id AND v.resource_class_id = p_vcpu_class
      LEFT JOIN inventories m ON m.resource_provider_id = r.id AND m.resource_class_id = p_memory_class
     WHERE r.uuid = p_provider
       FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    INSERT INTO usage_samples (resource_provider_id, sampled_at, window_seconds, node_cpu_milli,
                               node_memory_mb, system_cpu_milli, system_memory_mb,
                               be_cpu_used, be_cpu_request, be_cpu_real_limit)
    VALUES (target.rp, p_sampled_at, p_window_seconds, p_node_cpu, p_node_memory,
            p_system_cpu, p_system_memory, p_be_used, p_be_request, p_be_real_limit);

    INSERT INTO consumer_usage (resource_provider_id, consumer_uuid, sampled_at, cpu_milli, memory_mb)
    SELECT target.rp, u, p_sampled_at, c, m
      FROM UNNEST(p_consumers, p_consumer_cpu, p_consumer_memory) AS t(u, c, m)
        ON CONFLICT (resource_provider_id, consumer_uuid) DO UPDATE SET
           sampled_at = EXCLUDED.sampled_at, cpu_milli = EXCLUDED.cpu_milli, memory_mb = EXCLUDED.memory_mb
     WHERE consumer_usage.sampled_at <= EXCLUDED.sampled_at;

    INSERT INTO provider_colocation (resource_provider_id, last_sampled_at, node_cpu_milli, node_memory_mb)
    VALUES (target.rp, p_sampled_at, p_node_cpu, p_node_memory)
        ON CONFLICT (resource_provider_id) DO UPDATE SET
           last_sampled_at = EXCLUDED.last_sampled_at, node_cpu_milli = EXCLUDED.node_cpu_milli,
           node_memory_mb = EXCLUDED.node_memory_mb
     WHERE provider_colocation.last_sampled_at <= EXCLUDED.last_sampled_at;

    -- Bounded storage: each report prunes its provider's old samples, but
    -- never the one it brings (a late report is still the newest).
    DELETE FROM usage_samples
     WHERE resource_provider_id = target.rp
       AND sampled_at < LEAST(now() - make_interval(secs => p_retention_seconds), p_sampled_at);

    RETURN QUERY SELECT target.rp, target.cluster_policy, target.own_policy, target.vcpu_total,
                        target.vcpu_reserved, target.memory_total, target.memory_reserved;
END
$$;
