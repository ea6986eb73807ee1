//! Preemption advice for the fair queue (`sched::preempt` decides): after
//! a round, requests of projects below their guarantee that found no room
//! get advice naming consumers of projects above their fair share, stored
//! for `GET /preemptions`; the room is held for the request (added to its
//! project's reservation on the provider) for `--preemption-hold-seconds`,
//! so that what the owners free is not taken by someone else. The service
//! removes advised consumers itself only where their project enforces
//! preemption, after its grace, and only those admitted through the queue
//! ([`enforce`]); each removal is an event (`GET
//! /preemptions?state=enforced`), a log line and a metric.

use super::admission::RoundView;
use super::queue::QueueItem;
use crate::db::fairness::preemptions::{self as db, AdviceRow, HolderRow, NewAdvice, NewHold};
use crate::db::fairness::queue::PendingRow;
use crate::error::Result;
use crate::sched::preempt::{self, Ask, ClusterCapacity, Holder, Victim};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use utoipa::ToSchema;
use uuid::Uuid;

/// One advised victim, as `GET /preemptions` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreemptionView {
    /// The consumer whose allocations its owner is asked to delete.
    pub consumer_uuid: Uuid,
    /// Its project.
    pub project_id: String,
    /// The provider where the room is made.
    pub resource_provider_uuid: Uuid,
    /// The queued request it makes room for (shown only to callers who
    /// pass the rule for that request's project).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_request: Option<Uuid>,
    /// That request's project, below its guarantee (shown likewise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_project_id: Option<String>,
    /// What that request needs (shown likewise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<super::Amounts>,
    /// The round that advised it.
    pub round_id: Uuid,
    /// When.
    pub advised_at: chrono::DateTime<chrono::Utc>,
    /// Until when the freed room is held for the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<chrono::DateTime<chrono::Utc>>,
    /// When the service removed the consumer (`state=enforced` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced_at: Option<chrono::DateTime<chrono::Utc>>,
    /// What it removed: provider uuid → resources (likewise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<BTreeMap<Uuid, super::admission::AdmittedResources>>,
    /// The request that queued the consumer again (`requeue: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeued_as: Option<Uuid>,
}

impl PreemptionView {
    /// The advice without the waiting request's project, id and needs:
    /// what a victim's project may see of another's queue.
    pub fn without_beneficiary(self) -> PreemptionView {
        PreemptionView {
            for_request: None,
            for_project_id: None,
            resources: None,
            ..self
        }
    }
}

/// `GET /preemptions`' answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreemptionList {
    /// Advised victims, oldest advice first.
    pub preemptions: Vec<PreemptionView>,
}

impl PreemptionView {
    fn of(row: AdviceRow) -> PreemptionView {
        let item: Option<QueueItem> = serde_json::from_value(row.request).ok();
        PreemptionView {
            consumer_uuid: row.consumer_uuid,
            project_id: row.victim_project_id,
            resource_provider_uuid: row.resource_provider_uuid,
            for_request: Some(row.request_id),
            for_project_id: Some(row.request_project_id),
            resources: Some(item.map(|i| i.resources).unwrap_or_default()),
            round_id: row.round_id,
            advised_at: row.advised_at,
            held_until: row.held_until,
            enforced_at: None,
            removed: None,
            requeued_as: None,
        }
    }
}

/// Which preemptions a list shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Listed {
    /// The advice in force.
    #[default]
    Advised,
    /// The removals the service carried out, newest first.
    Enforced,
}

/// Most removals one list shows.
const EVENTS_LISTED: i64 = 1000;

