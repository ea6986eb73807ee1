-- A claim of new consumers in one call (see src/db/allocations/claim.rs):
-- the providers locked in id order, then the checks and the writes in a
-- statement of their own. In a function each statement takes its own
-- snapshot, so the second reads usage only once the locks are held, as
-- the allocation write's separate statements do; and a call outside a
-- transaction is one round trip where begin, lock, claim and commit were
-- four.
--
-- Arguments: the consumers ($1 uuids, $2 projects, $3 users, $4 consumer
-- types) and the allocation rows ($5 consumer, $6 provider uuid, $7 class
-- name, $8 units). Answers the consumers created, or nothing when any
-- check failed (then nothing was written: every write is gated on them).
-- The plans are generic: each lookup is on one key (see the file above).
CREATE FUNCTION placement_claim(uuid[], text[], text[], text[], uuid[], uuid[], text[], int[])
RETURNS TABLE (claimed_uuid uuid, claimed_id bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
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
            SELECT r.consumer, r.used,
                   (SELECT id FROM resource_providers WHERE uuid = r.rp_uuid) AS rp,
                   (SELECT id FROM resource_classes WHERE name = r.class) AS class_id
              FROM UNNEST($5::uuid[], $6::uuid[], $7::text[], $8::int[]) AS r(consumer, rp_uuid, class, used)),
          up(id, depth) AS (
            SELECT DISTINCT project_id, 0 FROM owners WHERE project_id IS NOT NULL
            UNION SELECT f.parent_project_id, up.depth + 1
              FROM up CROSS JOIN LATERAL (SELECT parent_project_id FROM project_fairness
                                           WHERE project_id = up.id AND parent_project_id IS NOT NULL LIMIT 1) f
             WHERE up.depth < 1000),
          stock AS (
            SELECT w.rp, w.class_id, w.n, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio,
                   (SELECT COALESCE(SUM(a.used), 0) FROM allocations a
                     WHERE a.resource_provider_id = w.rp AND a.resource_class_id = w.class_id) AS used,
                   (SELECT true FROM project_reservations r
                     WHERE r.resource_provider_id = w.rp LIMIT 1) AS reserved_for
              FROM (SELECT rp, class_id, SUM(used) AS n FROM claimed GROUP BY 1, 2) w
              LEFT JOIN LATERAL (SELECT * FROM inventories
                                  WHERE resource_provider_id = w.rp AND resource_class_id = w.class_id LIMIT 1) i ON true),
          ok AS (
            SELECT NOT EXISTS (SELECT 1 FROM owners
                                WHERE project_id IS NULL OR user_id IS NULL OR (type_name IS NOT NULL AND type_id IS NULL)
                                   OR existing OR low)
               AND NOT EXISTS (SELECT 1 FROM claimed WHERE rp IS NULL OR class_id IS NULL)
               AND NOT EXISTS (SELECT 1 FROM up
                                WHERE (SELECT true FROM project_quotas q
                                        WHERE q.project_id = up.id AND q."limit" IS NOT NULL
                                          AND q.resource_class_id IN (SELECT class_id FROM claimed) LIMIT 1))
               AND NOT EXISTS (SELECT 1 FROM claimed r JOIN stock s ON s.rp = r.rp AND s.class_id = r.class_id
                                WHERE r.used < s.min_unit OR r.used > s.max_unit
                                   OR s.step_size <= 0 OR r.used % s.step_size <> 0)
               AND NOT EXISTS (SELECT 1 FROM stock
                                WHERE total IS NULL OR reserved_for
                                   OR (used + n)::float8 > (total - reserved)::float8 * allocation_ratio) AS ok),
          created AS (
            INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation)
            SELECT uuid, project_id, user_id, type_id, 1 FROM owners WHERE (SELECT ok FROM ok)
            RETURNING uuid, id),
          written AS (
            INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT r.rp, c.id, r.class_id, r.used FROM claimed r JOIN created c ON c.uuid = r.consumer),
          bumped AS (
            UPDATE resource_providers SET generation = generation + 1, updated_at = now()
             WHERE uuid = ANY($6) AND (SELECT ok FROM ok))
        SELECT uuid, id FROM created;
END $$;
