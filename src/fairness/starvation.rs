//! Room reserved for the longest-waiting request
//! (`--queue-reserve-after-seconds`). Without it a request larger than
//! what frees at a time waits for ever behind smaller work that takes each
//! unit as it frees, whatever its project's share: DRF serves the project
//! first, but its request fits nowhere, and the next project's small one
//! does. YuniKorn reserves a node for such an ask; Slurm's backfill never
//! delays its first job. Here the request gets a hold, as preemption
//! advice's: added to its project's reservation on the provider closest
//! to fitting it, so that what frees there is its own and no one else's,
//! growing until it fits. One such hold at a time keeps what idles
//! meanwhile to one request's size.

use super::admission::RoundView;
use super::queue::QueueItem;
use crate::db::fairness::preemptions::{self as db, NewHold};
use crate::db::fairness::queue::PendingRow;
use crate::error::Result;

/// After a round: a hold for the most entitled request waiting for room
/// (reason `no_capacity` past `reserve_after_seconds`, not in a gang):
/// its project's weighted share the lowest, then the oldest; unless room
/// is held for some pending request already. The hold lasts
/// `hold_seconds`.
pub async fn reserve(
    tx: &mut sqlx::PgConnection,
    view: &RoundView,
    deferred: &[(usize, &str)],
    rows: &[(PendingRow, QueueItem)],
    reserve_after_seconds: u64,
    hold_seconds: u64,
) -> Result<()> {
    let wait = chrono::Duration::seconds(i64::try_from(reserve_after_seconds).unwrap_or(i64::MAX));
    // The most entitled: of the project the sorter serves first (the
    // lowest weighted share), then the oldest (deferred requests are in
    // submission order, and the fold keeps the first of equals).
    let share = |at: usize| {
        let project = &rows[at].0.project_id;
        view.shares.get(project).copied().unwrap_or(0.0)
    };
    let starving = deferred
        .iter()
        .filter(|&&(_, reason)| reason == "no_capacity")
        .map(|&(at, _)| at)
        .filter(|&at| {
            let (row, item) = &rows[at];
            item.gang.is_none() && row.now - row.submitted_at >= wait
        })
        .filter_map(|at| closest_provider(view, at, &rows[at].1).map(|p| (at, p)))
        .fold(None, |best: Option<(usize, usize)>, (at, p)| match best {
            Some((b, _)) if share(b) <= share(at) => best,
            _ => Some((at, p)),
        });
    let Some((at, provider)) = starving else {
        return Ok(());
    };
    if db::any_held(tx).await? {
        return Ok(());
    }
    let (row, item) = &rows[at];
    let classes: Vec<String> = item.resources.keys().cloned().collect();
    let class_id = super::class_ids(tx, &classes).await?;
    let project_id =
        crate::db::consumers::ensure_projects(tx, std::slice::from_ref(&row.project_id)).await?;
    let Some(&project_id) = project_id.get(&row.project_id) else {
        return Ok(());
    };
    let amounts = item
        .resources
        .iter()
        .filter_map(|(name, n)| Some((*class_id.get(name)?, i32::try_from(*n).ok()?)))
        .collect();
    let hold = NewHold {
        request_id: row.id,
        provider_id: view.provider_ids[provider],
        project_id,
        amounts,
    };
    db::hold(tx, &[hold], hold_seconds).await?;
    Ok(())
}

/// The provider, among those request `at` may use and that could hold it
/// empty, with the most of it free now (the sum over its classes of the
/// part free); the round's order breaks ties.
fn closest_provider(view: &RoundView, at: usize, item: &QueueItem) -> Option<usize> {
    let need: Vec<(usize, i64)> = item
        .resources
        .iter()
        .map(|(c, n)| view.class_ix(c).map(|ix| (ix, *n)))
        .collect::<Option<_>>()?;
    let everyone: Vec<usize>;
    let allowed: &[usize] = match view.allowed.get(at)? {
        Some(list) => list,
        None => {
            everyone = (0..view.providers.len()).collect();
            &everyone
        }
    };
    let part_free = |p: usize| -> f64 {
        need.iter()
            .map(|&(c, n)| view.free[p][c].clamp(0, n) as f64 / n as f64)
            .sum()
    };
    allowed
        .iter()
        .copied()
        .filter(|&p| need.iter().all(|&(c, n)| view.largest[p][c] >= n))
        .fold(None, |best: Option<(usize, f64)>, p| {
            let score = part_free(p);
            match best {
                Some((_, s)) if s >= score => best,
                _ => Some((p, score)),
            }
        })
        .map(|(p, _)| p)
}
