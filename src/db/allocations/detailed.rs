//! The detailed allocation write: every write (PUT and POST /allocations,
//! the reshaper, deployments, a round's admissions), each rule of
//! `rules::WRITE_RULES` checked in its declared order, each refusal with
//! Placement's error. Locks the providers (id order), then the consumers
//! (uuid order), checks, replaces the consumers' allocations and bumps the
//! generations, inside the caller's transaction.

use super::bound_shares::check_bound_shares;
use super::fairness_checks::{bump_and_check_limits, check_reservations, writer_projects};
use super::priority_classes::check_priority_classes;
use super::rules::{Checked, WriteRule};
use super::stock::{usage, usage_and_inventories, Inventories, Usage};
use super::{AllocError, ConsumerIds};
use crate::db::consumers::{self, ConsumerRow};
use crate::db::fairness;
use crate::types::{ConsumerWrite, GenerationCheck};
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// (project, user, consumer type) names of a write.
type OwnerKey<'a> = (&'a str, &'a str, Option<&'a str>);

/// What a write resolved and locked before changing anything.
pub(super) struct Locked {
    /// Provider uuid → id, for every provider receiving allocations.
    pub(super) provider_ids: HashMap<Uuid, i64>,
    /// Those providers' ids, in id order (the lock order).
    pub(super) providers: Vec<i64>,
    /// Class name → id.
    pub(super) class_ids: HashMap<String, i32>,
    /// The consumers that already exist, locked.
    pub(super) existing: HashMap<Uuid, ConsumerRow>,
    /// The first provider or class of the body that does not exist.
    pub(super) unknown: Option<AllocError>,
}

/// Writes the allocations of several consumers atomically inside the
/// caller's transaction: lock, check, replace, bump, every check on its
/// own, each refusal with Placement's error. Returns the ids of the
/// consumers that hold allocations afterwards. (A claim of new consumers
/// can go by one statement first: [`super::claim`].)
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
        crate::db::providers::bump_locked(conn, &bump).await?;
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
pub(super) type Cleared = (i64, i64, i32, i32);

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
