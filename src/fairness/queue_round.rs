//! Rounds over the fair queue: the same §C.2 round as `POST /admissions`
//! (`admission::round_in`: the same placement, limits, reservations and
//! one-transaction commit, stored and replayable from its seed) over every
//! pending request in submission order. Who runs them and when is
//! `queue_leader.rs`; the long polls they wake, `long_polls.rs`.

use super::admission::{self, ms, AdmissionItem, AdmissionPost, RoundSettings};
use super::queue::QueueItem;
use crate::candidates::engine::ProviderSnapshots;
use crate::db::fairness::queue::{self as db, PendingRow};
use crate::db::Pool;
use crate::error::{with_retries, Error, Result};
use std::collections::BTreeSet;
use std::time::Instant;
use uuid::Uuid;

/// What one round did.
#[derive(Debug, Clone, Default)]
pub struct RoundOutcome {
    /// Requests admitted.
    pub admitted: usize,
    /// Requests left pending.
    pub deferred: usize,
    /// Consumers advised for removal (preemption advice).
    pub advised: usize,
    /// Advised consumers the service removed (enforced preemption).
    pub preempted: usize,
}

/// How room is held for waiting requests.
#[derive(Debug, Clone, Copy)]
pub struct Holds {
    /// How long a hold lasts (`--preemption-hold-seconds`).
    pub seconds: u64,
    /// How long a request waits for room before some is reserved for it
    /// (`--queue-reserve-after-seconds`; 0: never).
    pub reserve_after_seconds: u64,
    /// The first backoff of a request queued again after its consumer was
    /// preempted (`--queue-requeue-backoff-seconds`).
    pub requeue_backoff_seconds: u64,
}

/// One round over the stored queue, committed, with its preemption
/// advice and the room it holds (`holds`).
pub async fn round(
    pool: &Pool,
    snapshots: &dyn ProviderSnapshots,
    settings: &RoundSettings,
    holds: Holds,
) -> Result<RoundOutcome> {
    with_retries(settings.retries, || async {
        let started = Instant::now();
        // Before the transaction: a round never holds two connections.
        let cached = super::round_providers::refresh(pool, snapshots).await?;
        let refreshed_ms = ms(started);
        let mut tx = pool.begin().await?;
        crate::db::fairness::lock_admissions(&mut tx).await?;
        let expired = db::expire(&mut tx).await?;
        let (taken, rows): (Vec<PendingRow>, Vec<PendingRow>) = db::pending_seen(&mut tx)
            .await?
            .into_iter()
            .partition(|r| r.taken);
        let taken: Vec<Uuid> = taken.iter().map(|r| r.id).collect();
        let left = expired + db::cancel_undecidable(&mut tx, &taken, "consumer_exists").await?;
        let read_ms = ms(started);
        let rows = match rows.is_empty() {
            true => Vec::new(),
            false => drop_invalid(&mut tx, rows).await?,
        };
        let valid_ms = ms(started);
        let mut outcome = RoundOutcome::default();
        if !rows.is_empty() {
            outcome = decide(&mut tx, cached, settings, &rows, holds).await?;
        }
        let decided_ms = ms(started);
        // Holds end with their request (admitted, cancelled, expired) or
        // their time; the ones just made belong to pending requests.
        crate::db::fairness::preemptions::release(&mut tx).await?;
        if left > 0 || outcome.admitted > 0 {
            db::announce_decided(&mut tx).await?;
        }
        tx.commit().await.map_err(Error::commit_failed)?;
        if !rows.is_empty() {
            tracing::debug!(
                pending = rows.len(),
                refreshed_ms,
                read_ms,
                valid_ms,
                decided_ms,
                committed_ms = ms(started),
                "queue round phases"
            );
        }
        let m = crate::metrics::metrics();
        m.queue_rounds.inc();
        m.queue_round_duration
            .observe(started.elapsed().as_secs_f64());
        Ok(outcome)
    })
    .await
}

