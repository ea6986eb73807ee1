-- A CPU topology's version, raised by every replacement: a process that
-- re-reads a node after its usage changed keeps the cores, NUMA layout and
-- share base it already holds when the version is the same, and reads the
-- (large) topology only when it is not.
ALTER TABLE cpu_topologies ADD COLUMN version bigint NOT NULL DEFAULT 1;
