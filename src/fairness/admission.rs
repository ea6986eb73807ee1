//! `POST /admissions`: one DRF admission round over a set of requests,
//! serialised across processes by an advisory lock, with every admitted
//! allocation committed in one transaction through the shared allocation
//! write (so limits, reservations and capacity are checked again there).
//! `dry_run` decides without writing. Each committed round is stored in
//! `admission_rounds` with its seed, so it can be replayed.

use super::round_inputs::{load, Loaded};
use super::round_providers::{self as providers, Cached};
use super::Amounts;
use crate::candidates::engine::ProviderSnapshots;
use crate::db::allocations::{self as alloc_db, AllocError};
use crate::db::fairness as db;
use crate::db::Pool;
use crate::error::{with_retries, Error, Result};
use crate::sched::admission::{self as round, Outcome, Reason, Stage};
use crate::types::{AllocationsByProvider, ConsumerWrite, GenerationCheck};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use utoipa::ToSchema;
use uuid::Uuid;

pub use super::round_request::{AdmissionItem, AdmissionPost, PriorityClass};

/// One provider's share of an admitted request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmittedResources {
    /// Units by class.
    pub resources: Amounts,
}

/// One decision of the round.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionDecision {
    /// The request's id.
    pub request: String,
    /// `admitted` or `deferred`.
    pub decision: String,
    /// `guarantee` or `fair` (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Provider uuid → resources (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocations: Option<BTreeMap<Uuid, AdmittedResources>>,
    /// True when part came from the project's reservations (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_reservation: Option<bool>,
    /// The project's weighted dominant share before (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominant_share_before: Option<f64>,
    /// And after (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominant_share_after: Option<f64>,
    /// no_capacity, quota_limit, headroom, declined or not_reached (deferred only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The round's answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionAnswer {
    /// The round's id (its audit row when committed).
    pub round_id: Uuid,
    /// The shuffle's seed: the same seed over the same data decides the same.
    pub seed: u32,
    /// True when nothing was written.
    pub dry_run: bool,
    /// Admitted in admission order, then deferred in request order.
    pub decisions: Vec<AdmissionDecision>,
    /// Free capacity left idle for unsatisfied guarantees, by class.
    pub held_back_for_headroom: Amounts,
}

/// What a round saw and left, for the fair queue's preemption advice:
/// the pool in the round's order and each request's allowed providers.
#[derive(Debug, Clone, Default)]
pub struct RoundView {
    /// Class names by index.
    pub classes: Vec<String>,
    /// DRF denominators by class.
    pub totals: Vec<f64>,
    /// Classes that do not count towards shares.
    pub excluded: Vec<bool>,
    /// Provider uuids in the round's order.
    pub providers: Vec<Uuid>,
    /// Provider row ids in the same order.
    pub provider_ids: Vec<i64>,
    /// Free units per provider and class after the round's admissions.
    pub free: Vec<Vec<i64>>,
    /// The largest single allocation per provider and class: its
    /// capacity, capped by `max_unit` (0 without inventory).
    pub largest: Vec<Vec<i64>>,
    /// Per request (in the round's order): the providers it may use.
    pub allowed: Vec<Option<std::sync::Arc<[usize]>>>,
    /// Guarantees by class of the round's projects (external id).
    pub guarantees: std::collections::HashMap<String, Vec<i64>>,
    /// Each project's own weighted dominant share after the round (what
    /// its consumers hold, with what it admitted), by external id.
    pub shares: std::collections::HashMap<String, f64>,
}

