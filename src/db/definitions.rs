//! The functions the write path calls, kept current outside the
//! migrations: `definitions.sql` is their one text, applied after the
//! migrations whenever the database ran another text.
//!
//! Migrations are history: sqlx refuses a database whose applied
//! migration's text changed, so a function rewritten by migrations is
//! defined once per rewrite, and its current text is "whichever is
//! latest". Here a rule of the claim changes in one place. The text is
//! applied under the migration lock, by the role that ran the migrations
//! (it owns the functions); the SHA-384 of the text last applied is in
//! `schema_definitions`, so a process started with `--migrate false` can
//! tell the database runs another text and refuse, as it does for a
//! missing migration.

use sha2::{Digest, Sha384};
use sqlx::PgConnection;

/// The current definitions: every statement is `CREATE OR REPLACE`.
pub const TEXT: &str = include_str!("definitions.sql");

/// The SHA-384 of [`TEXT`], in hex.
pub fn checksum() -> String {
    Sha384::digest(TEXT.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether the database runs [`TEXT`] (false before the migration that
/// records it, and before the text was first applied).
pub async fn current(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let recorded: bool =
        crate::db::query_scalar("SELECT to_regclass('schema_definitions') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !recorded {
        return Ok(false);
    }
    let recorded: Option<String> = crate::db::query_scalar("SELECT sha384 FROM schema_definitions")
        .fetch_optional(&mut *conn)
        .await?;
    Ok(recorded.as_deref() == Some(checksum().as_str()))
}

/// Applies [`TEXT`] unless the database runs it already, and records it.
/// The caller holds the migration lock and has applied the migrations.
pub async fn apply(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    if current(&mut *conn).await? {
        return Ok(());
    }
    sqlx::raw_sql(TEXT).execute(&mut *conn).await?;
    crate::db::query(
        "INSERT INTO schema_definitions (sha384) VALUES ($1)
         ON CONFLICT (one) DO UPDATE SET sha384 = EXCLUDED.sha384, applied_at = now()",
    )
    .bind(checksum())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
