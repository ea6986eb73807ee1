//! Fair sharing between projects, the Mesos allocator's rules over
//! Placement data (`fairness_colocation.md` Part A and §C.2): project
//! weights and tree, quotas, per-project reservations, the DRF shares, one
//! admission round at a time, and decline filters. The pure algorithms are
//! in `sched::{drf, admission, quota, decline}`; the SQL in `db::fairness`;
//! the limits and reservations of plain writes are enforced by
//! `db::allocations::write`, so every write path honours them.

pub mod admission;
pub mod declines;
mod eligibility;
pub mod long_polls;
pub mod preemption;
pub mod projects;
pub mod queue;
pub mod queue_leader;
pub mod queue_round;
pub mod reservations;
mod round_inputs;
pub mod round_providers;
pub mod round_request;
pub mod shares;
mod starvation;
pub mod submissions;

use crate::db::{classes, fairness as db};
use crate::error::{Error, Result};
use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};

/// Amounts by resource class name.
pub type Amounts = BTreeMap<String, i64>;

/// Class ids of `names`, or 400 naming the first unknown class.
pub async fn class_ids(conn: &mut PgConnection, names: &[String]) -> Result<HashMap<String, i32>> {
    let ids = classes::ids(conn, names)
        .await?
        .map_err(|rc| Error::invalid(format!("No such resource class {rc}.")))?;
    Ok(names.iter().cloned().zip(ids).collect())
}

/// The projects table id of an external project id, created if missing.
pub async fn project_row(conn: &mut PgConnection, project: &str) -> Result<i32> {
    Ok(db::ensure_project(conn, project).await?)
}

/// The distinct trait names a set of `required` lists names, without the
/// `!` of a forbidden one, sorted.
pub fn trait_names<'a>(required: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    sorted_distinct(
        required
            .into_iter()
            .map(|t| t.trim_start_matches('!').to_string()),
    )
}

/// The distinct values, sorted: the key lists a round reads ids for, so
/// each id is asked once and in the same order by every round.
pub fn sorted_distinct<T: Ord>(values: impl IntoIterator<Item = T>) -> Vec<T> {
    values
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `a − b` per class of `a`, keeping what stays positive.
pub fn positive_minus(a: &Amounts, b: &Amounts) -> Amounts {
    a.iter()
        .map(|(c, n)| (c.clone(), n - b.get(c).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}