impl RoundView {
    /// The index of a class, if the round knows it.
    pub fn class_ix(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c == name)
    }

    fn of(loaded: &Loaded, result: &round::Admitted) -> RoundView {
        let r = &loaded.round;
        // A figure of every inventory, by provider and class (0 without).
        let per_stock = |f: fn(&round::Stock) -> i64| -> Vec<Vec<i64>> {
            r.providers
                .iter()
                .map(|p| p.stock.iter().map(|s| s.as_ref().map_or(0, f)).collect())
                .collect()
        };
        let mut free = per_stock(|s| ((s.capacity - s.used as f64).floor() as i64).max(0));
        let largest = per_stock(|s| (s.capacity.floor() as i64).min(s.max_unit).max(0));
        let mut allocated: Vec<Vec<i64>> = r.projects.iter().map(|p| p.allocated.clone()).collect();
        for d in &result.decisions {
            if let Outcome::Admitted { provider, .. } = d.outcome {
                let request = &r.requests[d.request];
                for &(c, n) in &request.resources {
                    free[provider][c] -= n;
                    allocated[request.project][c] += n;
                }
            }
        }
        let shares = loaded
            .projects
            .iter()
            .zip(&r.projects)
            .zip(&allocated)
            .map(|(((name, _), p), alloc)| {
                (name.clone(), round::dominant_share(r, alloc, p.weight))
            })
            .collect();
        RoundView {
            classes: loaded.classes.clone(),
            totals: r.totals.clone(),
            excluded: r.excluded.clone(),
            providers: loaded.providers.clone(),
            provider_ids: loaded.provider_ids.clone(),
            free,
            largest,
            allowed: r.requests.iter().map(|q| q.allowed.clone()).collect(),
            guarantees: loaded
                .projects
                .iter()
                .zip(&r.projects)
                .map(|((name, _), p)| (name.clone(), p.guarantees.clone()))
                .collect(),
            shares,
        }
    }
}

/// Limits of one round that the service sets.
#[derive(Debug, Clone)]
pub struct RoundSettings {
    /// Classes that do not count towards shares.
    pub excluded: Vec<String>,
    /// Provider checks before the rest is `not_reached`.
    pub max_steps: u64,
    /// Retries of a round that lost a database race.
    pub retries: u32,
    /// Store rounds that admitted nothing too (`POST /admissions` does; the
    /// fair queue's periodic rounds over requests that cannot fit do not,
    /// or every second would store the whole queue's ids).
    pub record_idle: bool,
}

impl RoundSettings {
    /// The service's settings for a round.
    pub fn of(settings: &crate::config::Settings) -> RoundSettings {
        RoundSettings {
            excluded: settings.fairness_excluded_resource_classes.clone(),
            max_steps: match settings.admission_max_steps {
                0 => u64::MAX,
                n => n,
            },
            retries: settings.allocation_conflict_retry_count,
            record_idle: true,
        }
    }
}

/// Admission rounds as one process runs them, with what they need: the
/// pool, the provider data as a transaction sees it, and the round's
/// settings (`AppState::admissions`).
pub struct Admissions<'a> {
    /// The database.
    pub pool: &'a Pool,
    /// The providers rounds place on.
    pub snapshots: &'a dyn ProviderSnapshots,
    /// Step budget, retries and what a round records.
    pub settings: RoundSettings,
}

impl Admissions<'_> {
    /// Runs one round (see [`run`]).
    pub async fn run(&self, body: AdmissionPost) -> Result<AdmissionAnswer> {
        run(self.pool, self.snapshots, &self.settings, body).await
    }
}

/// Runs one round and commits it (unless `dry_run`), placing on the
/// providers of this process's candidate snapshot.
async fn run(
    pool: &Pool,
    snapshots: &dyn ProviderSnapshots,
    settings: &RoundSettings,
    body: AdmissionPost,
) -> Result<AdmissionAnswer> {
    check_batch(&body)?;
    let seed = body.seed.unwrap_or_else(rand::random);
    with_retries(settings.retries, || async {
        let started = std::time::Instant::now();
        let cached = providers::refresh(pool, snapshots).await?;
        let mut tx = pool.begin().await?;
        db::lock_admissions(&mut tx).await?;
        refuse_existing(&mut tx, &body).await?;
        let (answer, _) = round_in(&mut tx, cached, settings, &body, seed).await?;
        if body.dry_run {
            tx.rollback().await?;
        } else {
            let admitted = answer.decisions.iter().any(|d| d.allocations.is_some());
            if admitted || settings.record_idle {
                let request = serde_json::to_string(&body).unwrap_or_default();
                record(&mut tx, &answer, &request, &answer).await?;
            }
            tx.commit().await.map_err(Error::commit_failed)?;
        }
        tracing::info!(
            requests = body.requests.len(),
            committed_ms = ms(started),
            "admission round"
        );
        Ok(answer)
    })
    .await
}

