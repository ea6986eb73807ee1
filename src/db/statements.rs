//! Every statement of the data layer starts here: sqlx's `query`,
//! `query_as` and `query_scalar`, with named prepared statements kept on
//! their connection only when PostgreSQL's sessions are the service's own.
//!
//! Behind a transaction pooler (`--db-pooler transaction`) a server
//! connection serves many clients in turn, so a named statement prepared
//! by one (sqlx names them `sqlx_s_1`, `sqlx_s_2`, … on every connection,
//! and keeps naming them even with its statement cache off) collides with
//! another client's or is missing when needed. There, every statement is
//! prepared unnamed, inside its transaction.

use sqlx::database::HasStatementCache;
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::{Database, FromRow, SqlSafeStr};
use std::sync::atomic::{AtomicBool, Ordering};

static NAMED: AtomicBool = AtomicBool::new(true);

/// Whether statements are prepared under names kept on their connection
/// (the default; `false` behind a transaction pooler, set at start-up).
pub fn keep_named_statements(keep: bool) {
    NAMED.store(keep, Ordering::Relaxed);
}

fn named() -> bool {
    NAMED.load(Ordering::Relaxed)
}

/// `sqlx::query`.
pub fn query<'a, DB: Database + HasStatementCache>(
    sql: impl SqlSafeStr,
) -> Query<'a, DB, <DB as Database>::Arguments> {
    sqlx::query(sql).persistent(named())
}

/// `sqlx::query_as`.
pub fn query_as<'q, DB, O>(sql: impl SqlSafeStr) -> QueryAs<'q, DB, O, <DB as Database>::Arguments>
where
    DB: Database + HasStatementCache,
    O: for<'r> FromRow<'r, DB::Row>,
{
    sqlx::query_as(sql).persistent(named())
}

/// `sqlx::query_scalar`.
pub fn query_scalar<'q, DB, O>(
    sql: impl SqlSafeStr,
) -> QueryScalar<'q, DB, O, <DB as Database>::Arguments>
where
    DB: Database + HasStatementCache,
    (O,): for<'r> FromRow<'r, DB::Row>,
{
    sqlx::query_scalar(sql).persistent(named())
}

/// A built query (`QueryBuilder::build*`) with the same rule.
pub fn persistent() -> bool {
    named()
}
