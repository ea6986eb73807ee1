-- The claim writes the change log and the per-project totals itself, in
-- its own statement, instead of through the allocation insert trigger.
--
-- The trigger (20261201000001_one_allocation_trigger.sql) is a PL/pgSQL
-- call running one more statement over the transition table: a profile of
-- the claims bench put it at 13 % of PostgreSQL's CPU, a quarter of the
-- claim call's. The claim already has every value the trigger looks up
-- again (each consumer's project, each row's provider and class), so it
-- writes the same rows from its CTEs, and the trigger skips statements run
-- inside the function: `placement.claim_writes_log` is set on entry and
-- put back on return, so every other writer, including later statements
-- of the same transaction, still goes through the trigger. On an error the
-- transaction (or the caller's savepoint) rolls back, and that restores
-- the setting too. Nothing else sets it.
--
-- Not a `SET placement.claim_writes_log = 'on'` clause on the function,
-- which says the same more shortly: PostgreSQL lets only a superuser name
-- a custom parameter there, and the service runs as its database's owner.
-- Databases migrated with that first text keep it (db::migrations).

DROP TRIGGER allocations_changed_ins ON allocations;
CREATE TRIGGER allocations_changed_ins AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('placement.claim_writes_log', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION allocations_changed();

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
            SELECT r.consumer, r.used,
                   (SELECT id FROM resource_providers WHERE uuid = r.rp_uuid) AS rp,
                   (SELECT id FROM resource_classes WHERE name = r.class) AS class_id
              FROM UNNEST($5::uuid[], $6::uuid[], $7::text[], $8::int[]) AS r(consumer, rp_uuid, class, used)),
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
            SELECT r.rp, c.id, r.class_id, r.used FROM claimed r JOIN created c ON c.uuid = r.consumer),
          logged AS (
            INSERT INTO change_log (provider_id, structural)
            SELECT DISTINCT rp, false FROM claimed WHERE (SELECT ok FROM ok)),
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
