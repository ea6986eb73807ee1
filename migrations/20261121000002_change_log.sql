-- A commit-ordered record of which providers changed, so that each server
-- process can keep an in-memory snapshot of the provider data candidates
-- need and bring it up to date per request. Rows carry the writing
-- transaction's id; a reader compares them with PostgreSQL snapshots
-- (pg_visible_in_snapshot), which is exact whatever the commit order.
-- Triggers fill it, so no write path can forget to.

CREATE TABLE change_log (
    xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    provider_id  bigint NOT NULL,
    structural   boolean NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX change_log_xid_idx ON change_log (xid);

-- The newest transaction id pruned from change_log: a cache built before it
-- must reload in full.
CREATE TABLE change_log_horizon (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid      xid8 NOT NULL
);
INSERT INTO change_log_horizon (xid) VALUES ('0'::xid8);

CREATE FUNCTION log_provider_rows() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE FUNCTION log_provider_structure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (provider_id, structural) VALUES (COALESCE(NEW.id, OLD.id), true);
    RETURN NULL;
END $$;

CREATE TRIGGER resource_providers_structure AFTER INSERT OR DELETE OR UPDATE OF parent_provider_id, root_provider_id
    ON resource_providers FOR EACH ROW EXECUTE FUNCTION log_provider_structure();

CREATE TRIGGER inventories_log_ins AFTER INSERT ON inventories REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER inventories_log_upd AFTER UPDATE ON inventories REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER inventories_log_del AFTER DELETE ON inventories REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();

CREATE TRIGGER allocations_log_ins AFTER INSERT ON allocations REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER allocations_log_upd AFTER UPDATE ON allocations REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER allocations_log_del AFTER DELETE ON allocations REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();

CREATE TRIGGER rp_traits_log_ins AFTER INSERT ON resource_provider_traits REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER rp_traits_log_del AFTER DELETE ON resource_provider_traits REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();

CREATE TRIGGER rp_aggs_log_ins AFTER INSERT ON resource_provider_aggregates REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER rp_aggs_log_del AFTER DELETE ON resource_provider_aggregates REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
