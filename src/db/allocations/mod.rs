//! Allocations: reads by consumer and by provider, and the one write path
//! used by PUT/POST /allocations, the reshaper and deployments.
//!
//! Concurrency: the write locks every provider that receives allocations
//! (`FOR UPDATE`, in id order) before it reads usage, so concurrent writers
//! from any number of server processes serialise per provider and capacity
//! can never be overcommitted. Consumers are locked too, so consumer
//! generations are compared and bumped atomically.

use super::consumers::{self, ConsumerRow};
use super::fairness;

mod bound_shares;
mod claim;
mod fairness_checks;
mod priority_classes;
pub mod rules;
mod stock;
use crate::types::{ConsumerWrite, GenerationCheck};
use bound_shares::check_bound_shares;
use chrono::{DateTime, Utc};
use claim::Claim;
use fairness_checks::{bump_and_check_limits, check_reservations, writer_projects};
use priority_classes::check_priority_classes;
use rules::{Checked, WriteRule};
use sqlx::PgConnection;
use std::collections::HashMap;
use stock::{usage, usage_and_inventories, Inventories, Usage};
use uuid::Uuid;

/// One allocation row with names resolved.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AllocationRow {
    /// Provider uuid.
    pub provider_uuid: Uuid,
    /// Provider generation.
    pub provider_generation: i32,
    /// Consumer uuid.
    pub consumer_uuid: Uuid,
    /// Consumer generation.
    pub consumer_generation: i32,
    /// Resource class name.
    pub resource_class: String,
    /// Units.
    pub used: i32,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

const SELECT: &str = "SELECT rp.uuid AS provider_uuid, rp.generation AS provider_generation,
        c.uuid AS consumer_uuid, c.generation AS consumer_generation, rc.name AS resource_class,
        a.used, a.created_at, a.updated_at
    FROM allocations a
    JOIN resource_providers rp ON rp.id = a.resource_provider_id
    JOIN consumers c ON c.id = a.consumer_id
    JOIN resource_classes rc ON rc.id = a.resource_class_id";

/// A consumer's allocations in the order they were written (Placement's
/// order: its rows in id order, as its index on the consumer gives them).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_consumer(
    conn: &mut PgConnection,
    consumer: Uuid,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE c.uuid = $1 ORDER BY a.id"
    )))
    .bind(consumer)
    .fetch_all(conn)
    .await
}

/// A provider's allocations, ordered by consumer (oldest first) then
/// class, as Placement on MariaDB answers; an import writes the source's
/// consumers in their order, so the old service's order carries over.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE a.resource_provider_id = $1 ORDER BY c.id, rc.id"
    )))
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Why an allocation write was refused. Each maps to one Placement error.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// 400: a provider named in the request does not exist (as the
    /// request spelled it).
    #[error("Allocation for resource provider '{0}' that does not exist.")]
    NoProvider(String),
    /// 400: an unknown resource class.
    #[error("No such resource class {1}.")]
    NoClass(Uuid, String),
    /// 409 undefined_code: the provider lacks inventory of the classes.
    #[error(
        "Unable to allocate inventory: Inventory for '{1}' on resource provider '{0}' invalid."
    )]
    NoInventory(Uuid, String),
    /// 409 undefined_code: min_unit/max_unit/step_size violated.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The requested amount would violate inventory constraints.")]
    Constraints(Uuid, String),
    /// 409 undefined_code: not enough capacity.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The requested amount would exceed the capacity.")]
    Capacity(Uuid, String),
    /// 409 concurrent_update: consumer generation mismatch.
    #[error("consumer generation conflict - expected {expected} but got {got}")]
    ConsumerGeneration {
        /// What the server has ("null" for no consumer).
        expected: String,
        /// What the client sent ("None" for null).
        got: String,
    },
    /// 409: the consumer is a deployment instance whose bound cores would no
    /// longer match its CUSTOM_CPU_SHARES allocation.
    #[error("Unable to allocate inventory: consumer {0} has cores bound by a deployment; its CUSTOM_CPU_SHARES allocation must stay {1} on resource provider '{2}' (resize it through /deployments, or delete its allocations).")]
    BoundShares(Uuid, i64, Uuid),
    /// 409 placement.quota.exceeded: a project would go over a limit.
    #[error("Quota exceeded: project {project} would consume {after} {class}, over its limit of {limit} (it consumes {before} now).")]
    Quota {
        /// The limited project (the writer's or an ancestor).
        project: String,
        /// The class.
        class: String,
        /// The limit.
        limit: i64,
        /// Consumption before the write.
        before: i64,
        /// Consumption the write would leave.
        after: i64,
    },
    /// 409 placement.reservation.unavailable: the capacity left is reserved
    /// for other projects.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The capacity left is reserved for other projects.")]
    Reserved(Uuid, String),
    /// 400 placement.colocation.class_not_allowed: batch and free
    /// consumers use only the batch classes (and DISK_GB), and only they do.
    #[error("Unable to allocate inventory: consumer {consumer} is {priority} work, which may not allocate {class} (batch and free work uses BATCH_VCPU_MILLI, BATCH_MEMORY_MB and DISK_GB; other work may not use the BATCH_* classes).")]
    PriorityClass {
        /// The consumer.
        consumer: Uuid,
        /// Its priority class's name.
        priority: &'static str,
        /// The class it may not allocate.
        class: String,
    },
    /// Database failure.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// (project, user, consumer type) names of a write.