/// The advice in force, or the removals carried out (a victim project's
/// only, when named).
pub async fn list(
    pool: &crate::db::Pool,
    project: Option<&str>,
    listed: Listed,
) -> Result<Vec<PreemptionView>> {
    let mut conn = pool.acquire().await?;
    if listed == Listed::Enforced {
        let rows = db::events(&mut conn, project, EVENTS_LISTED).await?;
        return Ok(rows
            .into_iter()
            .map(|e| PreemptionView {
                enforced_at: Some(e.enforced_at),
                removed: serde_json::from_value(e.removed).ok(),
                requeued_as: e.requeued_as,
                ..PreemptionView::of(e.advice)
            })
            .collect());
    }
    let rows = db::list(&mut conn, project).await?;
    Ok(rows.into_iter().map(PreemptionView::of).collect())
}

/// Removes the advised consumers whose project enforces preemption, once
/// their grace has run out, when they came through the queue: their
/// allocations and consumer go in the round's transaction, their queued
/// request becomes `preempted` (so they may be queued again at once),
/// and each removal is recorded. The count removed.
pub async fn enforce(tx: &mut sqlx::PgConnection, requeue_backoff: u64) -> Result<usize> {
    let mut removed = 0;
    let mut done: Vec<Uuid> = Vec::new();
    for advice in db::due(tx).await? {
        if done.contains(&advice.consumer_uuid) {
            continue;
        }
        // A gang is one victim: its other admitted members go with it.
        let mut whole = vec![advice.consumer_uuid];
        whole.extend(db::gang_members(tx, advice.consumer_uuid).await?);
        for consumer in whole {
            if done.contains(&consumer) {
                continue;
            }
            done.push(consumer);
            let named = AdviceRow {
                consumer_uuid: consumer,
                ..advice.clone()
            };
            if remove(tx, &named, requeue_backoff).await? {
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// Removes one advised consumer (or a member of an advised gang), records
/// it and says so; false when its owner removed it first.
async fn remove(
    tx: &mut sqlx::PgConnection,
    advice: &AdviceRow,
    requeue_backoff: u64,
) -> Result<bool> {
    use crate::db::allocations as allocs;
    let consumer = advice.consumer_uuid;
    let held = allocs::of_consumer(tx, consumer).await?;
    if !allocs::delete_consumer(tx, consumer).await? {
        // Its owner removed it first.
        crate::db::fairness::queue::release_ended(tx, &[consumer]).await?;
        return Ok(false);
    }
    let mut what: BTreeMap<Uuid, super::admission::AdmittedResources> = BTreeMap::new();
    for row in &held {
        what.entry(row.provider_uuid)
            .or_default()
            .resources
            .insert(row.resource_class.clone(), i64::from(row.used));
    }
    crate::db::fairness::queue::mark_preempted(tx, consumer).await?;
    let requeued =
        crate::db::fairness::queue::requeue_preempted(tx, consumer, requeue_backoff).await?;
    let what = serde_json::to_value(&what).unwrap_or_default();
    db::record_enforced(tx, advice, &what, requeued).await?;
    if let Some(again) = requeued {
        tracing::info!(consumer = %consumer, request = %again, "requeued: the preempted request is queued again after its backoff");
        crate::metrics::metrics().queue_requeued.inc();
    }
    tracing::info!(
        consumer = %consumer,
        project = %advice.victim_project_id,
        for_request = %advice.request_id,
        for_project = %advice.request_project_id,
        "preempted: the advised consumer's allocations were removed"
    );
    crate::metrics::metrics().preemptions_enforced.inc();
    Ok(true)
}

/// After round `round_id`: advice for the deferred requests (positions
/// in `rows` with their reasons) of projects below their guarantee, and
/// holds for them; the count of victims advised.
pub async fn advise(
    tx: &mut sqlx::PgConnection,
    view: &RoundView,
    round_id: Uuid,
    deferred: &[(usize, &str)],
    rows: &[(PendingRow, QueueItem)],
    hold_seconds: u64,
) -> Result<usize> {
    let within = db::preempting_within(tx).await?;
    let waiting = waiting_for_room(view, deferred, rows, &within);
    if waiting.is_empty() {
        db::replace_advice(tx, round_id, &[]).await?;
        crate::metrics::metrics().set_advised_by_project([]);
        return Ok(0);
    }
    let inputs = Inputs::load(tx, view, &waiting, rows, &within).await?;
    let advice = preempt::advise(
        &inputs.cluster,
        &inputs.holders,
        &inputs.victims,
        &inputs.asks,
    );
    // Class and project ids of every advised request, read once.
    let advised: Vec<&(PendingRow, QueueItem)> =
        advice.iter().map(|a| &rows[waiting[a.ask]]).collect();
    let classes = super::sorted_distinct(
        advised
            .iter()
            .flat_map(|(_, item)| item.resources.keys().cloned()),
    );
    let class_id = super::class_ids(tx, &classes).await?;
    let projects: Vec<String> = advised
        .iter()
        .map(|(row, _)| row.project_id.clone())
        .collect();
    let project_id = crate::db::consumers::ensure_projects(tx, &projects).await?;
    let mut stored = Vec::new();
    let mut holds = Vec::new();
    for (a, (row, item)) in advice.iter().zip(&advised) {
        for &v in &a.victims {
            let victim = &inputs.victim_rows[v];
            stored.push(NewAdvice {
                request_id: row.id,
                consumer_uuid: victim.0,
                victim_project_id: victim.1.clone(),
                provider_uuid: view.providers[a.provider],
            });
        }
        let amounts = item
            .resources
            .iter()
            .filter_map(|(name, n)| Some((*class_id.get(name)?, i32::try_from(*n).ok()?)))
            .collect();
        holds.push(NewHold {
            request_id: row.id,
            provider_id: view.provider_ids[a.provider],
            project_id: project_id[&row.project_id],
            amounts,
        });
    }
    db::replace_advice(tx, round_id, &stored).await?;
    db::hold(tx, &holds, hold_seconds).await?;
    let mut by_victim: HashMap<&str, i64> = HashMap::new();
    for a in &stored {
        *by_victim.entry(a.victim_project_id.as_str()).or_default() += 1;
    }
    crate::metrics::metrics().set_advised_by_project(by_victim.into_values());
    Ok(stored.len())
}

/// Indexes (into `rows`) of the requests left for want of room whose
/// project has a guarantee on one of their classes, or preempts within
/// itself (`within`).
fn waiting_for_room(
    view: &RoundView,
    deferred: &[(usize, &str)],
    rows: &[(PendingRow, QueueItem)],
    within: &[String],
) -> Vec<usize> {
    deferred
        .iter()
        .filter(|&&(_, reason)| reason == "no_capacity")
        .map(|&(at, _)| at)
        .filter(|&at| {
            let (row, item) = &rows[at];
            within.contains(&row.project_id)
                || view.guarantees.get(&row.project_id).is_some_and(|g| {
                    item.resources.keys().any(|c| {
                        view.class_ix(c)
                            .is_some_and(|ix| g.get(ix).is_some_and(|n| *n > 0))
                    })
                })
        })
        .collect()
}

/// The pure advice's inputs, with the consumers behind the victims.
struct Inputs {
    cluster: ClusterCapacity,
    holders: Vec<Holder>,
    victims: Vec<Victim>,
    asks: Vec<Ask>,
    /// (consumer, project) per victim.
    victim_rows: Vec<(Uuid, String)>,
}

impl Inputs {
    async fn load(
        tx: &mut sqlx::PgConnection,
        view: &RoundView,
        waiting: &[usize],
        rows: &[(PendingRow, QueueItem)],
        within: &[String],
    ) -> Result<Inputs> {
        let held = db::holders(tx).await?;
        let mut projects: Vec<String> = held.iter().map(|h| h.project_id.clone()).collect();
        projects.extend(waiting.iter().map(|&i| rows[i].0.project_id.clone()));
        projects.sort();
        projects.dedup();
        let weights: HashMap<String, f64> = db::weights(tx, &projects).await?.into_iter().collect();
        let project_ix: HashMap<&str, usize> = projects
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_str(), i))
            .collect();
        let mut holders: Vec<Holder> = projects
            .iter()
            .map(|p| Holder {
                weight: weights.get(p).copied().unwrap_or(1.0),
                allocated: vec![0; view.classes.len()],
                guarantees: view
                    .guarantees
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| vec![0; view.classes.len()]),
            })
            .collect();
        // Each provider's index in the round, by row id.
        let position: HashMap<i64, usize> = view
            .provider_ids
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, i))
            .collect();
        let (victims, victim_rows) = victims(view, &position, &held, &project_ix, &mut holders);
        let ids: Vec<Uuid> = waiting.iter().map(|&i| rows[i].0.id).collect();
        let held_on: HashMap<Uuid, usize> = db::held_on(tx, &ids)
            .await?
            .into_iter()
            .filter_map(|(request, provider)| Some((request, *position.get(&provider)?)))
            .collect();
        // Each gang an index of its own: its members are advised together.
        let mut gangs: Vec<Uuid> = waiting.iter().filter_map(|&i| rows[i].1.gang).collect();
        gangs.sort_unstable();
        gangs.dedup();
        let asks = waiting
            .iter()
            .map(|&i| Ask {
                held_on: held_on.get(&rows[i].0.id).copied(),
                gang: rows[i].1.gang.and_then(|g| gangs.binary_search(&g).ok()),
                within_project: within.contains(&rows[i].0.project_id),
                ..ask(view, &project_ix, i, &rows[i])
            })
            .collect();
        let cluster = ClusterCapacity {
            totals: view.totals.clone(),
            excluded: view.excluded.clone(),
            free: view.free.clone(),
        };
        Ok(Inputs {
            cluster,
            holders,
            victims,
            asks,
            victim_rows,
        })
    }
}

