//! The fairness checks of the allocation write: project quota limits and
//! other projects' reservations, run inside the write's transaction after
//! its provider locks (see `db::fairness` for the consumption rule).

use super::detailed::{Cleared, Locked};
use super::stock::{usage, Inventories};
use super::{AllocError, ConsumerWrite};
use crate::db::{fairness, providers};
use sqlx::PgConnection;
use std::collections::HashMap;

/// The projects of the consumers that receive allocations, sorted.
pub(super) fn writer_projects(writes: &[ConsumerWrite]) -> Vec<String> {
    let mut projects: Vec<String> = writes
        .iter()
        .filter(|w| !w.allocations.is_empty())
        .map(|w| w.project_id.clone())
        .collect();
    projects.sort();
    projects.dedup();
    projects
}

/// The write's last step when a writer's project (or an ancestor) has a
/// limit in a written class: bumps the providers' generations, then
/// refuses the write if it raised a limited project's allocation in a
/// class while leaving its consumption above the limit (lowering it, even
/// while above, is allowed). The limited projects are locked here, after
/// the providers (the lock order of every writer), and as late as
/// possible: concurrent writers of one project are checked one after
/// another and wait on each other only until the commit.
pub(super) async fn bump_and_check_limits(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    locked: &Locked,
    cleared: &[Cleared],
    flat: bool,
    bump: &[i64],
) -> Result<(), AllocError> {
    let projects = writer_projects(writes);
    let limits = if flat {
        let classes: Vec<i32> = locked.class_ids.values().copied().collect();
        fairness::bump_then_flat_limits_used(conn, bump, &projects, &classes).await?
    } else {
        providers::bump_locked(conn, bump).await?;
        tree_limits_used(conn, &projects, locked).await?
    };
    for fairness::LimitUse { limit: l, consumed } in limits {
        if consumed <= l.limit {
            continue;
        }
        let members = if l.has_children {
            fairness::subtree_names(conn, l.project).await?
        } else {
            vec![l.project_id.clone()]
        };
        let delta = allocation_delta(
            writes,
            locked,
            cleared,
            &members,
            l.class,
            &l.resource_class,
        );
        if delta > 0 {
            return Err(AllocError::Quota {
                project: l.project_id,
                class: l.resource_class,
                limit: l.limit,
                before: consumed - delta,
                after: consumed,
            });
        }
    }
    Ok(())
}

/// The limits over the writers' lineage with each limited subtree's
/// consumption, when projects form a tree.
async fn tree_limits_used(
    conn: &mut PgConnection,
    projects: &[String],
    locked: &Locked,
) -> Result<Vec<fairness::LimitUse>, sqlx::Error> {
    let classes: Vec<String> = locked.class_ids.keys().cloned().collect();
    let limits = fairness::limits_over(conn, projects, &classes).await?;
    let mut ids: Vec<i32> = limits.iter().map(|l| l.project).collect();
    ids.dedup();
    let subtrees = if limits.iter().any(|l| l.has_children) {
        fairness::subtrees(conn, &ids).await?
    } else {
        ids.iter().map(|&p| (p, vec![p])).collect()
    };
    let class_ids: Vec<i32> = limits.iter().map(|l| l.class).collect();
    let after = fairness::consumption_of(conn, &subtrees, Some(&class_ids)).await?;
    Ok(limits
        .into_iter()
        .map(|limit| {
            let consumed = after
                .get(&(limit.project, limit.class))
                .copied()
                .unwrap_or(0);
            fairness::LimitUse { limit, consumed }
        })
        .collect())
}

/// What the write adds to the allocations of `members`' consumers in a
/// class: the new amounts of their writes minus the rows it removed.
fn allocation_delta(
    writes: &[ConsumerWrite],
    locked: &Locked,
    cleared: &[Cleared],
    members: &[String],
    class: i32,
    class_name: &str,
) -> i64 {
    let added: i64 = writes
        .iter()
        .filter(|w| members.contains(&w.project_id))
        .flat_map(|w| w.allocations.values())
        .filter_map(|m| m.get(class_name))
        .sum();
    let removed: i64 = cleared
        .iter()
        .filter(|(consumer, _, rc, _)| {
            *rc == class
                && locked
                    .existing
                    .values()
                    .any(|c| c.id == *consumer && members.contains(&c.project_id))
        })
        .map(|(_, _, _, used)| i64::from(*used))
        .sum();
    added - removed
}

/// Other projects' reservations on the written inventories: refuses a
/// write that raised used + reserved-but-unused above capacity (a
/// reservation's owner draws on it first, so only others are refused).
pub(super) async fn check_reservations(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    locked: &Locked,
    inventories: &Inventories,
    before: &HashMap<(i64, i32), i64>,
    reserved_before: &HashMap<(i64, i32), i64>,
) -> Result<(), AllocError> {
    let used_after = usage(conn, &locked.providers).await?;
    let reserved_after = fairness::unused_reservations(conn, Some(&locked.providers), None).await?;
    let held = |used: &HashMap<(i64, i32), i64>, reserved: &HashMap<(i64, i32), i64>, k| {
        used.get(&k).copied().unwrap_or(0) + reserved.get(&k).copied().unwrap_or(0)
    };
    for w in writes {
        for (rp, classes) in &w.allocations {
            for rc in classes.keys() {
                let k = (locked.provider_ids[rp], locked.class_ids[rc.as_str()]);
                if !reserved_before.contains_key(&k) && !reserved_after.contains_key(&k) {
                    continue;
                }
                let now = held(&used_after, &reserved_after, k);
                let was = held(before, reserved_before, k);
                if inventories
                    .get(&k)
                    .is_some_and(|i| now as f64 > i.capacity())
                    && now > was
                {
                    return Err(AllocError::Reserved(*rp, rc.clone()));
                }
            }
        }
    }
    Ok(())
}
