//! Room reserved for the longest-waiting request
//! (`--queue-reserve-after-seconds`). Without it a request larger than
//! what frees at a time waits for ever behind smaller work that takes each
//! unit as it frees, whatever its project's share: DRF serves the project
//! first, but its request fits nowhere, and the next project's small one
//! does. YuniKorn reserves a node for such an ask; Slurm's backfill never
//! delays its first job. Here the request gets a hold, as preemption
//! advice's: added to its project's reservation on the provider closest
//! to fitting it, so that what frees there is its own and no one else's,
//! growing until it fits, and renewed each round while the request waits
//! for room. One such hold at a time keeps what idles meanwhile to one
//! request's (or one gang's) size.

use super::admission::RoundView;
use super::queue::QueueItem;
use crate::db::fairness::preemptions::{self as db, NewHold};
use crate::db::fairness::queue::PendingRow;
use crate::error::Result;
use std::collections::HashMap;
use uuid::Uuid;

/// After a round: a hold for the most entitled request (or gang) waiting
/// for room (reason `no_capacity` past `reserve_after_seconds`): its
/// project's weighted share the lowest, then the oldest; unless room is
/// held for some pending request already. A gang gets room for every
/// member, each on the provider closest to fitting it once the members
/// before it are placed (as YuniKorn reserves for a gang's placeholders).
/// The hold lasts `hold_seconds` and is renewed each round while its
/// request still waits for room, so what gathers there is never handed
/// back to smaller work before the request fits.
pub async fn reserve(
    tx: &mut sqlx::PgConnection,
    view: &RoundView,
    deferred: &[(usize, &str)],
    rows: &[(PendingRow, QueueItem)],
    reserve_after_seconds: u64,
    hold_seconds: u64,
) -> Result<()> {
    let wait = chrono::Duration::seconds(i64::try_from(reserve_after_seconds).unwrap_or(i64::MAX));
    let Starving {
        mut candidates,
        gangs,
    } = Starving::of(deferred, rows, wait);
    // The most entitled first: of the project the sorter serves first
    // (the lowest weighted share), then the oldest (deferred requests are
    // in submission order, which the stable sort keeps among equals).
    let share = |at: usize| {
        let project = &rows[at].0.project_id;
        view.shares.get(project).copied().unwrap_or(0.0)
    };
    // One such hold at a time: nothing to choose while room is held.
    if candidates.is_empty() || db::any_held(tx).await? {
        return Ok(());
    }
    candidates.sort_by(|&a, &b| share(a).total_cmp(&share(b)));
    // Providers are worked out for the chosen one only (and the next when
    // it fits on none), never for every request waiting.
    let chosen = candidates.into_iter().find_map(|at| {
        let members = match rows[at].1.gang {
            Some(g) => gangs.get(&g).cloned().unwrap_or_default(),
            None => vec![at],
        };
        places(view, &members, rows).map(|p| (at, members, p))
    });
    let Some((at, members, providers)) = chosen else {
        return Ok(());
    };
    let row = &rows[at].0;
    let classes: Vec<String> = members
        .iter()
        .flat_map(|&m| rows[m].1.resources.keys().cloned())
        .collect();
    let class_id = super::class_ids(tx, &super::sorted_distinct(classes)).await?;
    let project_id =
        crate::db::consumers::ensure_projects(tx, std::slice::from_ref(&row.project_id)).await?;
    let Some(&project_id) = project_id.get(&row.project_id) else {
        return Ok(());
    };
    let holds: Vec<NewHold> = members
        .iter()
        .zip(providers)
        .map(|(&m, provider)| NewHold {
            request_id: rows[m].0.id,
            provider_id: view.provider_ids[provider],
            project_id,
            amounts: rows[m]
                .1
                .resources
                .iter()
                .filter_map(|(name, n)| Some((*class_id.get(name)?, i32::try_from(*n).ok()?)))
                .collect(),
        })
        .collect();
    db::hold(tx, &holds, hold_seconds).await?;
    Ok(())
}

/// The requests waiting for room long enough to be reserved for, each
/// gang once (at its first member), and each gang's waiting members.
struct Starving {
    candidates: Vec<usize>,
    gangs: HashMap<Uuid, Vec<usize>>,
}

impl Starving {
    fn of(
        deferred: &[(usize, &str)],
        rows: &[(PendingRow, QueueItem)],
        wait: chrono::Duration,
    ) -> Self {
        let waiting: Vec<usize> = deferred
            .iter()
            .filter(|&&(_, reason)| reason == "no_capacity")
            .map(|&(at, _)| at)
            .collect();
        let mut gangs: HashMap<Uuid, Vec<usize>> = HashMap::new();
        for &at in &waiting {
            if let Some(g) = rows[at].1.gang {
                gangs.entry(g).or_default().push(at);
            }
        }
        let candidates = waiting
            .iter()
            .copied()
            .filter(|&at| {
                let (row, item) = &rows[at];
                row.now - row.submitted_at >= wait
                    && item
                        .gang
                        .is_none_or(|g| gangs.get(&g).and_then(|m| m.first()) == Some(&at))
            })
            .collect();
        Starving { candidates, gangs }
    }
}

/// A provider for each of `members` (a request, or a gang's members in
/// order): among those the member may use and that could hold it empty
/// beside the members placed before it, the one with the most of it free
/// now (the sum over its classes of the part free, less what earlier
/// members took); the round's order breaks ties. None when a member has
/// no such provider.
fn places(
    view: &RoundView,
    members: &[usize],
    rows: &[(PendingRow, QueueItem)],
) -> Option<Vec<usize>> {
    // What earlier members took, by (provider, class).
    let mut taken: HashMap<(usize, usize), i64> = HashMap::new();
    let mut out = Vec::with_capacity(members.len());
    for &at in members {
        let need: Vec<(usize, i64)> = rows[at]
            .1
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
                .map(|&(c, n)| {
                    let took = taken.get(&(p, c)).copied().unwrap_or(0);
                    (view.free[p][c] - took).clamp(0, n) as f64 / n as f64
                })
                .sum()
        };
        let provider = allowed
            .iter()
            .copied()
            .filter(|&p| {
                need.iter().all(|&(c, n)| {
                    view.largest[p][c] >= taken.get(&(p, c)).copied().unwrap_or(0) + n
                })
            })
            .fold(None, |best: Option<(usize, f64)>, p| {
                let score = part_free(p);
                match best {
                    Some((_, s)) if s >= score => best,
                    _ => Some((p, score)),
                }
            })
            .map(|(p, _)| p)?;
        for &(c, n) in &need {
            *taken.entry((provider, c)).or_default() += n;
        }
        out.push(provider);
    }
    Some(out)
}