/// One round inside the caller's transaction: decides, and (unless
/// `dry_run`) writes the admitted allocations. The caller records the
/// round ([`record`]) and commits or rolls back; the fair queue's rounds
/// add their own rows to the same transaction, and read what it left in
/// the view.
/// The caller holds the admissions lock (`db::lock_admissions`) in `tx`
/// and has made sure no request's consumer exists (`POST /admissions`
/// refuses the round, the fair queue cancels those requests);
/// `cached` is the provider snapshot refreshed before `tx` opened
/// (`pool::refresh`).
pub async fn round_in(
    tx: &mut sqlx::PgConnection,
    cached: Cached,
    settings: &RoundSettings,
    body: &AdmissionPost,
    seed: u32,
) -> Result<(AdmissionAnswer, RoundView)> {
    let started = std::time::Instant::now();
    let snap = providers::as_of_now(tx, cached).await?;
    let loaded = load(
        tx,
        &snap,
        &body.requests,
        seed,
        &settings.excluded,
        settings.max_steps,
    )
    .await?;
    let loaded_ms = ms(started);
    let (loaded, result) = tokio::task::spawn_blocking(move || {
        let result = round::admit(&loaded.round);
        (loaded, result)
    })
    .await
    .map_err(|e| Error::internal(format!("admission round failed: {e}")))?;
    let decided_ms = ms(started);
    let answer = answer(body, &loaded, &result, seed);
    let view = RoundView::of(&loaded, &result);
    if body.dry_run {
        return Ok((answer, view));
    }
    commit(tx, body, &loaded, &result).await?;
    tracing::debug!(
        requests = body.requests.len(),
        steps = result.steps,
        loaded_ms,
        decided_ms,
        written_ms = ms(started),
        "admission round decided"
    );
    Ok((answer, view))
}

/// Stores a committed round with its seed for audit and replay:
/// `request` is what it decided over (`POST /admissions`' body, or the
/// fair queue's request ids), `result` its answer (in full, or the fair
/// queue's compact form).
pub async fn record(
    tx: &mut sqlx::PgConnection,
    answer: &AdmissionAnswer,
    request: &str,
    result: &impl Serialize,
) -> Result<()> {
    let recorded = serde_json::to_string(result).unwrap_or_default();
    let seed = i64::from(answer.seed);
    db::record_round(tx, answer.round_id, seed, request, &recorded).await?;
    Ok(())
}

