//! Builds the candidate engine's [`Snapshot`] from the rows `db::candidates`
//! (and, for batch placement, `db::colocation::placement`) reads: a full
//! load of every provider, and the per-provider reload that patches a
//! cached snapshot in place.

use super::snapshot::{JsonUuid, Node, Report, Snapshot, Stock};
use crate::db::candidates::{self as db, NodeData};
use crate::db::colocation::placement as colocation;
use crate::sched::colocation::CpuMem;
use sqlx::PgConnection;
use std::collections::HashMap;

fn fill(snap: &mut Snapshot, index: &HashMap<i64, usize>, data: NodeData) {
    use std::sync::Arc;
    for s in data.stock {
        if let Some(&i) = index.get(&s.provider_id) {
            Arc::make_mut(&mut snap.nodes[i]).stock.push(Stock {
                class: s.class_id,
                inventory: s.inventory,
                used: s.used,
            });
        }
    }
    for t in data.traits {
        if let Some(&i) = index.get(&t.provider_id) {
            Arc::make_mut(&mut snap.nodes[i]).traits.push(t.trait_id);
        }
        snap.trait_names.insert(t.trait_id, t.name);
    }
    for m in data.memberships {
        if let Some(&i) = index.get(&m.provider_id) {
            Arc::make_mut(&mut snap.nodes[i]).aggs.push(m.aggregate_id);
        }
    }
}

/// Sets the last usage reports, with what was allocated since, of the
/// providers in `index`.
fn fill_reports(
    snap: &mut Snapshot,
    index: &HashMap<i64, usize>,
    reports: Vec<colocation::ReportRow>,
    pending: Vec<colocation::PendingRow>,
) {
    use std::sync::Arc;
    for r in reports {
        if let Some(&i) = index.get(&r.rp_id) {
            Arc::make_mut(&mut snap.nodes[i]).report = Some(Report {
                sampled_at: r.sampled_at,
                node_used: CpuMem::new(r.cpu_milli, r.memory_mb),
                pending: Vec::new(),
            });
        }
    }
    for p in pending {
        let node = index
            .get(&p.rp_id)
            .map(|&i| Arc::make_mut(&mut snap.nodes[i]));
        if let Some(report) = node.and_then(|n| n.report.as_mut()) {
            report.pending.push(CpuMem::new(p.cpu_milli, p.memory_mb));
        }
    }
}

/// Loads every provider (ordered by id) with its inventories, usage, traits and aggregates.
pub async fn load(conn: &mut PgConnection) -> Result<Snapshot, sqlx::Error> {
    let sharing = db::sharing_trait_id(conn).await?;
    let rows = db::provider_rows(conn).await?;
    let index: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    let nodes: super::snapshot::node_chunks::Nodes = rows
        .iter()
        .map(|r| Node {
            id: r.id,
            uuid: r.uuid,
            json_uuid: JsonUuid::of(r.uuid),
            parent: r.parent_id.and_then(|p| index.get(&p).copied()),
            root: index.get(&r.root_id).copied().unwrap_or_default(),
            traits: Vec::new(),
            aggs: Vec::new(),
            stock: Vec::new(),
            report: None,
            stamp: super::snapshot::next_stamp(),
        })
        .map(std::sync::Arc::new)
        .collect();
    let any_nested = rows.iter().any(|r| r.parent_id.is_some());
    let mut snap = Snapshot {
        nodes,
        sharing_trait: sharing,
        any_nested,
        class_names: db::class_names(conn).await?.into_iter().collect(),
        trait_names: Default::default(),
        ..Default::default()
    };
    let data = db::node_data(conn).await?;
    fill(&mut snap, &index, data);
    let (reports, pending) = (
        colocation::reports(conn).await?,
        colocation::pending(conn).await?,
    );
    fill_reports(&mut snap, &index, reports, pending);
    snap.index();
    let below = super::snapshot::stamps_below();
    snap.journal = std::sync::Arc::new(super::snapshot::ChangeJournal::starting_at(below));
    snap.stamps_below = below;
    Ok(snap)
}

/// Reloads the inventories, usage, traits and aggregates of some providers in place.
pub async fn patch(
    conn: &mut PgConnection,
    snap: &mut Snapshot,
    ids: &[i64],
) -> Result<(), sqlx::Error> {
    let data = db::provider_data(conn, ids).await?;
    if !apply(snap, ids, data) {
        snap.class_names = db::class_names(conn).await?.into_iter().collect();
    }
    Ok(())
}