/// Runs the admission round over `rows` and records each decision.
async fn decide(
    tx: &mut sqlx::PgConnection,
    cached: super::round_providers::Cached,
    settings: &RoundSettings,
    rows: &[(PendingRow, QueueItem)],
    holds: Holds,
) -> Result<RoundOutcome> {
    let body = AdmissionPost {
        dry_run: false,
        seed: None,
        requests: rows
            .iter()
            .map(|(row, item)| as_admission(row, item))
            .collect(),
    };
    let started = Instant::now();
    let (answer, view) = admission::round_in(tx, cached, settings, &body, rand::random()).await?;
    let round_ms = ms(started);
    let sorted = Sorted::of(&answer, rows);
    let deferred: Vec<(&PendingRow, &str)> = sorted
        .deferred
        .iter()
        .map(|&(at, reason)| (&rows[at].0, reason))
        .collect();
    let reasons = reason_changes(&deferred);
    if !sorted.admitted.is_empty() || settings.record_idle {
        let ids = QueueRoundRequest {
            queue_requests: rows.iter().map(|(row, _)| row.id).collect(),
        };
        let request = serde_json::to_string(&ids).unwrap_or_default();
        let result = QueueRoundResult {
            round_id: answer.round_id,
            seed: answer.seed,
            decisions: sorted.admitted_decisions,
            deferred: deferred_runs(&sorted.deferred),
            held_back_for_headroom: &answer.held_back_for_headroom,
        };
        admission::record(tx, &answer, &request, &result).await?;
    }
    db::mark_admitted(tx, answer.round_id, &sorted.admitted, &sorted.placed).await?;
    count_by_project(&view, rows, &sorted.admitted);
    db::record_reasons(tx, &reasons).await?;
    let marked_ms = ms(started);
    renew_waiting(tx, &sorted.deferred, rows, holds.seconds).await?;
    let advised = super::preemption::advise(
        tx,
        &view,
        answer.round_id,
        &sorted.deferred,
        rows,
        holds.seconds,
    )
    .await?;
    let preempted = super::preemption::enforce(tx, holds.requeue_backoff_seconds).await?;
    if holds.reserve_after_seconds > 0 {
        super::starvation::reserve(
            tx,
            &view,
            &sorted.deferred,
            rows,
            holds.reserve_after_seconds,
            holds.seconds,
        )
        .await?;
    }
    tracing::debug!(
        round_ms,
        marked_ms,
        advised_ms = ms(started),
        "queue round decisions"
    );
    Ok(RoundOutcome {
        admitted: sorted.admitted.len(),
        deferred: sorted.deferred.len(),
        advised,
        preempted,
    })
}

/// Renews the holds of the requests the round left waiting for room
/// (`no_capacity`): a hold lives as long as its request waits.
async fn renew_waiting(
    tx: &mut sqlx::PgConnection,
    deferred: &[(usize, &str)],
    rows: &[(PendingRow, QueueItem)],
    seconds: u64,
) -> Result<()> {
    let waiting: std::collections::HashSet<Uuid> = deferred
        .iter()
        .filter(|&&(_, reason)| reason == "no_capacity")
        .map(|&(at, _)| rows[at].0.id)
        .collect();
    crate::db::fairness::preemptions::renew(tx, &waiting, seconds).await?;
    Ok(())
}

/// The per-project gauges of a round: shares after it, and what it
/// admitted when it admitted any (by rank; `metrics` names no project).
fn count_by_project(
    view: &admission::RoundView,
    rows: &[(PendingRow, QueueItem)],
    admitted: &[Uuid],
) {
    let m = crate::metrics::metrics();
    m.set_share_by_project(view.shares.values().copied());
    if admitted.is_empty() {
        return;
    }
    let admitted: BTreeSet<Uuid> = admitted.iter().copied().collect();
    let mut by_project: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for (row, _) in rows.iter().filter(|(row, _)| admitted.contains(&row.id)) {
        *by_project.entry(row.project_id.as_str()).or_default() += 1;
    }
    m.set_admitted_by_project(by_project.into_values());
}

/// A round's decisions by the queued request they decide.
struct Sorted<'a> {
    /// Admitted requests, in admission order, and where each went.
    admitted: Vec<Uuid>,
    placed: Vec<serde_json::Value>,
    admitted_decisions: Vec<&'a admission::AdmissionDecision>,
    /// Deferred requests (positions in the round's request list) with
    /// their reasons, in request order.
    deferred: Vec<(usize, &'a str)>,
}