/// Each consumer's holding on each provider of the round as a possible
/// victim, counting what every project holds on the way.
fn victims(
    view: &RoundView,
    position: &HashMap<i64, usize>,
    held: &[HolderRow],
    project_ix: &HashMap<&str, usize>,
    holders: &mut [Holder],
) -> (Vec<Victim>, Vec<(Uuid, String)>) {
    let mut by_consumer: HashMap<(Uuid, usize), usize> = HashMap::new();
    let (mut victims, mut victim_rows) = (Vec::new(), Vec::new());
    for h in held {
        let (Some(&provider), Some(class)) =
            (position.get(&h.provider_id), view.class_ix(&h.class_name))
        else {
            continue;
        };
        let project = project_ix[h.project_id.as_str()];
        holders[project].allocated[class] += h.used;
        let v = *by_consumer
            .entry((h.consumer_uuid, provider))
            .or_insert_with(|| {
                victims.push(Victim {
                    project,
                    provider,
                    amounts: Vec::new(),
                    priority: h.priority,
                    prod: h.priority_class < 2,
                    class: i16::try_from(h.priority_class).unwrap_or(0),
                    age_rank: u64::try_from(h.consumer_id).unwrap_or(0),
                    removable: h.removable,
                });
                victim_rows.push((h.consumer_uuid, h.project_id.clone()));
                victims.len() - 1
            });
        victims[v].amounts.push((class, h.used));
    }
    (victims, victim_rows)
}

/// A waiting request (index `i` of the round) as the advice sees it.
fn ask(
    view: &RoundView,
    project_ix: &HashMap<&str, usize>,
    i: usize,
    (row, item): &(PendingRow, QueueItem),
) -> Ask {
    use super::round_request::PriorityClass;
    Ask {
        class: item.priority_class.map_or(0, PriorityClass::code),
        priority: i64::from(item.priority.unwrap_or(0)),
        within_project: false,
        project: project_ix[row.project_id.as_str()],
        resources: item
            .resources
            .iter()
            .filter_map(|(c, n)| Some((view.class_ix(c)?, *n)))
            .collect(),
        allowed: view.allowed[i].as_ref().map(|a| a.to_vec()),
        batch: matches!(
            item.priority_class,
            Some(PriorityClass::Batch | PriorityClass::Free)
        ),
        held_on: None,
        gang: None,
    }
}
