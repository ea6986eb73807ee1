//! A project's fairness settings (weight, parent) and quota (guarantees,
//! limits), with the rules Mesos applies to them: weights > 0, guarantees
//! ≤ limits and only on top-level projects, and a limit below current
//! consumption only with `force`.

use super::{class_ids, positive_minus, project_row, Amounts};
use crate::db::fairness::{self as db, FairnessRow};
use crate::db::Pool;
use crate::error::{codes, Error, Result};
pub use crate::sched::admission::Queueing;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `PUT /projects/{project_id}/fairness`, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct FairnessPut {
    /// DRF weight, > 0: a larger weight means a larger share.
    pub weight: f64,
    /// The parent project (null: a top-level project).
    #[serde(default)]
    pub parent_project_id: Option<String>,
    /// How its queued requests wait (default `strict`).
    #[serde(default)]
    pub queueing: Queueing,
    /// Whether the service removes its consumers that preemption advice
    /// names (default `advise`: their owners do).
    #[serde(default)]
    pub preemption: Preemption,
    /// Seconds from the first advice naming a consumer to its removal
    /// (`enforce` only; default 30, at most a day).
    #[serde(default = "default_grace")]
    pub preemption_grace_seconds: u32,
    /// Whether its waiting requests may take room from its own work of
    /// lower precedence (default `never`).
    #[serde(default)]
    pub within_project_preemption: WithinProject,
}

fn default_grace() -> u32 {
    30
}

/// Longest grace a project may give (the column's check says the same).
pub const MAX_PREEMPTION_GRACE_SECONDS: u32 = 86_400;

crate::types::named_enum! {
    /// Who removes a project's consumers that preemption advice names.
    #[derive(Default)]
    pub enum Preemption {
        /// Their owners, when they choose to (Mesos' and the default).
        #[default]
        Advise => "advise",
        /// The service, after the grace period, for consumers admitted
        /// through the queue (Kueue's and YuniKorn's preemption); others
        /// are only advised still. A removed consumer's queued request
        /// shows `preempted`, and it may be queued again at once.
        Enforce => "enforce",
    }
}

crate::types::named_enum! {
    /// Preemption inside one project (Kueue's `withinClusterQueue`).
    #[derive(Default)]
    pub enum WithinProject {
        /// Only other projects' work is ever advised (the default).
        #[default]
        Never => "never",
        /// A waiting request that does not fit may have the project's own
        /// work of lower precedence (a later priority class, or a lower
        /// priority in its class) advised for removal, and removed by the
        /// service when the project enforces preemption.
        LowerPriority => "lower_priority",
    }
}

/// A project's fairness settings.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FairnessView {
    /// The project.
    pub project_id: String,
    /// DRF weight (1 unless set).
    pub weight: f64,
    /// Parent project, null for a top-level one.
    pub parent_project_id: Option<String>,
    /// Admissions so far: the DRF tie-break, persisted so rounds replay.
    pub allocation_count: i64,
    /// How its queued requests wait.
    pub queueing: Queueing,
    /// Who removes its consumers that preemption advice names.
    pub preemption: Preemption,
    /// Seconds from advice to removal, when the service removes them.
    pub preemption_grace_seconds: u32,
    /// Whether its waiting requests may take room from its own work of
    /// lower precedence.
    pub within_project_preemption: WithinProject,
}

impl FairnessView {
    fn of(project: &str, row: Option<FairnessRow>) -> Self {
        match row {
            Some(r) => FairnessView {
                project_id: r.project_id,
                weight: r.weight,
                parent_project_id: r.parent_project_id,
                allocation_count: r.allocation_count,
                queueing: Queueing::named(&r.queueing).unwrap_or_default(),
                preemption: Preemption::named(&r.preemption).unwrap_or_default(),
                preemption_grace_seconds: u32::try_from(r.preemption_grace_seconds)
                    .unwrap_or_default(),
                within_project_preemption: WithinProject::named(&r.within_project_preemption)
                    .unwrap_or_default(),
            },
            None => FairnessView {
                project_id: project.to_string(),
                weight: 1.0,
                parent_project_id: None,
                allocation_count: 0,
                queueing: Queueing::Strict,
                preemption: Preemption::Advise,
                preemption_grace_seconds: default_grace(),
                within_project_preemption: WithinProject::Never,
            },
        }
    }
}

/// `PUT /projects/{project_id}/quota`, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct QuotaPut {
    /// Hard caps on consumption, by class.
    #[serde(default)]
    pub limits: Amounts,
    /// Minimums held back as headroom, by class (top-level projects only).
    #[serde(default)]
    pub guarantees: Amounts,
    /// Of each guarantee, how much may be lent to other projects while it
    /// is unused (Kueue's lendingLimit; ≤ the guarantee). A class without
    /// one lends nothing: its unused guarantee stays idle, Mesos' rule.
    #[serde(default)]
    pub lending_limits: Amounts,
    /// Set limits below current consumption anyway.
    #[serde(default)]
    pub force: bool,
}