type OwnerKey<'a> = (&'a str, &'a str, Option<&'a str>);

/// What a write resolved and locked before changing anything.
struct Locked {
    /// Provider uuid → id, for every provider receiving allocations.
    provider_ids: HashMap<Uuid, i64>,
    /// Those providers' ids, in id order (the lock order).
    providers: Vec<i64>,
    /// Class name → id.
    class_ids: HashMap<String, i32>,
    /// The consumers that already exist, locked.
    existing: HashMap<Uuid, ConsumerRow>,
    /// The first provider or class of the body that does not exist.
    unknown: Option<AllocError>,
}

/// Consumer uuid → id.
pub type ConsumerIds = HashMap<Uuid, i64>;

/// Writes the allocations of several consumers atomically inside the
/// caller's transaction: lock, check, replace, bump, every check on its
/// own, each refusal with Placement's error. Returns the ids of the
/// consumers that hold allocations afterwards. (A claim of new consumers
/// can go by one statement first: [`claim`].)
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn write(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
) -> Result<ConsumerIds, AllocError> {
    write_checking(conn, writes, Checked::ALL).await
}

/// [`write`], checking the rules of `checked` in the declared order
/// (`rules::WRITE_RULES`; a test of `rules.rs` reads this function's text
/// to hold it to that order). Every caller checks every rule, but the test
/// that shows each check is needed (`tests/claim_agrees.rs`).
pub async fn write_checking(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    checked: Checked,
) -> Result<ConsumerIds, AllocError> {
    let mut locked = lock_and_resolve(conn, writes).await?;
    // Placement ensures the consumer (and its generation) before it looks
    // up the body's providers and classes: a stale generation is a 409
    // that clients retry on, whatever else the body names.
    if checked.has(WriteRule::ConsumerGeneration) {
        check_consumer_generations(writes, &locked.existing)?;
    }
    match locked.unknown.take() {
        Some(e @ AllocError::NoProvider(_)) if checked.has(WriteRule::ProviderExists) => {
            return Err(e)
        }
        Some(e @ AllocError::NoClass(..)) if checked.has(WriteRule::ClassExists) => return Err(e),
        _ => {}
    }
    if checked.has(WriteRule::BoundShares) {
        check_bound_shares(conn, writes, &locked.existing).await?;
    }
    let needed = fairness::checks_needed(
        conn,
        &locked.providers,
        &writer_projects(writes),
        &locked.class_ids.values().copied().collect::<Vec<_>>(),
        &writes.iter().map(|w| w.consumer).collect::<Vec<_>>(),
    )
    .await?;
    if checked.has(WriteRule::PriorityClass) {
        check_priority_classes(writes, &needed.low_priority)?;
    }
    let reserved_before = if needed.reservations {
        fairness::unused_reservations(conn, Some(&locked.providers), None).await?
    } else {
        HashMap::new()
    };
    let (before, inventories, cleared) = clear_and_read_stock(conn, &locked).await?;
    let after_delete = match cleared.is_empty() {
        true => before.clone(),
        false => usage(conn, &locked.providers).await?,
    };
    // One pass, as Placement's: per allocation, its inventory, then its
    // units; then every capacity.
    let stock_rules = StockRules {
        inventory: checked.has(WriteRule::InventoryExists),
        units: checked.has(WriteRule::Units),
        capacity: checked.has(WriteRule::Capacity),
    };
    let stock = Stock {
        inventories: &inventories,
        before: &before,
        after_delete: &after_delete,
    };
    check_stock(writes, &locked, &stock, stock_rules)?;
    let new_ids = write_consumers(conn, writes, &locked.existing).await?;
    insert_allocations(conn, writes, &locked, &new_ids).await?;
    if checked.has(WriteRule::Reservation) && !reserved_before.is_empty() {
        check_reservations(
            conn,
            writes,
            &locked,
            &inventories,
            &before,
            &reserved_before,
        )
        .await?;
    }
    let bump = providers_to_bump(writes, &locked, &cleared);
    if checked.has(WriteRule::Limit) && needed.limits {
        bump_and_check_limits(conn, writes, &locked, &cleared, needed.flat, &bump).await?;
    } else {
        super::providers::bump_locked(conn, &bump).await?;
    }
    Ok(holding_ids(writes, &locked.existing, new_ids))
}

