-- The candidate snapshot caches resource class names (its answers name the
-- classes): a rename is logged as a structural change, so every process
-- reloads its snapshot at its next request, exactly as for inventories.
-- Provider id 0 names no provider; structural entries force a full reload.
CREATE FUNCTION log_class_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (0, true);
    RETURN NULL;
END $$;

CREATE TRIGGER resource_classes_rename AFTER UPDATE OF name ON resource_classes
    FOR EACH STATEMENT EXECUTE FUNCTION log_class_rename();