/// A project's quota with what its subtree holds.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaView {
    /// The project.
    pub project_id: String,
    /// Limits by class.
    pub limits: Amounts,
    /// Guarantees by class.
    pub guarantees: Amounts,
    /// Lending limits by class.
    pub lending_limits: Amounts,
    /// Consumption against quota: allocations plus unused reservations.
    pub consumed: Amounts,
    /// Reservations of the project and its sub-projects, used or not.
    pub reserved: Amounts,
    /// Of `reserved`: room held for the subtree's waiting queued requests
    /// by preemption advice (`GET /queue/{id}` shows each request's). It
    /// counts in `consumed` until the request is admitted there or the
    /// hold ends, so that the room freed goes to that request only.
    pub held_for_requests: Amounts,
    /// Allocations of the project's and its sub-projects' consumers.
    pub allocated: Amounts,
    /// What the guarantees still lack.
    pub unsatisfied_guarantee: Amounts,
}

/// A project's fairness settings (defaults when never set).
pub async fn fairness(pool: &Pool, project: &str) -> Result<FairnessView> {
    let mut conn = pool.acquire().await?;
    let row = match db::project_id(&mut conn, project).await? {
        Some(id) => db::fairness(&mut conn, id).await?,
        None => None,
    };
    Ok(FairnessView::of(project, row))
}

/// The weights a project may have. Mesos takes any positive number; a
/// share divided by one near 0 is past any float (a dominant share of
/// infinity sorts nothing), so weights span nine orders of magnitude.
pub const WEIGHTS: std::ops::RangeInclusive<f64> = 0.001..=1_000_000.0;

/// Sets a project's weight and parent.
pub async fn set_fairness(pool: &Pool, project: &str, body: FairnessPut) -> Result<FairnessView> {
    if !WEIGHTS.contains(&body.weight) {
        return Err(Error::invalid(format!(
            "The weight must be a number from {} to {}.",
            WEIGHTS.start(),
            WEIGHTS.end()
        )));
    }
    let mut tx = pool.begin().await?;
    let id = project_row(&mut tx, project).await?;
    db::lock_projects(&mut tx, &[id]).await?;
    let parent = match &body.parent_project_id {
        None => None,
        Some(p) if p == project => {
            return Err(Error::invalid("A project cannot be its own parent."))
        }
        Some(p) => {
            let pid = project_row(&mut tx, p).await?;
            if db::lineage(&mut tx, pid).await?.contains(&id) {
                return Err(Error::invalid(format!(
                    "Project {p} is a sub-project of {project}: the project tree cannot have a cycle."
                )));
            }
            let has_guarantees = db::quota(&mut tx, id)
                .await?
                .iter()
                .any(|q| q.guarantee.is_some_and(|g| g > 0));
            if has_guarantees {
                return Err(Error::invalid(format!(
                    "Project {project} has guarantees, which only top-level projects may have."
                )));
            }
            Some(pid)
        }
    };
    let new = db::NewFairness {
        parent,
        weight: body.weight,
        queueing: body.queueing.name(),
        preemption: body.preemption.name(),
        preemption_grace_seconds: i32::try_from(body.preemption_grace_seconds).unwrap_or(i32::MAX),
        within_project_preemption: body.within_project_preemption.name(),
    };
    db::put_fairness(&mut tx, id, &new).await?;
    let row = db::fairness(&mut tx, id).await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(FairnessView::of(project, row))
}

/// A project's quota and holdings.
pub async fn quota(pool: &Pool, project: &str) -> Result<QuotaView> {
    let mut conn = pool.acquire().await?;
    let Some(id) = db::project_id(&mut conn, project).await? else {
        return Ok(view(
            project,
            Vec::new(),
            db::Holdings::default(),
            Amounts::new(),
        ));
    };
    let rows = db::quota(&mut conn, id).await?;
    let held = db::holdings(&mut conn, id).await?;
    let for_requests = db::held_for_requests(&mut conn, id).await?;
    Ok(view(project, rows, held, for_requests))
}

fn view(
    project: &str,
    rows: Vec<db::QuotaRow>,
    held: db::Holdings,
    for_requests: Amounts,
) -> QuotaView {
    let pick = |f: fn(&db::QuotaRow) -> Option<i64>| -> Amounts {
        rows.iter()
            .filter_map(|r| f(r).map(|n| (r.resource_class.clone(), n)))
            .collect()
    };
    let guarantees = pick(|r| r.guarantee);
    QuotaView {
        project_id: project.to_string(),
        limits: pick(|r| r.limit),
        lending_limits: pick(|r| r.lending_limit),
        unsatisfied_guarantee: positive_minus(&guarantees, &held.consumed),
        guarantees,
        consumed: held.consumed,
        reserved: held.reserved,
        held_for_requests: for_requests,
        allocated: held.allocated,
    }
}

