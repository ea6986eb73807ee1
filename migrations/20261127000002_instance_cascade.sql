-- The last per-row key checks on a deployment's write path.
--
-- A consumer's type is held by plain id, like its project and user (consumer
-- types are never deleted either). An instance and its volume bindings went
-- with their consumer through ON DELETE CASCADE keys, checked once per
-- inserted row; one statement-level trigger now removes them with the
-- consumers a statement deletes, whichever path deletes them. The write
-- path inserts instances with the consumer ids it has just written, and
-- `placement audit` reports instances or bindings whose consumer is gone.

ALTER TABLE consumers DROP CONSTRAINT consumers_consumer_type_id_fkey;
ALTER TABLE instances DROP CONSTRAINT instances_consumer_id_fkey;
ALTER TABLE volume_bindings DROP CONSTRAINT volume_bindings_consumer_id_fkey;

CREATE FUNCTION free_deleted_consumers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM volume_bindings WHERE consumer_id IN (SELECT id FROM gone);
    DELETE FROM instances WHERE consumer_id IN (SELECT id FROM gone);
    RETURN NULL;
END $$;

CREATE TRIGGER consumers_free_instances AFTER DELETE ON consumers
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION free_deleted_consumers();
