//! `placement audit`: checks a database without changing it (one
//! read-only, repeatable-read transaction, safe against a live service)
//! and reports every problem: usage over capacity, allocations of classes
//! without inventory, consumers without allocations, bound CPU shares that
//! disagree with their allocation, per-project totals that drifted from
//! the allocations, and the change log's triggers and horizon.

use crate::db::audit::{self, Finding};

/// Why the audit could not run.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The database has no schema of this service.
    #[error("{0} is not a placement database of this service (no migrations table with its schema); point DATABASE_URL at one")]
    NotOurs(String),
    /// No host of it accepts writes, or its URL is wrong.
    #[error("{0}")]
    Connect(String),
    /// It could not be reached or read.
    #[error("{0}")]
    Db(#[from] sqlx::Error),
}

/// Every finding in the database at `url` (`describe` names it in errors).
pub async fn run(url: &str, describe: &str) -> Result<Vec<Finding>, AuditError> {
    let mut conn = crate::db::primary::connect_writable(url)
        .await
        .map_err(AuditError::Connect)?;
    if !audit::is_ours(&mut conn).await? {
        return Err(AuditError::NotOurs(describe.to_string()));
    }
    crate::db::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut conn)
        .await?;
    let findings = audit::run(&mut conn).await?;
    crate::db::query("ROLLBACK").execute(&mut conn).await?;
    Ok(findings)
}

/// The report for a person.
pub fn human(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "audit: no problems found".to_string();
    }
    let mut out: Vec<String> = findings
        .iter()
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect();
    out.push(format!("audit: {} problem(s) found", findings.len()));
    out.join("\n")
}

/// The report for a machine: `{"ok": bool, "findings": [{"check", "detail"}]}`.
pub fn json(findings: &[Finding]) -> String {
    serde_json::json!({"ok": findings.is_empty(), "findings": findings}).to_string()
}