/// A limit that allocating the requested amounts to a project would go
/// over: its own, or an ancestor's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaShortfall {
    /// The limited project (the requester or an ancestor).
    pub project_id: String,
    /// The class.
    pub resource_class: String,
    /// The limit.
    pub limit: i64,
    /// What the limited project's subtree consumes now.
    pub consumed: i64,
    /// What the request asks for in the class.
    pub requested: i64,
}

/// The limits of `project` and its ancestors that `requested` would go
/// over. An allocation on the project's own reservations may consume less than
/// it asks (consumption counts the larger of allocations and
/// reservations), so a shortfall here is where the write will refuse
/// unless the allocation lands inside them.
pub async fn quota_shortfalls(
    pool: &Pool,
    project: &str,
    requested: &Amounts,
) -> Result<Vec<QuotaShortfall>> {
    let mut conn = pool.acquire().await?;
    let Some(id) = db::project_id(&mut conn, project).await? else {
        return Ok(Vec::new());
    };
    let lineage = db::lineage(&mut conn, id).await?;
    let held = db::holdings_of(&mut conn, &lineage).await?;
    let mut out = Vec::new();
    for limited in lineage {
        for row in db::quota(&mut conn, limited).await? {
            let (Some(limit), Some(&asked)) = (row.limit, requested.get(&row.resource_class))
            else {
                continue;
            };
            let consumed = held
                .get(&limited)
                .and_then(|h| h.consumed.get(&row.resource_class))
                .copied()
                .unwrap_or(0);
            if consumed.saturating_add(asked) > limit {
                out.push(QuotaShortfall {
                    project_id: row.project_id,
                    resource_class: row.resource_class,
                    limit,
                    consumed,
                    requested: asked,
                });
            }
        }
    }
    Ok(out)
}

/// Replaces a project's quota.
pub async fn set_quota(pool: &Pool, project: &str, body: QuotaPut) -> Result<QuotaView> {
    for (class, g) in &body.guarantees {
        if let Some(l) = body.limits.get(class).filter(|l| g > *l) {
            return Err(Error::invalid(format!(
                "The guarantee of {class} ({g}) is above its limit ({l})."
            )));
        }
    }
    for (class, lend) in &body.lending_limits {
        let g = body.guarantees.get(class).copied().unwrap_or(0);
        if *lend > g {
            return Err(Error::invalid(format!(
                "The lending limit of {class} ({lend}) is above its guarantee ({g}): only a guarantee's unused part can be lent."
            )));
        }
    }
    let mut tx = pool.begin().await?;
    let id = project_row(&mut tx, project).await?;
    db::lock_projects(&mut tx, &[id]).await?;
    let names: Vec<String> = body
        .limits
        .keys()
        .chain(body.guarantees.keys())
        .chain(body.lending_limits.keys())
        .cloned()
        .collect();
    let ids = class_ids(&mut tx, &names).await?;
    let is_sub = db::lineage(&mut tx, id).await?.len() > 1;
    if is_sub && body.guarantees.values().any(|g| *g > 0) {
        return Err(Error::invalid(format!(
            "Project {project} has a parent: guarantees are only allowed on top-level projects."
        )));
    }
    let held = db::holdings(&mut tx, id).await?;
    if !body.force {
        refuse_limits_below(&body.limits, &held.consumed, project)?;
    }
    let mut rows: Vec<db::NewQuotaClass> = ids
        .iter()
        .map(|(c, &cid)| db::NewQuotaClass {
            class_id: cid,
            guarantee: body.guarantees.get(c).copied(),
            limit: body.limits.get(c).copied(),
            lending_limit: body.lending_limits.get(c).copied(),
        })
        .collect();
    rows.sort_unstable();
    rows.dedup();
    db::replace_quota(&mut tx, id, &rows).await?;
    let stored = db::quota(&mut tx, id).await?;
    let for_requests = db::held_for_requests(&mut tx, id).await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(view(project, stored, held, for_requests))
}

/// 409 when a new limit is below what the project consumes.
fn refuse_limits_below(limits: &Amounts, consumed: &Amounts, project: &str) -> Result<()> {
    for (class, limit) in limits {
        let used = consumed.get(class).copied().unwrap_or(0);
        if used > *limit {
            return Err(Error::conflict(format!(
                "Project {project} consumes {used} {class}, above the new limit of {limit}; set force to lower it anyway."
            ))
            .code(codes::QUOTA_BELOW_CONSUMPTION));
        }
    }
    Ok(())
}
