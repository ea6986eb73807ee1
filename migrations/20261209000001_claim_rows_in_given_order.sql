-- A claim's allocation rows are inserted in the order given: a consumer's
-- allocations are answered in the order they were written (providers and
-- classes as the request listed them), as Placement answers them, and the
-- claim's insert joined its rows to the consumers it created in whatever
-- order the plan gave. The function is otherwise 20261207000001's.

CREATE OR REPLACE FUNCTION placement_claim(uuid[], text[], text[], text[], uuid[], uuid[], text[], int[])
RETURNS TABLE (claimed_uuid uuid, claimed_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    outer_setting text := current_setting('placement.claim_writes_log', true);
BEGIN
    PERFORM set_config('placement.claim_writes_log', 'on', true);
    PERFORM 1 FROM resource_providers WHERE uuid = ANY($6) ORDER BY id FOR UPDATE;
    RETURN QUERY
        WITH RECURSIVE
          owners AS (
            SELECT c.uuid, c.type_name,
                   (SELECT id FROM projects WHERE external_id = c.project) AS project_id,
                   (SELECT id FROM users WHERE external_id = c.usr) AS user_id,
                   (SELECT id FROM consumer_types WHERE name = c.type_name) AS type_id,
                   (SELECT true FROM consumers WHERE uuid = c.uuid) AS existing,
                   (SELECT true FROM consumer_priorities
                     WHERE consumer_uuid = c.uuid AND priority_class >= 2) AS low
              FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[]) AS c(uuid, project, usr, type_name)),
          claimed AS (
            SELECT r.consumer, r.used, r.given,
                   (SELECT id FROM resource_providers WHERE uuid = r.rp_uuid) AS rp,
                   (SELECT id FROM resource_classes WHERE name = r.class) AS class_id
              FROM UNNEST($5::uuid[], $6::uuid[], $7::text[], $8::int[])
                   WITH ORDINALITY AS r(consumer, rp_uuid, class, used, given)),
          up(id, depth) AS (
            SELECT DISTINCT project_id, 0 FROM owners WHERE project_id IS NOT NULL
            UNION SELECT f.parent_project_id, up.depth + 1
              FROM up JOIN project_fairness f ON f.project_id = up.id
             WHERE f.parent_project_id IS NOT NULL AND up.depth < 1000),
          stock AS (
            SELECT r.rp, r.class_id, SUM(r.used) AS n, i.total, i.reserved, i.allocation_ratio,
                   bool_or(r.used < i.min_unit OR r.used > i.max_unit
                           OR i.step_size <= 0 OR r.used % i.step_size <> 0) AS off_units,
                   (SELECT COALESCE(SUM(a.used), 0) FROM allocations a
                     WHERE a.resource_provider_id = r.rp AND a.resource_class_id = r.class_id) AS used,
                   EXISTS (SELECT 1 FROM project_reservations v WHERE v.resource_provider_id = r.rp) AS reserved_for
              FROM claimed r
              LEFT JOIN inventories i ON i.resource_provider_id = r.rp AND i.resource_class_id = r.class_id
             GROUP BY r.rp, r.class_id, i.total, i.reserved, i.allocation_ratio),
          ok AS (
            SELECT NOT EXISTS (SELECT 1 FROM owners
                                WHERE project_id IS NULL OR user_id IS NULL OR (type_name IS NOT NULL AND type_id IS NULL)
                                   OR existing OR low)
               AND NOT EXISTS (SELECT 1 FROM claimed WHERE rp IS NULL OR class_id IS NULL)
               AND NOT EXISTS (SELECT 1 FROM up
                                WHERE (SELECT true FROM project_quotas q
                                        WHERE q.project_id = up.id AND q."limit" IS NOT NULL
                                          AND q.resource_class_id IN (SELECT class_id FROM claimed) LIMIT 1))
               AND NOT EXISTS (SELECT 1 FROM stock
                                WHERE total IS NULL OR reserved_for OR off_units
                                   OR (used + n)::float8 > (total - reserved)::float8 * allocation_ratio) AS ok),
          created AS (
            INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation)
            SELECT uuid, project_id, user_id, type_id, 1 FROM owners WHERE (SELECT ok FROM ok)
            RETURNING uuid, id),
          written AS (
            INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT r.rp, c.id, r.class_id, r.used FROM claimed r JOIN created c ON c.uuid = r.consumer
             ORDER BY r.given),
          logged AS (
            INSERT INTO change_log (provider_id, structural, class_id, used_delta)
            SELECT rp, false, class_id, SUM(used) FROM claimed WHERE (SELECT ok FROM ok) GROUP BY 1, 3),
          -- What the trigger adds for an insert, in the same key order.
          totals AS (
            INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
            SELECT o.project_id, r.rp, r.class_id, SUM(r.used)
              FROM claimed r JOIN owners o ON o.uuid = r.consumer
             WHERE (SELECT ok FROM ok)
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (project_id, resource_provider_id, resource_class_id)
            DO UPDATE SET used = pa.used + EXCLUDED.used),
          bumped AS (
            UPDATE resource_providers SET generation = generation + 1, updated_at = now()
             WHERE uuid = ANY($6) AND (SELECT ok FROM ok))
        SELECT uuid, id FROM created;
    PERFORM set_config('placement.claim_writes_log', COALESCE(outer_setting, ''), true);
END $$;