/// Milliseconds since `since`, for the rounds' debug lines.
pub(super) fn ms(since: std::time::Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// 400 for duplicate request ids or consumers.
pub fn check_batch(body: &AdmissionPost) -> Result<()> {
    let mut ids = BTreeSet::new();
    let mut consumers = BTreeSet::new();
    for r in &body.requests {
        if !ids.insert(&r.id) {
            return Err(Error::invalid(format!(
                "Request id {} appears twice.",
                r.id
            )));
        }
        if !consumers.insert(r.consumer_uuid) {
            return Err(Error::invalid(format!(
                "Consumer {} appears in two requests.",
                r.consumer_uuid
            )));
        }
    }
    Ok(())
}

/// 409 when a request names a consumer that exists: admissions create
/// consumers, they never replace allocations.
async fn refuse_existing(tx: &mut sqlx::PgConnection, body: &AdmissionPost) -> Result<()> {
    let uuids: Vec<Uuid> = body.requests.iter().map(|r| r.consumer_uuid).collect();
    match db::existing_consumers(tx, &uuids).await?.first() {
        None => Ok(()),
        Some(c) => Err(Error::conflict(format!(
            "consumer generation conflict - consumer {c} already exists: an admission creates new consumers."
        ))
        .code(crate::error::codes::CONCURRENT_UPDATE)),
    }
}

/// Writes the admitted allocations and bumps allocation counts.
async fn commit(
    tx: &mut sqlx::PgConnection,
    body: &AdmissionPost,
    loaded: &Loaded,
    result: &round::Admitted,
) -> Result<()> {
    let mut writes = Vec::new();
    let mut counts: BTreeMap<i32, i64> = BTreeMap::new();
    for d in &result.decisions {
        let Outcome::Admitted { provider, .. } = d.outcome else {
            continue;
        };
        let item = &body.requests[d.request];
        let project = loaded.round.requests[d.request].project;
        *counts.entry(loaded.projects[project].1).or_default() += 1;
        writes.push(ConsumerWrite {
            consumer: item.consumer_uuid,
            project_id: item.project_id.clone(),
            user_id: item.user_id.clone(),
            consumer_type: item.consumer_type.clone(),
            generation: GenerationCheck::New,
            allocations: AllocationsByProvider::from([(
                loaded.providers[provider],
                item.resources.clone().into_iter().collect(),
            )]),
            unparsed_provider: None,
        });
    }
    if writes.is_empty() {
        return Ok(());
    }
    alloc_db::write(tx, &writes).await.map_err(|e| {
        // A plain write between the round's reads and this one took what
        // the round planned to use: decide again on fresh data.
        let replan = matches!(
            e,
            AllocError::Capacity(..) | AllocError::Reserved(..) | AllocError::Quota { .. }
        );
        let err = e.into_error(None);
        match replan {
            true => err.lost_race(),
            false => err,
        }
    })?;
    let counts: Vec<(i32, i64)> = counts.into_iter().collect();
    db::add_allocation_counts(tx, &counts).await?;
    Ok(())
}

fn answer(
    body: &AdmissionPost,
    loaded: &Loaded,
    result: &round::Admitted,
    seed: u32,
) -> AdmissionAnswer {
    let decisions = result
        .decisions
        .iter()
        .map(|d| decision(&body.requests[d.request], &d.outcome, loaded))
        .collect();
    AdmissionAnswer {
        round_id: Uuid::new_v4(),
        seed,
        dry_run: body.dry_run,
        decisions,
        held_back_for_headroom: loaded
            .classes
            .iter()
            .zip(&result.held_back_for_headroom)
            .filter(|(_, n)| **n > 0)
            .map(|(c, n)| (c.clone(), *n))
            .collect(),
    }
}

fn decision(item: &AdmissionItem, outcome: &Outcome, loaded: &Loaded) -> AdmissionDecision {
    let mut d = AdmissionDecision {
        request: item.id.clone(),
        decision: "deferred".into(),
        stage: None,
        allocations: None,
        from_reservation: None,
        dominant_share_before: None,
        dominant_share_after: None,
        reason: None,
    };
    match outcome {
        Outcome::Admitted {
            stage,
            provider,
            from_reservation,
            share_before,
            share_after,
        } => {
            d.decision = "admitted".into();
            d.stage = Some(match stage {
                Stage::Guarantee => "guarantee".into(),
                Stage::Fair => "fair".into(),
            });
            let resources = AdmittedResources {
                resources: item.resources.clone(),
            };
            d.allocations = Some(BTreeMap::from([(loaded.providers[*provider], resources)]));
            d.from_reservation = Some(*from_reservation);
            d.dominant_share_before = Some(*share_before);
            d.dominant_share_after = Some(*share_after);
        }
        Outcome::Deferred(reason) => {
            d.reason = Some(
                match reason {
                    Reason::NoCapacity => "no_capacity",
                    Reason::Declined => "declined",
                    Reason::QuotaLimit => "quota_limit",
                    Reason::Headroom => "headroom",
                    Reason::NotReached => "not_reached",
                    Reason::NeverFits => "never_fits",
                }
                .into(),
            );
        }
    }
    d
}
