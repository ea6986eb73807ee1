-- The allocation write's last statement when a writer's project has a
-- limit and no project has a parent: bump the written providers'
-- generations, lock the writers' limited projects (project order, the
-- order of every writer), then read their consumption, in one round trip.
-- A limited write thus costs no more round trips than an unlimited one
-- (they hold hot providers' row locks, so each round trip costs every
-- writer queued behind them), and writers of one limited project wait on
-- each other only from here to the commit.
-- The last query sees every write committed before the lock was granted:
-- a VOLATILE function takes a fresh snapshot per query under READ
-- COMMITTED (a single SQL statement could not: its snapshot predates the
-- lock). Consumption per provider is the larger of the project's
-- allocations and its reservation there, as in db::fairness::consumption.
CREATE FUNCTION bump_then_flat_limits_used(bump bigint[], writers text[], classes integer[],
                                           lock_space integer)
RETURNS TABLE (project integer, project_id text, class integer, resource_class text,
               "limit" bigint, has_children boolean, consumed bigint)
-- Planned once per connection: planning these statements costs more than
-- running them, and their plans do not depend on the arguments.
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    UPDATE resource_providers SET generation = generation + 1, updated_at = now()
     WHERE id = ANY(bump);
    PERFORM pg_advisory_xact_lock(lock_space, l.id) FROM (
        SELECT DISTINCT q.project_id AS id
          FROM projects p JOIN project_quotas q ON q.project_id = p.id
         WHERE p.external_id = ANY(writers) AND q."limit" IS NOT NULL
           AND q.resource_class_id = ANY(classes)
         ORDER BY 1 OFFSET 0) l;
    -- Allocations, plus whatever part of a reservation they leave unused.
    RETURN QUERY
    SELECT q.project_id, p.external_id, q.resource_class_id, rc.name, q."limit", false,
           (COALESCE((SELECT SUM(pa.used) FROM project_allocations pa
                       WHERE pa.project_id = q.project_id AND pa.resource_class_id = q.resource_class_id), 0)
          + COALESCE((SELECT SUM(GREATEST(pr.amount - COALESCE((
                           SELECT SUM(pa.used) FROM project_allocations pa
                            WHERE pa.project_id = pr.project_id AND pa.resource_provider_id = pr.resource_provider_id
                              AND pa.resource_class_id = pr.resource_class_id), 0), 0))
                        FROM project_reservations pr
                       WHERE pr.project_id = q.project_id AND pr.resource_class_id = q.resource_class_id), 0))::bigint
      FROM projects p JOIN project_quotas q ON q.project_id = p.id
      JOIN resource_classes rc ON rc.id = q.resource_class_id
     WHERE p.external_id = ANY(writers) AND q."limit" IS NOT NULL
       AND q.resource_class_id = ANY(classes);
END $$;
