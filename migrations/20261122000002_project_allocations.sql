-- Allocation totals per project, provider and class, kept by triggers on
-- allocations (so no write path can forget them). Quota checks read these
-- few rows instead of every allocation of a project's consumers, so a
-- limit check costs the same for a project of ten instances or of a
-- hundred thousand. Rows of one provider are only written by writers that
-- hold that provider's row lock or the consumer's, in key order, so they
-- add no new contention.

CREATE TABLE project_allocations (
    project_id            integer NOT NULL REFERENCES projects (id),
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    resource_class_id     integer NOT NULL,
    used                  bigint NOT NULL,
    PRIMARY KEY (project_id, resource_provider_id, resource_class_id)
);

INSERT INTO project_allocations (project_id, resource_provider_id, resource_class_id, used)
SELECT c.project_id, a.resource_provider_id, a.resource_class_id, SUM(a.used)
  FROM allocations a JOIN consumers c ON c.id = a.consumer_id
 GROUP BY 1, 2, 3;

-- Allocations are always removed before their consumer (the write path and
-- DELETE /allocations both do), so the consumer's project is still there.
CREATE FUNCTION track_project_allocations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
        SELECT c.project_id, n.resource_provider_id, n.resource_class_id, SUM(n.used)
          FROM new_rows n JOIN consumers c ON c.id = n.consumer_id
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (project_id, resource_provider_id, resource_class_id)
        DO UPDATE SET used = pa.used + EXCLUDED.used;
    ELSE
        INSERT INTO project_allocations AS pa (project_id, resource_provider_id, resource_class_id, used)
        SELECT c.project_id, o.resource_provider_id, o.resource_class_id, -SUM(o.used)
          FROM old_rows o JOIN consumers c ON c.id = o.consumer_id
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (project_id, resource_provider_id, resource_class_id)
        DO UPDATE SET used = pa.used + EXCLUDED.used;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_project_insert AFTER INSERT ON allocations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION track_project_allocations();
CREATE TRIGGER allocations_project_delete AFTER DELETE ON allocations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION track_project_allocations();
