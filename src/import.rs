//! `placement import --from URL`: copies a running Placement's database
//! (openstack-placement 16.0.0's schema) into ours. The source is read in
//! one read-only, repeatable-read transaction; ours is written in one
//! transaction, checked against the source (every provider's generation,
//! inventories and usage per class), and only then committed. A dry run
//! does all of it and rolls back.

use crate::db::import::source::{self, SourceError};
use crate::db::import::source_mysql;
use crate::db::import::target::{self, TargetError};
use sqlx::ConnectOptions;
use std::fmt;

/// What to import, from where, and how.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The Placement database.
    pub from: String,
    /// Ours.
    pub to: String,
    /// Add to a database that already holds providers or consumers.
    pub force: bool,
    /// Do everything, then roll back.
    pub dry_run: bool,
    /// Owner given to consumers the source has allocations but no row for.
    pub incomplete_owner: (String, String),
}

/// Why an import stopped; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The source cannot be read as Placement 16.0.0's.
    #[error("source: {0}")]
    Source(#[from] SourceError),
    /// The copy was refused or does not match.
    #[error("import: {0}")]
    Target(#[from] TargetError),
    /// Ours already holds data and `--force` was not given.
    #[error("the target database is not empty (it has providers or consumers): import into a fresh database, or pass --force to add to it")]
    NotEmpty,
    /// A database could not be reached.
    #[error("{0}")]
    Connect(String),
}

/// What was copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// (what, how many), in the order they were copied.
    pub counts: Vec<(&'static str, usize)>,
    /// Whether it was rolled back.
    pub dry_run: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (what, n) in &self.counts {
            writeln!(f, "{what:>28}: {n}")?;
        }
        if self.dry_run {
            write!(
                f,
                "verified, then rolled back (--dry-run): no data was written (a new target's schema was migrated)"
            )
        } else {
            write!(
                f,
                "verified (counts, generations, inventories, usage per provider and class) and committed"
            )
        }
    }
}

fn counts(s: &source::Snapshot, incomplete: usize) -> Vec<(&'static str, usize)> {
    vec![
        (
            "custom resource classes",
            s.classes
                .iter()
                .filter(|(id, _)| *id >= crate::db::classes::FIRST_CUSTOM_ID)
                .count(),
        ),
        ("traits (standard and custom)", s.traits.len()),
        ("resource providers", s.providers.len()),
        ("inventories", s.inventories.len()),
        ("aggregates", s.aggregates.len()),
        ("provider aggregates", s.provider_aggregates.len()),
        ("provider traits", s.provider_traits.len()),
        ("consumers", s.consumers.len()),
        ("incomplete consumers (made)", incomplete),
        ("allocations", s.allocations.len()),
    ]
}

/// The source database's contents: MySQL and MariaDB by their URL
/// (`mysql+pymysql://…`), PostgreSQL otherwise.
async fn read_source(url: &str) -> Result<source::Snapshot, ImportError> {
    if source_mysql::is_mysql_url(url) {
        let options = source_mysql::options(url)
            .map_err(|e| ImportError::Connect(format!("the source's URL: {e}")))?;
        return source_mysql::snapshot(&options).await.map_err(|e| match e {
            SourceError::Db(e) => ImportError::Connect(format!("reading the source: {e}")),
            other => ImportError::Source(other),
        });
    }
    // The import's statements read and write whole tables: sqlx's
    // "slow statement" warnings would alarm for what is expected here.
    let options: sqlx::postgres::PgConnectOptions = url
        .parse()
        .map_err(|e| ImportError::Connect(format!("the source's URL: {e}")))?;
    let mut from = options
        .disable_statement_logging()
        .connect()
        .await
        .map_err(|e| ImportError::Connect(format!("connecting to the source: {e}")))?;
    source::begin(&mut from).await?;
    let snapshot = source::read(&mut from).await?;
    source::finish(&mut from).await.map_err(SourceError::Db)?;
    Ok(snapshot)
}

/// Runs the import.
pub async fn run(o: &ImportOptions) -> Result<Report, ImportError> {
    let snapshot = read_source(&o.from).await?;
    let incomplete = source::incomplete_consumers(&snapshot);
    let target = crate::db::target::DbTarget::parse(&o.to)
        .map_err(|e| ImportError::Connect(format!("the target's URL: {e}")))?;
    let settings = crate::db::primary::PoolSettings {
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(30),
        ping_idle: true,
    };
    let pool = crate::db::primary::open(target, settings, |o| o.disable_statement_logging())
        .await
        .map_err(|e| ImportError::Connect(format!("the target: {e}")))?;
    crate::db::prepare(&pool).await.map_err(TargetError::Db)?;
    let mut tx = pool.begin().await.map_err(TargetError::Db)?;
    if !o.force && !target::is_empty(&mut tx).await.map_err(TargetError::Db)? {
        return Err(ImportError::NotEmpty);
    }
    let owner = (o.incomplete_owner.0.as_str(), o.incomplete_owner.1.as_str());
    let landing = target::write(&mut tx, &snapshot, &incomplete, owner).await?;
    target::verify(&mut tx, &snapshot, &landing).await?;
    if o.dry_run {
        tx.rollback().await.map_err(TargetError::Db)?;
    } else {
        tx.commit().await.map_err(TargetError::Db)?;
    }
    Ok(Report {
        counts: counts(&snapshot, incomplete.len()),
        dry_run: o.dry_run,
    })
}