/// Usage before the write on the locked providers and their inventories,
/// then the consumers' current allocations removed (Placement's shrink
/// rule needs both): the usage, the inventories and the removed rows.
async fn clear_and_read_stock(
    conn: &mut PgConnection,
    locked: &Locked,
) -> Result<(Usage, Inventories, Vec<Cleared>), AllocError> {
    let (before, inventories) = usage_and_inventories(conn, &locked.providers).await?;
    let existing_ids: Vec<i64> = locked.existing.values().map(|c| c.id).collect();
    let cleared: Vec<Cleared> = match existing_ids.is_empty() {
        true => Vec::new(),
        false => {
            crate::db::query_as(
                "DELETE FROM allocations WHERE consumer_id = ANY($1)
                 RETURNING consumer_id, resource_provider_id, resource_class_id, used",
            )
            .bind(&existing_ids)
            .fetch_all(&mut *conn)
            .await?
        }
    };
    Ok((before, inventories, cleared))
}

/// Whether `write` may be claimed (see [`claim`]), as far as the write
/// itself says.
pub fn claimable(write: &ConsumerWrite) -> bool {
    claim::claimable(write)
}

/// Writes the claims of several new consumers in one statement (atomic on
/// its own, or inside the caller's transaction), all or nothing: true when
/// written, false (nothing written) when any of them needs the detailed
/// path ([`write`]), which then runs each on its own. Locks the
/// providers as [`write`] does.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn claim(conn: &mut PgConnection, writes: &[ConsumerWrite]) -> Result<bool, AllocError> {
    let Some(claim) = Claim::of(writes) else {
        return Ok(false);
    };
    Ok(claim.write(conn).await?.is_some())
}

/// The consumers of `writes` left holding allocations: the existing ones
/// not emptied, and the new ones.
fn holding_ids(
    writes: &[ConsumerWrite],
    existing: &HashMap<Uuid, ConsumerRow>,
    mut ids: ConsumerIds,
) -> ConsumerIds {
    for w in writes.iter().filter(|w| !w.allocations.is_empty()) {
        if let Some(c) = existing.get(&w.consumer) {
            ids.insert(w.consumer, c.id);
        }
    }
    ids
}

/// A removed allocation row: (consumer id, provider id, class id, units).
type Cleared = (i64, i64, i32, i32);

