//! All SQL lives here, one file per table family. Functions take a
//! `&mut PgConnection` so that handlers decide the transaction boundary.

pub mod aggregates;
pub mod allocations;
pub mod audit;
pub mod candidates;
pub mod classes;
pub mod colocation;
pub mod consumers;
pub mod deadline;
pub mod definitions;
pub mod deployment_nodes;
pub mod deployments;
pub mod fairness;
pub mod import;
pub mod inventories;
pub mod migrations;
pub mod pool;
pub mod pool_fit;
pub mod primary;
pub mod providers;
pub mod statements;
pub mod target;
pub mod time_offset;
pub mod traits;
pub mod usages;
pub mod volumes;
pub mod warm_connection;

use sqlx::PgPool;

pub use pool::Pool;
pub use statements::{query, query_as, query_scalar};

/// A database error in an operator's words: PostgreSQL's message with its
/// detail, hint and SQLSTATE, and the migration it stopped, but never the
/// line of PostgreSQL's own C source that sqlx's `Display` appends ("at
/// line 11880" reads like a line of a config file).
pub fn explain(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => {
            let mut out = db.message().to_string();
            if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                if let Some(detail) = pg.detail() {
                    out.push_str(&format!(" ({detail})"));
                }
                if let Some(hint) = pg.hint() {
                    out.push_str(&format!("; hint: {hint}"));
                }
            }
            if let Some(code) = db.code() {
                out.push_str(&format!(" [SQLSTATE {code}]"));
            }
            out
        }
        sqlx::Error::Migrate(m) => match m.as_ref() {
            sqlx::migrate::MigrateError::Execute(inner) => {
                format!("applying the migrations: {}", explain(inner))
            }
            sqlx::migrate::MigrateError::ExecuteMigration(inner, version) => {
                format!("applying migration {version}: {}", explain(inner))
            }
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

/// True when `e` is a unique violation of the named constraint.
pub fn is_unique_violation(e: &sqlx::Error, constraint: &str) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505")
        && db.constraint() == Some(constraint))
}

/// Applies the migrations and inserts any missing standard resource classes
/// and traits. Tolerates other processes doing the same at the same time.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prepare(pool: &PgPool) -> Result<(), sqlx::Error> {
    // Several servers may start at once on one database: serialise migrations.
    let mut conn = pool.acquire().await?;
    crate::db::query("SELECT pg_advisory_lock(7355608)")
        .execute(&mut *conn)
        .await?;
    let seeded = match migrations::run(&mut conn).await {
        Ok(()) => seed_standard_names(&mut conn).await,
        Err(e) => Err(e),
    };
    crate::db::query("SELECT pg_advisory_unlock(7355608)")
        .execute(&mut *conn)
        .await?;
    seeded
}

async fn seed_standard_names(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    let classes: Vec<&str> = crate::types::standard_resource_classes().collect();
    let ids: Vec<i32> = (0..classes.len() as i32).collect();
    crate::db::query(
        "INSERT INTO resource_classes (id, name) SELECT * FROM UNNEST($1::int[], $2::text[])
         ON CONFLICT DO NOTHING",
    )
    .bind(&ids)
    .bind(&classes)
    .execute(&mut *conn)
    .await?;
    let traits: Vec<&str> = crate::types::standard_traits().collect();
    crate::db::query("INSERT INTO traits (name) SELECT UNNEST($1::text[]) ON CONFLICT DO NOTHING")
        .bind(&traits)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