/// `snap` with these units added to its usage (deltas of the change log,
/// ordered by provider); None when one does not apply as a delta: an
/// unknown provider or class, or a provider with a usage report, whose
/// pending usage is read with its allocations.
pub fn add_usage(snap: &Snapshot, deltas: &[db::UsageDelta]) -> Option<Snapshot> {
    let mut next = snap.clone();
    for d in deltas {
        let &i = snap.index.by_id.get(&d.provider_id)?;
        let node = std::sync::Arc::make_mut(&mut next.nodes[i]);
        if node.report.is_some() {
            return None;
        }
        node.stock.iter_mut().find(|s| s.class == d.class_id)?.used += d.units;
        next.restamp(i);
    }
    Some(next)
}

/// Replaces some providers' data with `data` (read of them, and only
/// them, at one snapshot). False when their inventories use a class the
/// snapshot has no name for (created since it was loaded): the caller
/// reads the names.
pub fn apply(snap: &mut Snapshot, ids: &[i64], data: db::ProviderData) -> bool {
    let index: HashMap<i64, usize> = ids
        .iter()
        .filter_map(|id| snap.index.by_id.get(id).map(|&i| (*id, i)))
        .collect();
    let before: Vec<(Vec<i32>, Vec<i32>)> = index
        .values()
        .map(|&i| (snap.nodes[i].aggs.clone(), snap.nodes[i].traits.clone()))
        .collect();
    for &i in index.values() {
        let n = std::sync::Arc::make_mut(&mut snap.nodes[i]);
        n.stock.clear();
        n.traits.clear();
        n.aggs.clear();
        n.report = None;
        snap.restamp(i);
    }
    fill(snap, &index, data.node);
    fill_reports(snap, &index, data.reports, data.pending);
    // Sharing is a trait: a change of traits covers it.
    let regrouped = index
        .values()
        .zip(&before)
        .any(|(&i, (aggs, traits))| snap.nodes[i].aggs != *aggs || snap.nodes[i].traits != *traits);
    if regrouped {
        snap.index_aggregates();
    }
    // New custom classes may have appeared in the patched inventories.
    index.values().all(|&i| {
        snap.nodes[i]
            .stock
            .iter()
            .all(|s| snap.class_names.contains_key(&s.class))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::candidates::UsageDelta;
    use std::sync::Arc;

    /// Two providers with VCPU (class 0): 10 and 20 used; the second has
    /// a usage report.
    fn two() -> Snapshot {
        let node = |id: i64, used: i64, report: Option<Report>| Node {
            id,
            uuid: uuid::Uuid::from_u128(u128::from(id.unsigned_abs())),
            json_uuid: JsonUuid::of(uuid::Uuid::from_u128(u128::from(id.unsigned_abs()))),
            parent: None,
            root: usize::try_from(id - 1).unwrap_or_default(),
            traits: Vec::new(),
            aggs: Vec::new(),
            stock: vec![Stock {
                class: 0,
                inventory: crate::types::Inventory::whole(100),
                used,
            }],
            report,
            stamp: 0,
        };
        let report = Report {
            sampled_at: chrono::Utc::now(),
            node_used: CpuMem::new(0, 0),
            pending: Vec::new(),
        };
        let mut snap = Snapshot {
            nodes: vec![
                Arc::new(node(1, 10, None)),
                Arc::new(node(2, 20, Some(report))),
            ]
            .into(),
            ..Default::default()
        };
        snap.index();
        snap
    }

    fn delta(provider_id: i64, class_id: i32, units: i64) -> UsageDelta {
        UsageDelta {
            provider_id,
            class_id,
            units,
        }
    }

    /// Units are added to the provider's class, removals too, and the
    /// node gets a new stamp; the original snapshot is untouched.
    #[test]
    fn units_are_added_to_a_copy() {
        let snap = two();
        let next = add_usage(&snap, &[delta(1, 0, 5), delta(1, 0, -2)]).expect("applies");
        assert_eq!(next.nodes[0].stock[0].used, 13);
        assert_eq!(snap.nodes[0].stock[0].used, 10);
        assert_ne!(next.nodes[0].stamp, snap.nodes[0].stamp);
        assert!(Arc::ptr_eq(&next.nodes[1], &snap.nodes[1]));
    }

    /// What a delta cannot bring forward: an unknown provider or class, and
    /// a provider with a report (its pending usage comes from its
    /// allocations).
    #[test]
    fn what_units_alone_cannot_bring_forward() {
        let snap = two();
        assert!(add_usage(&snap, &[delta(3, 0, 1)]).is_none());
        assert!(add_usage(&snap, &[delta(1, 7, 1)]).is_none());
        assert!(add_usage(&snap, &[delta(2, 0, 1)]).is_none());
    }
}
