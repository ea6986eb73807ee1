-- Writes that scale with the instances of one deployment.
--
-- A foreign key is checked row by row (one executor call per row and per
-- key); a 10,000-instance deployment spent two thirds of its write time
-- there. The keys dropped here are the ones OpenStack Placement's own schema
-- does not have either: allocations reference providers, consumers and
-- classes, and consumers reference projects and users, by plain ids.
-- Integrity comes from the write path, as in Placement:
--   * every allocation write locks its providers FOR UPDATE, and deleting a
--     provider locks it before refusing one with allocations;
--   * a class may be deleted only while no inventory uses it, and an
--     allocation needs an inventory of its class (inventories keep their key);
--   * allocations are deleted before their consumer on every path;
--   * projects and users are never deleted.
-- `placement audit` reports any row left dangling (check
-- `dangling_reference`).
--
-- An instance's core binding becomes two arrays on the instance (core ids
-- and the shares on each) instead of a row per core: it is written and
-- freed with the instance, and read whole.

ALTER TABLE allocations
    DROP CONSTRAINT allocations_consumer_id_fkey,
    DROP CONSTRAINT allocations_resource_class_id_fkey,
    DROP CONSTRAINT allocations_resource_provider_id_fkey;

ALTER TABLE consumers
    DROP CONSTRAINT consumers_project_id_fkey,
    DROP CONSTRAINT consumers_user_id_fkey;

ALTER TABLE instances
    DROP CONSTRAINT instances_resource_provider_id_fkey,
    ADD COLUMN core_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN core_shares integer[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT instances_binding_shape
        CHECK (cardinality(core_ids) = cardinality(core_shares) AND 0 < ALL (core_shares));

UPDATE instances i
   SET core_ids = b.ids, core_shares = b.shares
  FROM (SELECT consumer_id, array_agg(core_id ORDER BY core_id) AS ids,
               array_agg(shares ORDER BY core_id) AS shares
          FROM core_bindings GROUP BY consumer_id) b
 WHERE b.consumer_id = i.consumer_id;

DROP TABLE core_bindings;
