-- One trigger per allocation statement instead of three, and the
-- per-project totals without foreign keys.
--
-- An allocation insert ran two statement triggers (the change log, the
-- per-project totals) and a delete three (the same and the queue's wake),
-- each its own function call over the transition table. And every new
-- `project_allocations` row paid two foreign-key checks, each a
-- `SELECT ... FOR KEY SHARE` that locks the project's row and the
-- provider's: a fair-queue round admitting 900 requests spent 55 of its
-- 70 ms of allocation insert there, and concurrent claims of one project
-- queued on its project row's lock.
--
-- Integrity of the totals now comes from the same places as the
-- allocations' own (see 20261127000001_lean_writes.sql):
--   * projects are never deleted;
--   * a provider with allocations cannot be deleted, and deleting one drops
--     its (zero) totals in the statement trigger below, as ON DELETE
--     CASCADE did;
--   * `placement audit` reports totals whose provider or project is gone
--     (check `dangling_reference`) and totals that disagree with the rows
--     (check `project_totals`).

DROP TRIGGER allocations_log_ins ON allocations;
DROP TRIGGER allocations_log_upd ON allocations;
DROP TRIGGER allocations_log_del ON allocations;
DROP TRIGGER allocations_project_insert ON allocations;
DROP TRIGGER allocations_project_delete ON allocations;
DROP TRIGGER allocations_free_queue ON allocations;
DROP FUNCTION track_project_allocations();
DROP FUNCTION queue_capacity_freed();

ALTER TABLE project_allocations
    DROP CONSTRAINT project_allocations_project_id_fkey,
    DROP CONSTRAINT project_allocations_resource_provider_id_fkey;

-- The change log and the per-project totals in one statement per change
-- (a data-modifying CTE runs whether or not it is read). Totals are
-- written in key order so concurrent writers never deadlock on them.
-- Allocations are always removed before their consumer, so the consumer's
-- project is still there. Capacity freed while requests wait wakes the
-- queue's leader at commit.
CREATE FUNCTION allocations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        WITH logged AS (
            INSERT INTO change_log (provider_id, structural)
            SELECT DISTINCT resource_provider_id, false FROM new_rows)
        INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
        SELECT c.project_id, n.resource_provider_id, n.resource_class_id, SUM(n.used)
          FROM new_rows n JOIN consumers c ON c.id = n.consumer_id
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (project_id, resource_provider_id, resource_class_id)
        DO UPDATE SET used = pa.used + EXCLUDED.used;
    ELSIF TG_OP = 'DELETE' THEN
        WITH logged AS (
            INSERT INTO change_log (provider_id, structural)
            SELECT DISTINCT resource_provider_id, false FROM old_rows)
        INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
        SELECT c.project_id, o.resource_provider_id, o.resource_class_id, -SUM(o.used)
          FROM old_rows o JOIN consumers c ON c.id = o.consumer_id
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (project_id, resource_provider_id, resource_class_id)
        DO UPDATE SET used = pa.used + EXCLUDED.used;
        IF EXISTS (SELECT 1 FROM old_rows)
           AND EXISTS (SELECT 1 FROM queue_requests WHERE state = 'pending') THEN
            PERFORM pg_notify('placement_queue', 'freed');
        END IF;
    ELSE
        -- No path updates allocations in place; should one, its totals
        -- move with it.
        WITH logged AS (
            INSERT INTO change_log (provider_id, structural)
            SELECT resource_provider_id, false FROM new_rows
             UNION SELECT resource_provider_id, false FROM old_rows),
        moved AS (
            SELECT consumer_id, resource_provider_id, resource_class_id, used FROM new_rows
             UNION ALL
            SELECT consumer_id, resource_provider_id, resource_class_id, -used FROM old_rows)
        INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
        SELECT c.project_id, m.resource_provider_id, m.resource_class_id, SUM(m.used)
          FROM moved m JOIN consumers c ON c.id = m.consumer_id
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (project_id, resource_provider_id, resource_class_id)
        DO UPDATE SET used = pa.used + EXCLUDED.used;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_changed_ins AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION allocations_changed();
CREATE TRIGGER allocations_changed_upd AFTER UPDATE ON allocations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION allocations_changed();
CREATE TRIGGER allocations_changed_del AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION allocations_changed();

-- What ON DELETE CASCADE did, once per statement instead of once per row.
CREATE FUNCTION drop_deleted_provider_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM project_allocations WHERE resource_provider_id IN (SELECT id FROM gone);
    RETURN NULL;
END $$;

CREATE TRIGGER resource_providers_drop_totals AFTER DELETE ON resource_providers
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_provider_totals();