impl<'a> Sorted<'a> {
    fn of(answer: &'a admission::AdmissionAnswer, rows: &'a [(PendingRow, QueueItem)]) -> Self {
        let position: std::collections::HashMap<Uuid, usize> = rows
            .iter()
            .enumerate()
            .map(|(at, (r, _))| (r.id, at))
            .collect();
        let mut sorted = Sorted {
            admitted: Vec::new(),
            placed: Vec::new(),
            admitted_decisions: Vec::new(),
            deferred: Vec::new(),
        };
        for d in &answer.decisions {
            let Some(&at) = d
                .request
                .parse::<Uuid>()
                .ok()
                .and_then(|id| position.get(&id))
            else {
                continue;
            };
            let row = &rows[at].0;
            match &d.allocations {
                Some(a) => {
                    sorted.admitted.push(row.id);
                    sorted
                        .placed
                        .push(serde_json::to_value(a).unwrap_or_default());
                    sorted.admitted_decisions.push(d);
                    let waited = (row.now - row.submitted_at).as_seconds_f64().max(0.0);
                    crate::metrics::metrics().queue_wait.observe(waited);
                }
                None => {
                    let reason = d.reason.as_deref().unwrap_or("no_capacity");
                    sorted.deferred.push((at, reason));
                }
            }
        }
        sorted
    }
}

/// What the round's reasons change: the most common one is recorded once
/// for every request the round saw; the others are stored per request,
/// and only where they differ from what is stored.
fn reason_changes<'a>(deferred: &[(&PendingRow, &'a str)]) -> db::ReasonChanges<'a> {
    let common = most_common(deferred.iter().map(|(_, reason)| *reason));
    let mut changes = db::ReasonChanges {
        common,
        ..Default::default()
    };
    for &(row, reason) in deferred {
        let own = row.own_reason.as_deref();
        if Some(reason) == common {
            if own.is_some() {
                changes.cleared.push(row.seq);
            }
            continue;
        }
        let into = match own {
            Some(last) if last == reason => continue,
            Some(_) => &mut changes.changed,
            None => &mut changes.first,
        };
        into.0.push(row.seq);
        into.1.push(reason);
    }
    changes
}

/// The reason given most often (of equals, the first by name); none of none.
fn most_common<'a>(reasons: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(reason, _)| reason)
}

/// What a queue round records as its request: the ids of the queued
/// requests it decided over, in its order. Their bodies are in
/// `queue_requests`, kept at least as long as the round (a request is
/// decided at or after every round that saw it, and both are pruned by
/// the same retention), so the round replays as `POST /admissions` with
/// those bodies and the recorded seed. An 80,000-request round stored
/// 20 MB of bodies again before.
#[derive(serde::Serialize)]
struct QueueRoundRequest {
    queue_requests: Vec<Uuid>,
}

/// What a queue round stores as its answer: `POST /admissions`' answer
/// with the deferred decisions as runs of one reason over positions in
/// the round's request list (`QueueRoundRequest`), and the admitted ones
/// in full, in admission order. Stored one by one, the deferred decisions
/// of a round over 80,000 requests were 7 MB, and 0.2 s of the round.
#[derive(serde::Serialize)]
struct QueueRoundResult<'a> {
    round_id: Uuid,
    seed: u32,
    decisions: Vec<&'a admission::AdmissionDecision>,
    deferred: Vec<DeferredRun<'a>>,
    held_back_for_headroom: &'a super::Amounts,
}

/// `count` requests deferred for `reason`, from position `from` on.
#[derive(serde::Serialize, Debug, PartialEq)]
struct DeferredRun<'a> {
    from: usize,
    count: usize,
    reason: &'a str,
}

/// Runs of (position, reason), positions ascending: consecutive positions
/// with the same reason make one run.
fn deferred_runs<'a>(deferred: &[(usize, &'a str)]) -> Vec<DeferredRun<'a>> {
    let mut runs: Vec<DeferredRun<'a>> = Vec::new();
    for &(at, reason) in deferred {
        match runs.last_mut() {
            Some(run) if run.reason == reason && run.from + run.count == at => run.count += 1,
            _ => runs.push(DeferredRun {
                from: at,
                count: 1,
                reason,
            }),
        }
    }
    runs
}

fn as_admission(row: &PendingRow, item: &QueueItem) -> AdmissionItem {
    AdmissionItem {
        id: row.id.to_string(),
        consumer_uuid: row.consumer_uuid,
        project_id: row.project_id.clone(),
        user_id: row.user_id.clone(),
        resources: item.resources.clone(),
        required: item.required.clone(),
        member_of: item.member_of.clone(),
        priority_class: item.priority_class,
        consumer_type: item.consumer_type.clone(),
        priority: item.priority,
        gang: item.gang,
    }
}