/// Locks the providers receiving allocations (id order), then the
/// consumers (uuid order), and resolves class names; an unknown provider
/// or class is kept in `unknown` for the caller to answer after the
/// consumer generations.
async fn lock_and_resolve(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
) -> Result<Locked, AllocError> {
    let mut wanted: Vec<Uuid> = writes
        .iter()
        .flat_map(|w| w.allocations.keys().copied())
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let rows: Vec<(i64, Uuid)> = crate::db::query_as(
        "SELECT id, uuid FROM resource_providers WHERE uuid = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(&wanted)
    .fetch_all(&mut *conn)
    .await?;
    let provider_ids: HashMap<Uuid, i64> = rows.iter().map(|(id, u)| (*u, *id)).collect();
    let mut unknown = wanted
        .iter()
        .find(|u| !provider_ids.contains_key(u))
        .map(|u| AllocError::NoProvider(u.to_string()));
    if unknown.is_none() {
        unknown = writes
            .iter()
            .find_map(|w| w.unparsed_provider.clone())
            .map(AllocError::NoProvider);
    }
    let mut class_names: Vec<String> = writes
        .iter()
        .flat_map(|w| w.allocations.values().flat_map(|m| m.keys().cloned()))
        .collect();
    class_names.sort();
    class_names.dedup();
    let class_rows: Vec<(i32, String)> =
        crate::db::query_as("SELECT id, name FROM resource_classes WHERE name = ANY($1)")
            .bind(&class_names)
            .fetch_all(&mut *conn)
            .await?;
    let class_ids: HashMap<String, i32> = class_rows.into_iter().map(|(id, n)| (n, id)).collect();
    if unknown.is_none() {
        unknown = writes.iter().find_map(|w| {
            w.allocations.values().find_map(|classes| {
                classes
                    .keys()
                    .find(|c| !class_ids.contains_key(c.as_str()))
                    .map(|rc| AllocError::NoClass(w.consumer, rc.clone()))
            })
        });
    }
    let existing = lock_consumers(conn, writes).await?;
    Ok(Locked {
        provider_ids,
        providers: rows.iter().map(|(id, _)| *id).collect(),
        class_ids,
        existing,
        unknown,
    })
}

/// Locks the writes' consumers (in uuid order, after their providers, as
/// every writer does) and checks each write's consumer generation: the
/// reshaper does this before it reads its inventories, as Placement does
/// (a stale generation is the 409 a client retries on, whatever else the
/// body names). [`write`] checks them again under the same locks.
pub async fn check_generations(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
) -> Result<(), AllocError> {
    let existing = lock_consumers(conn, writes).await?;
    check_consumer_generations(writes, &existing)
}

/// Locks the writes' existing consumers in uuid order (every writer's
/// order, after the providers) and returns them by uuid.
async fn lock_consumers(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
) -> Result<HashMap<Uuid, ConsumerRow>, sqlx::Error> {
    let mut wanted: Vec<Uuid> = writes.iter().map(|w| w.consumer).collect();
    wanted.sort_unstable();
    Ok(consumers::get_many_for_update(conn, &wanted)
        .await?
        .into_iter()
        .map(|c| (c.uuid, c))
        .collect())
}

/// Each write's consumer generation against the locked consumer.
fn check_consumer_generations(
    writes: &[ConsumerWrite],
    existing: &HashMap<Uuid, ConsumerRow>,
) -> Result<(), AllocError> {
    for w in writes {
        let conflict =
            |expected: String, got: String| AllocError::ConsumerGeneration { expected, got };
        match (&w.generation, existing.get(&w.consumer)) {
            (GenerationCheck::New, Some(c)) => {
                return Err(conflict(c.generation.to_string(), "None".into()))
            }
            (GenerationCheck::Is(g), None) => return Err(conflict("null".into(), g.to_string())),
            (GenerationCheck::Is(g), Some(c)) if !g.matches(c.generation) => {
                return Err(conflict(c.generation.to_string(), g.to_string()))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Which of the stock rules a detailed write checks.
struct StockRules {
    /// `InventoryExists`.
    inventory: bool,
    /// `Units`.
    units: bool,
    /// `Capacity`.
    capacity: bool,
}

/// The locked providers' stock: inventories, usage before the write and
/// after the writers' consumers' allocations were removed.
struct Stock<'a> {
    inventories: &'a Inventories,
    before: &'a Usage,
    after_delete: &'a Usage,
}

/// Every amount against its inventory's units and capacity. Missing
/// inventory lists classes in class id order, as Placement does;
/// shrinking an already over-committed provider is allowed.
fn check_stock(
    writes: &[ConsumerWrite],
    locked: &Locked,
    stock: &Stock<'_>,
    rules: StockRules,
) -> Result<(), AllocError> {
    let key = |rp: &Uuid, rc: &str| (locked.provider_ids[rp], locked.class_ids[rc]);
    let inventories = stock.inventories;
    let mut requested: HashMap<(i64, i32), i64> = HashMap::new();
    for w in writes {
        for (rp, classes) in &w.allocations {
            let mut missing: Vec<&str> = classes
                .keys()
                .filter(|c| !inventories.contains_key(&key(rp, c)))
                .map(String::as_str)
                .collect();
            if rules.inventory && !missing.is_empty() {
                missing.sort_by_key(|c| locked.class_ids[*c]);
                return Err(AllocError::NoInventory(*rp, missing.join(", ")));
            }
            for (rc, &n) in classes {
                let inv = inventories.get(&key(rp, rc));
                if rules.units && inv.is_some_and(|inv| !inv.units_ok(n)) {
                    return Err(AllocError::Constraints(*rp, rc.clone()));
                }
                *requested.entry(key(rp, rc)).or_default() += n;
            }
        }
    }
    if !rules.capacity {
        return Ok(());
    }
    for w in writes {
        for (rp, classes) in &w.allocations {
            for rc in classes.keys() {
                let k = key(rp, rc);
                let used_after = stock.after_delete.get(&k).copied().unwrap_or(0) + requested[&k];
                let used_before = stock.before.get(&k).copied().unwrap_or(0);
                let capacity = inventories.get(&k).map_or(0.0, |inv| inv.capacity());
                if used_after as f64 > capacity && used_after > used_before {
                    return Err(AllocError::Capacity(*rp, rc.clone()));
                }
            }
        }
    }
    Ok(())
}

/// Creates, updates (bumping generations) and deletes consumers in a few
/// batched statements; returns the ids of the consumers it created.
async fn write_consumers(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    existing: &HashMap<Uuid, ConsumerRow>,
) -> Result<HashMap<Uuid, i64>, AllocError> {
    let mut owners: HashMap<OwnerKey, consumers::Owner> = HashMap::new();
    let mut gone: Vec<i64> = Vec::new();
    let mut bumped = consumers::OwnerColumns::default();
    let mut bumped_set_type: Vec<bool> = Vec::new();
    let mut created = consumers::OwnerColumns::default();
    for w in writes {
        let key = (
            w.project_id.as_str(),
            w.user_id.as_str(),
            w.consumer_type.as_deref(),
        );
        let owner = match owners.get(&key) {
            Some(o) => *o,
            None => {
                let o = consumers::ensure_owner(conn, key.0, key.1, key.2).await?;
                owners.insert(key, o);
                o
            }
        };
        match existing.get(&w.consumer) {
            Some(c) if w.allocations.is_empty() => gone.push(c.id),
            Some(c) => {
                bumped.push_id(c.id, owner);
                bumped_set_type.push(w.consumer_type.is_some());
            }
            None if w.allocations.is_empty() => {}
            None => created.push_uuid(w.consumer, owner),
        }
    }
    consumers::delete_many(conn, &gone).await?;
    consumers::update_and_bump_many(conn, &bumped, &bumped_set_type).await?;
    let new_ids = consumers::create_many(conn, &created).await?;
    if new_ids.len() != created.uuids.len() {
        // Another writer created one of these consumers since we looked.
        return Err(AllocError::ConsumerGeneration {
            expected: "0".into(),
            got: "None".into(),
        });
    }
    Ok(new_ids)
}

/// Inserts every new allocation row in one statement.
async fn insert_allocations(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    locked: &Locked,
    new_ids: &HashMap<Uuid, i64>,
) -> Result<(), AllocError> {
    let consumer_id = |u: &Uuid| {
        locked
            .existing
            .get(u)
            .map(|c| c.id)
            .or_else(|| new_ids.get(u).copied())
    };
    let (mut rps, mut cids, mut rcs, mut used) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for w in writes {
        let Some(cid) = consumer_id(&w.consumer) else {
            continue;
        };
        for (rp, classes) in &w.allocations {
            for (rc, &n) in classes {
                rps.push(locked.provider_ids[rp]);
                cids.push(cid);
                rcs.push(locked.class_ids[rc.as_str()]);
                // n <= max_unit (an i32) was checked above.
                used.push(i32::try_from(n).map_err(|_| AllocError::Constraints(*rp, rc.clone()))?);
            }
        }
    }
    crate::db::query(
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::int[], $4::int[])",
    )
    .bind(&rps)
    .bind(&cids)
    .bind(&rcs)
    .bind(&used)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The providers whose generation the write bumps: every provider named
/// in the new set, and those cleared by an explicitly emptied consumer
/// (Placement names them implicitly).
fn providers_to_bump(writes: &[ConsumerWrite], locked: &Locked, cleared: &[Cleared]) -> Vec<i64> {
    let emptied: Vec<i64> = writes
        .iter()
        .filter(|w| w.allocations.is_empty())
        .filter_map(|w| locked.existing.get(&w.consumer).map(|c| c.id))
        .collect();
    let mut bump: Vec<i64> = locked.providers.clone();
    bump.extend(
        cleared
            .iter()
            .filter(|(c, ..)| emptied.contains(c))
            .map(|(_, rp, ..)| *rp),
    );
    bump.sort_unstable();
    bump.dedup();
    bump
}

/// Deletes all of a consumer's allocations and the consumer; false when it had none.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete_consumer(conn: &mut PgConnection, consumer: Uuid) -> Result<bool, sqlx::Error> {
    let Some(c) = consumers::get_for_update(conn, consumer).await? else {
        return Ok(false);
    };
    let n = crate::db::query("DELETE FROM allocations WHERE consumer_id = $1")
        .bind(c.id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    consumers::delete(conn, c.id).await?;
    Ok(n > 0)
}
