-- The current text of the functions the write path calls, and of every
-- writer of the change log with its triggers. The
-- migrations keep their history; this file is what runs now. It is
-- applied after the migrations, on every `placement db sync` (and on
-- `serve --migrate`) whose recorded checksum differs from this text's
-- (`db::definitions`), by the role that owns the schema. A change to a
-- rule here is a change to this file only; `tests/claim_agrees.rs`
-- drives random writes through the claim and the detailed path and
-- requires the same verdict and the same stored rows.
--
-- Every statement here is CREATE OR REPLACE, so the file runs again on
-- a database it already defined. PostgreSQL replaces a function only
-- with the same argument types, names and result: a change of those is
-- a migration (DROP FUNCTION) followed by the new text here.

-- A provider's capacity for a class: (total - reserved) x allocation
-- ratio, Placement's formula. Every SQL text that compares usage with
-- capacity calls this; `types::capacity` is its Rust twin (the pure
-- rounds and the candidate engine), and `tests/claim_agrees.rs` checks
-- they agree. IMMUTABLE and SQL: the planner inlines it.
CREATE OR REPLACE FUNCTION placement_capacity(total bigint, reserved bigint, allocation_ratio float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (total - reserved)::float8 * allocation_ratio $$;

-- Whether an amount respects a class's inventory units: within min_unit
-- and max_unit and a multiple of a positive step_size. Every SQL text that
-- judges units calls this; `types::units_ok` is its Rust twin, and
-- `tests/claim_agrees.rs` checks they agree. IMMUTABLE and SQL: the
-- planner inlines it.
CREATE OR REPLACE FUNCTION placement_units_ok(amount bigint, min_unit bigint, max_unit bigint, step_size bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT amount >= min_unit AND amount <= max_unit AND step_size > 0 AND amount % step_size = 0 $$;

-- The one writer of what an allocation change records: a change-log row
-- per provider and class with the units added (negative when removed),
-- and the per-project totals (`project_allocations`), in key order as
-- every writer takes their row locks. Rows of a consumer already gone
-- (no project) are logged but not totalled. Called by the allocation
-- triggers (below) and by the claim, which writes its rows with the
-- triggers off.
CREATE OR REPLACE FUNCTION placement_usage_changed(rp_ids bigint[], class_ids int[], project_ids int[], deltas int[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    WITH changed AS (
        SELECT * FROM UNNEST(rp_ids, class_ids, project_ids, deltas) AS t(rp, class_id, project_id, n)),
    logged AS (
        INSERT INTO change_log (provider_id, structural, class_id, used_delta)
        SELECT rp, false, class_id, SUM(n) FROM changed GROUP BY 1, 3)
    INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
    SELECT project_id, rp, class_id, SUM(n) FROM changed WHERE project_id IS NOT NULL
     GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (project_id, resource_provider_id, resource_class_id)
    DO UPDATE SET used = pa.used + EXCLUDED.used;
END $$;

-- The statement trigger of every insert, update and delete of
-- allocations (but the claim's inserts: see the triggers below): records the
-- change, and wakes the fair queue when allocations were freed.
CREATE OR REPLACE FUNCTION allocations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM placement_usage_changed(array_agg(n.resource_provider_id), array_agg(n.resource_class_id),
                                        array_agg(c.project_id), array_agg(n.used))
           FROM new_rows n LEFT JOIN consumers c ON c.id = n.consumer_id;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM placement_usage_changed(array_agg(o.resource_provider_id), array_agg(o.resource_class_id),
                                        array_agg(c.project_id), array_agg(-o.used))
           FROM old_rows o LEFT JOIN consumers c ON c.id = o.consumer_id;
        IF EXISTS (SELECT 1 FROM old_rows)
           AND EXISTS (SELECT 1 FROM queue_requests WHERE state = 'pending') THEN
            PERFORM pg_notify('placement_queue', 'freed');
        END IF;
    ELSE
        -- No path updates allocations in place; should one, its totals
        -- move with it.
        PERFORM placement_usage_changed(array_agg(m.resource_provider_id), array_agg(m.resource_class_id),
                                        array_agg(c.project_id), array_agg(m.used))
           FROM (SELECT consumer_id, resource_provider_id, resource_class_id, used FROM new_rows
                 UNION ALL
                 SELECT consumer_id, resource_provider_id, resource_class_id, -used FROM old_rows) m
           LEFT JOIN consumers c ON c.id = m.consumer_id;
    END IF;
    RETURN NULL;
END $$;

-- The allocation triggers. The insert trigger skips the statements the
-- claim runs (it records its rows itself, see placement_claim below):
-- the claim sets `placement.claim_writes_log` on entry and puts it back
-- on return, so every other writer, later statements of the same
-- transaction included, goes through the trigger. (CREATE OR REPLACE
-- TRIGGER needs PostgreSQL 14.)
CREATE OR REPLACE TRIGGER allocations_changed_ins AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('placement.claim_writes_log', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION allocations_changed();
CREATE OR REPLACE TRIGGER allocations_changed_upd AFTER UPDATE ON allocations
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION allocations_changed();
CREATE OR REPLACE TRIGGER allocations_changed_del AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION allocations_changed();

-- The change log's other writers: which providers' data changed, for each
-- process's candidate snapshot and deployment nodes to bring forward
-- (`db::candidates::delta`). Triggers fill it, so no write path can
-- forget to; a table whose rows a snapshot reads gets its triggers here.
-- A provider's rows (inventories, traits, aggregates, volumes and their
-- bindings): the providers the statement touched.
CREATE OR REPLACE FUNCTION log_provider_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR TG_OP = 'UPDATE' THEN
        INSERT INTO change_log (provider_id, structural)
        SELECT DISTINCT resource_provider_id, false FROM new_rows;
    END IF;
    IF TG_OP = 'DELETE' OR TG_OP = 'UPDATE' THEN
        INSERT INTO change_log (provider_id, structural)
        SELECT DISTINCT resource_provider_id, false FROM old_rows;
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER inventories_log_ins AFTER INSERT ON inventories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER inventories_log_upd AFTER UPDATE ON inventories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER inventories_log_del AFTER DELETE ON inventories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER rp_traits_log_ins AFTER INSERT ON resource_provider_traits
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER rp_traits_log_del AFTER DELETE ON resource_provider_traits
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER rp_aggs_log_ins AFTER INSERT ON resource_provider_aggregates
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER rp_aggs_log_del AFTER DELETE ON resource_provider_aggregates
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER node_volumes_log_ins AFTER INSERT ON node_volumes
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER node_volumes_log_upd AFTER UPDATE ON node_volumes
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER node_volumes_log_del AFTER DELETE ON node_volumes
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER volume_bindings_log_ins AFTER INSERT ON volume_bindings
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE OR REPLACE TRIGGER volume_bindings_log_del AFTER DELETE ON volume_bindings
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();

-- A provider made, removed or moved in its tree: structural, the snapshot
-- reads its tree again.
CREATE OR REPLACE FUNCTION log_provider_structure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (COALESCE(NEW.id, OLD.id), true);
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER resource_providers_structure
    AFTER INSERT OR DELETE OR UPDATE OF parent_provider_id, root_provider_id
    ON resource_providers FOR EACH ROW EXECUTE FUNCTION log_provider_structure();

-- A resource class renamed: the snapshot names classes, so every process
-- reloads it at its next request. Provider id 0 names no provider.
CREATE OR REPLACE FUNCTION log_class_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (0, true);
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER resource_classes_rename AFTER UPDATE OF name ON resource_classes
    FOR EACH STATEMENT EXECUTE FUNCTION log_class_rename();

-- A node's usage report (the load filter of low-priority work reads it):
-- logged when a reading changes, not on every report.
CREATE OR REPLACE FUNCTION log_provider_report() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (NEW.resource_provider_id, false);
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER provider_colocation_log_ins AFTER INSERT ON provider_colocation
    FOR EACH ROW EXECUTE FUNCTION log_provider_report();
CREATE OR REPLACE TRIGGER provider_colocation_log_upd
    AFTER UPDATE OF last_sampled_at, node_cpu_milli, node_memory_mb ON provider_colocation FOR EACH ROW
    WHEN (OLD.last_sampled_at IS DISTINCT FROM NEW.last_sampled_at
          OR OLD.node_cpu_milli IS DISTINCT FROM NEW.node_cpu_milli
          OR OLD.node_memory_mb IS DISTINCT FROM NEW.node_memory_mb)
    EXECUTE FUNCTION log_provider_report();

-- The claim (`db::allocations::claim`): allocations for consumers that do
-- not exist yet, all or nothing. It locks the providers, checks in one
-- statement what the detailed path (`db::allocations::write`) checks, and
-- writes only when every check passes; any rule it does not check itself
-- (new owners, quotas, reservations, low priority) makes it write nothing
-- and leaves the write to the detailed path. It records its rows through
-- `placement_usage_changed` itself, from values it already has (the
-- consumers' projects); the insert trigger skips statements run inside it
-- (`placement.claim_writes_log`).
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
                   bool_or(NOT placement_units_ok(r.used, i.min_unit, i.max_unit, i.step_size)) AS off_units,
                   (SELECT COALESCE(SUM(a.used), 0) FROM allocations a
                     WHERE a.resource_provider_id = r.rp AND a.resource_class_id = r.class_id) AS used,
                   EXISTS (SELECT 1 FROM project_reservations v WHERE v.resource_provider_id = r.rp) AS reserved_for
              FROM claimed r
              LEFT JOIN inventories i ON i.resource_provider_id = r.rp AND i.resource_class_id = r.class_id
             GROUP BY r.rp, r.class_id, i.total, i.reserved, i.allocation_ratio),
          -- The rules of the write (db::allocations::rules declares them,
          -- and a test there reads these markers).
          ok AS (
            SELECT NOT EXISTS (SELECT 1 FROM owners
                                   -- Owners that do not exist yet: the detailed path creates them.
                                WHERE project_id IS NULL OR user_id IS NULL OR (type_name IS NOT NULL AND type_id IS NULL)
                                   -- rule: consumer_generation (a claimed consumer must not exist)
                                   OR existing
                                   -- left to the detailed path: priority_class
                                   OR low)
               -- rule: provider_exists
               -- rule: class_exists
               AND NOT EXISTS (SELECT 1 FROM claimed WHERE rp IS NULL OR class_id IS NULL)
               -- left to the detailed path: limit (any limit on the path to the root)
               AND NOT EXISTS (SELECT 1 FROM up
                                WHERE (SELECT true FROM project_quotas q
                                        WHERE q.project_id = up.id AND q."limit" IS NOT NULL
                                          AND q.resource_class_id IN (SELECT class_id FROM claimed) LIMIT 1))
               AND NOT EXISTS (SELECT 1 FROM stock
                                   -- rule: inventory_exists
                                WHERE total IS NULL
                                   -- left to the detailed path: reservation (any on the provider)
                                   OR reserved_for
                                   -- rule: units
                                   OR off_units
                                   -- rule: capacity
                                   OR (used + n)::float8 > placement_capacity(total, reserved, allocation_ratio)) AS ok),
          created AS (
            INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation)
            SELECT uuid, project_id, user_id, type_id, 1 FROM owners WHERE (SELECT ok FROM ok)
            RETURNING uuid, id),
          written AS (
            INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
            SELECT r.rp, c.id, r.class_id, r.used FROM claimed r JOIN created c ON c.uuid = r.consumer
             ORDER BY r.given),
          -- The change log and the per-project totals, by their one writer.
          recorded AS (
            SELECT placement_usage_changed(array_agg(r.rp), array_agg(r.class_id),
                                           array_agg(o.project_id), array_agg(r.used)) AS done
              FROM claimed r JOIN owners o ON o.uuid = r.consumer
             WHERE (SELECT ok FROM ok)),
          bumped AS (
            UPDATE resource_providers SET generation = generation + 1, updated_at = now()
             WHERE uuid = ANY($6) AND (SELECT ok FROM ok))
        SELECT c.uuid, c.id FROM created c, recorded;
    PERFORM set_config('placement.claim_writes_log', COALESCE(outer_setting, ''), true);
END $$;