/// The stored requests as items; those naming a class or trait deleted
/// since they were queued leave as `cancelled` (reason `invalid`), so one
/// cannot stop every round.
async fn drop_invalid(
    tx: &mut sqlx::PgConnection,
    rows: Vec<PendingRow>,
) -> Result<Vec<(PendingRow, QueueItem)>> {
    let classes: BTreeSet<String> = crate::db::classes::list(tx)
        .await?
        .into_iter()
        .map(|c| c.name)
        .collect();
    // Off the async workers: 80,000 bodies take about 0.3 s to parse, and
    // a worker held that long stalls the requests queued behind it.
    let items: Vec<(PendingRow, Option<QueueItem>)> = tokio::task::spawn_blocking(move || {
        rows.into_iter()
            .map(|row| {
                let item = serde_json::from_str::<QueueItem>(&row.request).ok();
                (row, item)
            })
            .collect()
    })
    .await
    .map_err(|e| Error::internal(format!("parsing the queue's requests failed: {e}")))?;
    let names = super::trait_names(
        items
            .iter()
            .flat_map(|(_, i)| i.iter().flat_map(|i| &i.required)),
    );
    let missing: BTreeSet<String> = crate::db::traits::resolve(tx, &names)
        .await?
        .missing
        .into_iter()
        .collect();
    let (mut valid, mut invalid) = (Vec::new(), Vec::new());
    for (row, item) in items {
        match item {
            Some(i)
                if i.resources.keys().all(|c| classes.contains(c))
                    && i.required
                        .iter()
                        .all(|t| !missing.contains(t.trim_start_matches('!'))) =>
            {
                valid.push((row, i))
            }
            _ => invalid.push(row.id),
        }
    }
    db::cancel_undecidable(tx, &invalid, "invalid").await?;
    Ok(valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, own: Option<&str>) -> PendingRow {
        let now = chrono::Utc::now();
        PendingRow {
            id: Uuid::new_v4(),
            seq,
            consumer_uuid: Uuid::new_v4(),
            project_id: "p".into(),
            user_id: "u".into(),
            request: "{}".into(),
            submitted_at: now,
            own_reason: own.map(str::to_string),
            now,
            taken: false,
        }
    }

    #[test]
    fn deferred_decisions_are_stored_as_runs_of_one_reason() {
        let deferred = [
            (0, "no_capacity"),
            (1, "no_capacity"),
            (3, "no_capacity"), // 2 was admitted: a new run
            (4, "not_reached"),
            (5, "not_reached"),
        ];
        let run = |from, count, reason| DeferredRun {
            from,
            count,
            reason,
        };
        assert_eq!(
            deferred_runs(&deferred),
            vec![
                run(0, 2, "no_capacity"),
                run(3, 1, "no_capacity"),
                run(4, 2, "not_reached")
            ]
        );
        assert!(deferred_runs(&[]).is_empty());
    }

    #[test]
    fn the_most_common_reason_wins_and_ties_go_to_the_first_name() {
        let most = |r: &[&'static str]| most_common(r.iter().copied());
        assert_eq!(most(&[]), None);
        assert_eq!(
            most(&["quota_limit", "no_capacity", "quota_limit"]),
            Some("quota_limit")
        );
        assert_eq!(most(&["quota_limit", "no_capacity"]), Some("no_capacity"));
    }

    #[test]
    fn only_reasons_that_differ_from_the_common_one_are_stored_and_only_when_changed() {
        let rows = [
            row(1, None),                // common now, none stored: nothing
            row(2, Some("quota_limit")), // common now: its own row goes
            row(3, None),                // differs, none stored: first
            row(4, Some("headroom")),    // differs, stored the same: nothing
            row(5, Some("declined")),    // differs from what is stored: changed
            row(6, None),
        ];
        let deferred = [
            (&rows[0], "no_capacity"),
            (&rows[1], "no_capacity"),
            (&rows[2], "quota_limit"),
            (&rows[3], "headroom"),
            (&rows[4], "headroom"),
            (&rows[5], "no_capacity"),
        ];
        let changes = reason_changes(&deferred);
        assert_eq!(changes.common, Some("no_capacity"));
        assert_eq!(changes.cleared, vec![2]);
        assert_eq!(changes.first, (vec![3], vec!["quota_limit"]));
        assert_eq!(changes.changed, (vec![5], vec!["headroom"]));
        let none = reason_changes(&[]);
        assert_eq!(none.common, None);
        assert!(none.first.0.is_empty() && none.changed.0.is_empty() && none.cleared.is_empty());
    }
}
