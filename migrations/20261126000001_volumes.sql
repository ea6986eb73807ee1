-- Eru's volumes: the disks a deployment node offers (bytes each), and the
-- share of them each deployed instance holds. A binding goes with its
-- instance: deleting the consumer frees it. Changes are logged like the
-- node's other data, so each process's copy of deployment nodes stays exact.

CREATE TABLE node_volumes (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    device                text NOT NULL,
    size                  bigint NOT NULL CHECK (size > 0),
    PRIMARY KEY (resource_provider_id, device)
);

CREATE TABLE volume_bindings (
    consumer_id           bigint NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    resource_provider_id  bigint NOT NULL,
    binding               text NOT NULL,
    device                text NOT NULL,
    size                  bigint NOT NULL CHECK (size >= 0),
    PRIMARY KEY (consumer_id, binding, device)
);
CREATE INDEX volume_bindings_provider_idx ON volume_bindings (resource_provider_id);

CREATE TRIGGER node_volumes_log_ins AFTER INSERT ON node_volumes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER node_volumes_log_upd AFTER UPDATE ON node_volumes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER node_volumes_log_del AFTER DELETE ON node_volumes REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER volume_bindings_log_ins AFTER INSERT ON volume_bindings REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
CREATE TRIGGER volume_bindings_log_del AFTER DELETE ON volume_bindings REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_provider_rows();
