//! `GET /fairness/shares`: each project's weighted dominant share as the
//! DRF sorter sees it (over the cluster's Placement capacity, excluded classes
//! left out), with its weight, allocation count, consumption and
//! unsatisfied guarantee: what Mesos exposes as role metrics.

use super::{positive_minus, Amounts};
use crate::db::Pool;
use crate::db::{candidates as pool_db, fairness as db};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use utoipa::ToSchema;

/// One project's standing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectShare {
    /// The project.
    pub project_id: String,
    /// Parent project, if any.
    pub parent_project_id: Option<String>,
    /// max over classes of allocated / cluster capacity (its subtree), ÷ weight.
    pub dominant_share: f64,
    /// The class behind it (null when it holds nothing).
    pub dominant_rc: Option<String>,
    /// DRF weight.
    pub weight: f64,
    /// Admissions so far.
    pub allocation_count: i64,
    /// Consumption against quota.
    pub consumed: Amounts,
    /// What its guarantees still lack.
    pub unsatisfied_guarantee: Amounts,
}

/// `GET /fairness/shares`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Shares {
    /// Cluster capacity per class: the shares' denominators.
    pub totals: BTreeMap<String, f64>,
    /// Classes left out of shares.
    pub excluded_resource_classes: Vec<String>,
    /// Every project that holds something or has settings, by id.
    pub projects: Vec<ProjectShare>,
}

/// Every project's standing.
pub async fn shares(pool: &Pool, excluded: &[String]) -> Result<Shares> {
    let mut tx = pool_db::begin_snapshot(pool).await?;
    let names = pool_db::class_names(&mut tx).await?;
    let totals: BTreeMap<String, f64> = db::pool_capacity(&mut tx)
        .await?
        .into_iter()
        .filter_map(|(c, n)| names.get(&c).map(|name| (name.clone(), n)))
        .collect();
    let settings = db::all_fairness(&mut tx).await?;
    let quotas = db::all_quotas(&mut tx).await?;
    let mut projects: BTreeSet<String> = db::projects_holding(&mut tx).await?.into_iter().collect();
    projects.extend(settings.iter().map(|s| s.project_id.clone()));
    projects.extend(quotas.iter().map(|q| q.project_id.clone()));
    let projects: Vec<String> = projects.into_iter().collect();
    let ids = db::project_ids(&mut tx, &projects).await?;
    let id_list: Vec<i32> = ids.values().copied().collect();
    let mut held = db::holdings_of(&mut tx, &id_list).await?;
    let mut out = Vec::with_capacity(projects.len());
    for project in projects {
        let Some(id) = ids.get(&project) else {
            continue;
        };
        let held = held.remove(id).unwrap_or_default();
        let s = settings.iter().find(|s| s.project_id == project);
        let weight = s.map_or(1.0, |s| s.weight);
        let (dominant_share, dominant_rc) = dominant(&totals, excluded, &held.allocated, weight);
        let guarantees: Amounts = quotas
            .iter()
            .filter(|q| q.project_id == project)
            .filter_map(|q| q.guarantee.map(|g| (q.resource_class.clone(), g)))
            .collect();
        out.push(ProjectShare {
            parent_project_id: s.and_then(|s| s.parent_project_id.clone()),
            dominant_share,
            dominant_rc,
            weight,
            allocation_count: s.map_or(0, |s| s.allocation_count),
            unsatisfied_guarantee: positive_minus(&guarantees, &held.consumed),
            consumed: held.consumed,
            project_id: project,
        });
    }
    tx.commit().await?;
    Ok(Shares {
        totals,
        excluded_resource_classes: excluded.to_vec(),
        projects: out,
    })
}

/// The weighted dominant share and its class, in the sorter's f64 order.
fn dominant(
    totals: &BTreeMap<String, f64>,
    excluded: &[String],
    held: &Amounts,
    weight: f64,
) -> (f64, Option<String>) {
    let mut best: (f64, Option<String>) = (0.0, None);
    for (class, total) in totals {
        if *total <= 0.0 || excluded.contains(class) {
            continue;
        }
        let share = held.get(class).copied().unwrap_or(0) as f64 / total;
        if share > best.0 {
            best = (share, Some(class.clone()));
        }
    }
    (best.0 / weight, best.1)
}
