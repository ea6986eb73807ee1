-- The Placement data model. Constraint names are referenced by the data
-- layer to map unique violations to clean 409s.

CREATE TABLE resource_classes (
    id          integer PRIMARY KEY,
    name        text NOT NULL CONSTRAINT resource_classes_name_key UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz
);
-- Standard classes take their index in os-resource-classes as id; custom ones start here.
CREATE SEQUENCE custom_resource_class_id_seq START 10000;

CREATE TABLE traits (
    id          serial PRIMARY KEY,
    name        text NOT NULL CONSTRAINT traits_name_key UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz
);

CREATE TABLE resource_providers (
    id                  bigserial PRIMARY KEY,
    uuid                uuid NOT NULL CONSTRAINT resource_providers_uuid_key UNIQUE,
    name                text NOT NULL CONSTRAINT resource_providers_name_key UNIQUE,
    generation          integer NOT NULL DEFAULT 0,
    root_provider_id    bigint NOT NULL REFERENCES resource_providers (id),
    parent_provider_id  bigint REFERENCES resource_providers (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz
);
CREATE INDEX resource_providers_root_idx ON resource_providers (root_provider_id);
CREATE INDEX resource_providers_parent_idx ON resource_providers (parent_provider_id);

CREATE TABLE inventories (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    resource_class_id     integer NOT NULL REFERENCES resource_classes (id),
    total                 integer NOT NULL,
    reserved              integer NOT NULL,
    min_unit              integer NOT NULL,
    max_unit              integer NOT NULL,
    step_size             integer NOT NULL,
    allocation_ratio      double precision NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz,
    PRIMARY KEY (resource_provider_id, resource_class_id)
);
CREATE INDEX inventories_class_idx ON inventories (resource_class_id);

CREATE TABLE placement_aggregates (
    id    serial PRIMARY KEY,
    uuid  uuid NOT NULL CONSTRAINT placement_aggregates_uuid_key UNIQUE
);

CREATE TABLE resource_provider_aggregates (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    aggregate_id          integer NOT NULL REFERENCES placement_aggregates (id),
    PRIMARY KEY (resource_provider_id, aggregate_id)
);
CREATE INDEX resource_provider_aggregates_agg_idx ON resource_provider_aggregates (aggregate_id);

CREATE TABLE resource_provider_traits (
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id) ON DELETE CASCADE,
    trait_id              integer NOT NULL REFERENCES traits (id),
    PRIMARY KEY (resource_provider_id, trait_id)
);
CREATE INDEX resource_provider_traits_trait_idx ON resource_provider_traits (trait_id);

CREATE TABLE projects (
    id           serial PRIMARY KEY,
    external_id  text NOT NULL CONSTRAINT projects_external_id_key UNIQUE
);

CREATE TABLE users (
    id           serial PRIMARY KEY,
    external_id  text NOT NULL CONSTRAINT users_external_id_key UNIQUE
);

CREATE TABLE consumer_types (
    id          serial PRIMARY KEY,
    name        text NOT NULL CONSTRAINT consumer_types_name_key UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE consumers (
    id                bigserial PRIMARY KEY,
    uuid              uuid NOT NULL CONSTRAINT consumers_uuid_key UNIQUE,
    project_id        integer NOT NULL REFERENCES projects (id),
    user_id           integer NOT NULL REFERENCES users (id),
    consumer_type_id  integer REFERENCES consumer_types (id),
    generation        integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz
);
CREATE INDEX consumers_project_user_idx ON consumers (project_id, user_id);

CREATE TABLE allocations (
    id                    bigserial PRIMARY KEY,
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id),
    consumer_id           bigint NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    resource_class_id     integer NOT NULL REFERENCES resource_classes (id),
    used                  integer NOT NULL CHECK (used > 0),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz
);
CREATE INDEX allocations_provider_class_idx ON allocations (resource_provider_id, resource_class_id);
CREATE INDEX allocations_consumer_idx ON allocations (consumer_id);
