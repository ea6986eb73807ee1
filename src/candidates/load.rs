//! Builds the candidate engine's [`Snapshot`] from the rows `db::candidates`
//! (and, for batch placement, `db::colocation::placement`) reads: a full
//! load of every provider, and the per-provider reload that patches a
//! cached snapshot in place.

use super::snapshot::{Node, Report, Snapshot, Stock};
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
                total: s.total.into(),
                reserved: s.reserved.into(),
                min_unit: s.min_unit.into(),
                max_unit: s.max_unit.into(),
                step_size: s.step_size.into(),
                allocation_ratio: s.allocation_ratio,
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
    let nodes: Vec<std::sync::Arc<Node>> = rows
        .iter()
        .map(|r| Node {
            id: r.id,
            uuid: r.uuid,
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

/// Replaces some providers' data with `data` (read of them, and only
/// them, at one snapshot). False when their inventories use a class the
/// snapshot has no name for (created since it was loaded): the caller
/// reads the names.
pub fn apply(snap: &mut Snapshot, ids: &[i64], data: db::ProviderData) -> bool {
    let index: HashMap<i64, usize> = ids
        .iter()
        .filter_map(|id| snap.index.by_id.get(id).map(|&i| (*id, i)))
        .collect();
    let before: Vec<(Vec<i32>, bool)> = index
        .values()
        .map(|&i| (snap.nodes[i].aggs.clone(), snap.is_sharing(i)))
        .collect();
    for &i in index.values() {
        let n = std::sync::Arc::make_mut(&mut snap.nodes[i]);
        n.stock.clear();
        n.traits.clear();
        n.aggs.clear();
        n.report = None;
        n.stamp = super::snapshot::next_stamp();
    }
    fill(snap, &index, data.node);
    fill_reports(snap, &index, data.reports, data.pending);
    let regrouped = index
        .values()
        .zip(&before)
        .any(|(&i, (aggs, sharing))| snap.nodes[i].aggs != *aggs || snap.is_sharing(i) != *sharing);
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
