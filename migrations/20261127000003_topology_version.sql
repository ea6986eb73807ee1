-- A CPU topology's version, new on every replacement: a process that
-- re-reads a node after its usage changed keeps the cores, NUMA layout and
-- share base it already holds when the version is the same, and reads the
-- (large) topology only when it is not. Versions come from one sequence,
-- so no two topologies ever share one, whatever is deleted and created.
CREATE SEQUENCE cpu_topology_versions;
ALTER TABLE cpu_topologies
    ADD COLUMN version bigint NOT NULL DEFAULT nextval('cpu_topology_versions');
