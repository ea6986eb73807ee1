//! The fairness checks of the allocation write: project quota limits and
//! other projects' reservations, run inside the write's transaction after
//! its provider locks (see `db::fairness` for the consumption rule).

use super::{inventories_of, usage, AllocError, Cleared, ConsumerWrite, Locked};
use crate::db::fairness;
use sqlx::PgConnection;
use std::collections::HashMap;

/// Refuses a write that raised a limited project's allocation in a class
/// while leaving its consumption above the limit (lowering it, even while
/// above, is allowed). The writers' projects and their ancestors with
/// limits in the written classes are locked here (by `limits_over`), after
/// the providers (the lock order of every writer), so concurrent writers
/// of one project are checked one after another.
pub(super) async fn check_limits(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    locked: &Locked,
    cleared: &[Cleared],
    flat: bool,
) -> Result<(), AllocError> {
    let mut projects: Vec<String> = writes
        .iter()
        .filter(|w| !w.allocations.is_empty())
        .map(|w| w.project_id.clone())
        .collect();
    projects.sort();
    projects.dedup();
    if projects.is_empty() {
        return Ok(());
    }
    let classes: Vec<String> = locked.class_ids.keys().cloned().collect();
    let limits = fairness::limits_over(conn, &projects, &classes, flat).await?;
    if limits.is_empty() {
        return Ok(());
    }
    // limits_over locked these projects.
    let mut ids: Vec<i32> = limits.iter().map(|l| l.project).collect();
    ids.dedup();
    let subtrees = if limits.iter().any(|l| l.has_children) {
        fairness::subtrees(conn, &ids).await?
    } else {
        ids.iter().map(|&p| (p, vec![p])).collect()
    };
    let class_ids: Vec<i32> = limits.iter().map(|l| l.class).collect();
    let after = fairness::consumption_of(conn, &subtrees, Some(&class_ids)).await?;
    for l in limits {
        let now = after.get(&(l.project, l.class)).copied().unwrap_or(0);
        if now <= l.limit {
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
                before: now - delta,
                after: now,
            });
        }
    }
    Ok(())
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
    before: &HashMap<(i64, i32), i64>,
    reserved_before: &HashMap<(i64, i32), i64>,
) -> Result<(), AllocError> {
    let used_after = usage(conn, &locked.providers).await?;
    let reserved_after = fairness::unused_reservations(conn, Some(&locked.providers), None).await?;
    let inventories = inventories_of(conn, &locked.providers).await?;
    let claimed = |used: &HashMap<(i64, i32), i64>, reserved: &HashMap<(i64, i32), i64>, k| {
        used.get(&k).copied().unwrap_or(0) + reserved.get(&k).copied().unwrap_or(0)
    };
    for w in writes {
        for (rp, classes) in &w.allocations {
            for rc in classes.keys() {
                let k = (locked.provider_ids[rp], locked.class_ids[rc.as_str()]);
                if !reserved_before.contains_key(&k) && !reserved_after.contains_key(&k) {
                    continue;
                }
                let now = claimed(&used_after, &reserved_after, k);
                let was = claimed(before, reserved_before, k);
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
