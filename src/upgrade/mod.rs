//! What an upgrade runs, as the deployment tools run Placement's:
//! `placement db sync` (placement-manage's: apply the migrations, exit) and
//! `placement upgrade check` (placement-status's: can this build serve
//! that database and configuration?), with oslo.upgradecheck's results and
//! exit codes.
//!
//! `upgrade check` runs placement-status's three checks, with its names,
//! words and table, on either kind of database: a Placement's (before the
//! switch, the database `placement import` will read, on PostgreSQL,
//! MySQL or MariaDB) or this service's. This service's own checks follow
//! them, and only where a healthy Placement's data cannot make them fire.

mod checks;
mod table;

pub use checks::{Check, Outcome};
pub use table::{exit_code, render};

use crate::db;
use crate::db::import::{source, source_mysql};
use std::path::Path;

/// A pool of one connection to `url`.
async fn connect(url: &str) -> Result<sqlx::PgPool, String> {
    let target = db::target::DbTarget::parse(url).map_err(|e| format!("the database URL: {e}"))?;
    let settings = db::primary::PoolSettings {
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(30),
        ping_idle: true,
    };
    db::primary::open(target, settings, |o| o)
        .await
        .map_err(|e| format!("the database: {e}"))
}

/// Applies every migration not applied yet; how many there were.
pub async fn sync(url: &str) -> Result<usize, String> {
    let pool = connect(url).await?;
    let before = {
        let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
        db::migrations::compare(&mut conn)
            .await
            .map_err(|e| e.to_string())?
    };
    if let Some(v) = before.1.first() {
        return Err(format!(
            "the database has migration {v}, which this build does not know: a newer release migrated it"
        ));
    }
    db::prepare(&pool).await.map_err(|e| db::explain(&e))?;
    pool.close().await;
    Ok(before.0.len())
}

/// What `upgrade check` looks at.
pub struct CheckInput<'a> {
    /// A PostgreSQL URL (this service's database or a Placement's) or a
    /// MySQL/MariaDB URL as the deployment tools write it (a Placement's).
    pub url: &'a str,
    pub policy_file: Option<&'a Path>,
}

/// Every check, in order; a database that cannot be reached is an error
/// (placement-status's 255).
pub async fn check(input: &CheckInput<'_>) -> Result<Vec<Check>, String> {
    if source_mysql::is_mysql_url(input.url) {
        let options = source_mysql::options(input.url)?;
        let counts = source_mysql::status_counts(&options)
            .await
            .map_err(|e| format!("the Placement database: {e}"))?;
        return Ok(checks::all(counts, input.policy_file, None));
    }
    let pool = connect(input.url).await?;
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    let checked = async {
        if source::is_placement(&mut conn).await? {
            let counts = source::status_counts(&mut conn).await?;
            return Ok(checks::all(counts, input.policy_file, None));
        }
        let (pending, unknown) = db::migrations::compare(&mut conn).await?;
        let schema = if let Some(v) = unknown.first() {
            checks::Schema::Newer(*v)
        } else if let Some(first) = pending.first() {
            checks::Schema::Behind {
                count: pending.len(),
                first: format!("{} {}", first.version, first.description),
            }
        } else if !db::definitions::current(&mut conn).await? {
            checks::Schema::OtherDefinitions
        } else {
            checks::Schema::Current
        };
        // Before the first migration there is no table to count in.
        let counts = if pending.len() == db::migrations::MIGRATOR.iter().count() {
            source::StatusCounts {
                missing_root_ids: 0,
                missing_consumers: 0,
            }
        } else {
            db::consumers::status_counts(&mut conn).await?
        };
        Ok::<_, sqlx::Error>(checks::all(counts, input.policy_file, Some(schema)))
    }
    .await
    .map_err(|e| e.to_string());
    drop(conn);
    pool.close().await;
    checked
}
