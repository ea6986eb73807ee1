-- Eru-style scheduling on top of Placement: CPU topologies of providers,
-- deployed instances (one consumer each) and their per-core bindings.
-- Bindings and instances go with their consumer, so deleting a consumer's
-- allocations frees its cores.

-- Cores are arrays on the topology row: a node has tens to hundreds of
-- cores and the scheduler always reads all of them, for hundreds of nodes.
CREATE TABLE cpu_topologies (
    resource_provider_id  bigint PRIMARY KEY REFERENCES resource_providers (id) ON DELETE CASCADE,
    share_base            integer NOT NULL CHECK (share_base > 0),
    max_fragment_cores    integer NOT NULL CHECK (max_fragment_cores >= -1),
    core_ids              text[] NOT NULL,
    core_numa_nodes       text[] NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz,
    CHECK (cardinality(core_ids) = cardinality(core_numa_nodes))
);

CREATE TABLE numa_memory (
    resource_provider_id  bigint NOT NULL REFERENCES cpu_topologies (resource_provider_id) ON DELETE CASCADE,
    numa_node             text NOT NULL,
    memory_mb             bigint NOT NULL CHECK (memory_mb >= 0),
    PRIMARY KEY (resource_provider_id, numa_node)
);

CREATE TABLE instances (
    consumer_id           bigint PRIMARY KEY REFERENCES consumers (id) ON DELETE CASCADE,
    app                   text NOT NULL,
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id),
    cpu                   double precision NOT NULL,
    cpu_bind              boolean NOT NULL,
    memory_mb             bigint NOT NULL,
    numa_node             text,
    created_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX instances_app_idx ON instances (app, resource_provider_id);
CREATE INDEX instances_provider_idx ON instances (resource_provider_id);

CREATE TABLE core_bindings (
    consumer_id           bigint NOT NULL REFERENCES consumers (id) ON DELETE CASCADE,
    resource_provider_id  bigint NOT NULL REFERENCES resource_providers (id),
    core_id               text NOT NULL,
    shares                integer NOT NULL CHECK (shares > 0),
    PRIMARY KEY (consumer_id, core_id)
);
CREATE INDEX core_bindings_provider_idx ON core_bindings (resource_provider_id);
