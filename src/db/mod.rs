//! All SQL lives here, one file per table family. Functions take a
//! `&mut PgConnection` so that handlers decide the transaction boundary.

pub mod aggregates;
pub mod allocations;
pub mod audit;
pub mod candidates;
pub mod classes;
pub mod colocation;
pub mod consumers;
pub mod deployments;
pub mod fairness;
pub mod import;
pub mod inventories;
pub mod kept;
pub mod migrations;
pub mod pool;
pub mod primary;
pub mod providers;
pub mod statements;
pub mod target;
pub mod traits;
pub mod usages;
pub mod volumes;

use sqlx::PgPool;

pub use pool::Pool;
pub use statements::{query, query_as, query_scalar};

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
