//! Reading a real Placement database (its own schema, as `placement-manage
//! db sync` of openstack-placement 16.0.0 leaves it): every table the API
//! serves from, in one read-only, repeatable-read transaction, so that the
//! copy is one consistent moment of the source.

use sqlx::PgConnection;

/// The alembic revision of openstack-placement 16.0.0's schema (API 1.39).
pub const PLACEMENT_HEAD: &str = "a082b8bb98d0";

/// Earlier revisions, oldest first: a database at one of them needs
/// `placement-manage db sync` before it can be imported.
pub const OLDER_REVISIONS: &[&str] = &[
    "b4ed3a175331",
    "611cd6dffd7b",
    "b5c396305c25",
    "422ece571366",
];

/// Why a database cannot be read as Placement's.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// No Placement tables there.
    #[error("not a Placement database: {0}")]
    NotPlacement(String),
    /// A schema version this import does not read.
    #[error("{0}")]
    Version(String),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// A provider row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Provider {
    pub id: i32,
    pub uuid: String,
    pub name: Option<String>,
    pub generation: Option<i32>,
    pub root_provider_id: Option<i32>,
    pub parent_provider_id: Option<i32>,
}

/// An inventory row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Inventory {
    pub resource_provider_id: i32,
    pub resource_class_id: i32,
    #[sqlx(flatten)]
    pub capacity: crate::types::Inventory,
}

/// An allocation row (the consumer by uuid text, as Placement keeps it).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Allocation {
    pub resource_provider_id: i32,
    pub consumer_id: String,
    pub resource_class_id: i32,
    pub used: i32,
}

/// A consumer with its project, user and type resolved to names.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Consumer {
    pub uuid: String,
    pub project: String,
    #[sqlx(rename = "user_external")]
    pub user: String,
    pub generation: i32,
    pub consumer_type: Option<String>,
}

/// Everything an import copies.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Custom resource classes (id, name); standard ones are not stored.
    pub classes: Vec<(i32, String)>,
    /// Traits (id, name), standard ones included.
    pub traits: Vec<(i32, String)>,
    pub providers: Vec<Provider>,
    pub inventories: Vec<Inventory>,
    /// Aggregates (id, uuid).
    pub aggregates: Vec<(i32, String)>,
    /// (provider id, aggregate id).
    pub provider_aggregates: Vec<(i32, i32)>,
    /// (provider id, trait id).
    pub provider_traits: Vec<(i32, i32)>,
    pub consumers: Vec<Consumer>,
    /// Consumer types (id, name), in the order they were made: `GET
    /// /usages` lists them in that order.
    pub consumer_types: Vec<(i32, String)>,
    pub allocations: Vec<Allocation>,
}

/// The tables a Placement database has (its schema's check).
pub const TABLES: &[&str] = &[
    "alembic_version",
    "resource_providers",
    "inventories",
    "allocations",
    "consumers",
];

/// The revision row.
pub const SQL_REVISION: &str = "SELECT version_num FROM alembic_version LIMIT 1";

/// The reading, one statement per table, in the SQL both PostgreSQL and
/// MySQL/MariaDB read alike (Placement's columns are the same types on
/// both but for `allocation_ratio`: double precision on PostgreSQL,
/// single on MySQL, which each reader decodes its own way).
pub const SQL_CLASSES: &str = "SELECT id, name FROM resource_classes ORDER BY id";
pub const SQL_TRAITS: &str = "SELECT id, name FROM traits ORDER BY id";
pub const SQL_CONSUMER_TYPES: &str = "SELECT id, name FROM consumer_types ORDER BY id";
pub const SQL_PROVIDERS: &str =
    "SELECT id, uuid, name, generation, root_provider_id, parent_provider_id
       FROM resource_providers ORDER BY id";
pub const SQL_INVENTORIES: &str =
    "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size,
            allocation_ratio
       FROM inventories ORDER BY resource_provider_id, resource_class_id";
pub const SQL_AGGREGATES: &str = "SELECT id, uuid FROM placement_aggregates ORDER BY id";
pub const SQL_PROVIDER_AGGREGATES: &str =
    "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates ORDER BY 1, 2";
pub const SQL_PROVIDER_TRAITS: &str =
    "SELECT resource_provider_id, trait_id FROM resource_provider_traits ORDER BY 1, 2";
pub const SQL_CONSUMERS: &str =
    "SELECT c.uuid, p.external_id AS project, u.external_id AS user_external,
            c.generation, t.name AS consumer_type
       FROM consumers c
       JOIN projects p ON p.id = c.project_id
       JOIN users u ON u.id = c.user_id
       LEFT JOIN consumer_types t ON t.id = c.consumer_type_id
      ORDER BY c.id";
pub const SQL_ALLOCATIONS: &str =
    "SELECT resource_provider_id, consumer_id, resource_class_id, used FROM allocations ORDER BY id";

/// What placement-status's two data checks count, in its own words:
/// providers without a root provider id (a Queens online migration not
/// run), and consumers that have allocations but no `consumers` row
/// (allocations written before microversion 1.8).
pub const SQL_MISSING_ROOT_IDS: &str =
    "SELECT COUNT(*) FROM resource_providers WHERE root_provider_id IS NULL";
pub const SQL_MISSING_CONSUMERS: &str = "SELECT COUNT(DISTINCT a.consumer_id) FROM allocations a
       LEFT JOIN consumers c ON a.consumer_id = c.uuid
      WHERE c.id IS NULL";

/// placement-status's two counts of a Placement database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCounts {
    pub missing_root_ids: i64,
    pub missing_consumers: i64,
}

/// Whether the database this connection reaches is a Placement's (its
/// alembic table) rather than this service's (its migrations table).
pub async fn is_placement(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT to_regclass('alembic_version') IS NOT NULL AND to_regclass('_sqlx_migrations') IS NULL",
    )
    .fetch_one(conn)
    .await
}

/// placement-status's counts, read-only, whatever the schema revision.
pub async fn status_counts(conn: &mut PgConnection) -> Result<StatusCounts, sqlx::Error> {
    Ok(StatusCounts {
        missing_root_ids: crate::db::query_scalar(SQL_MISSING_ROOT_IDS)
            .fetch_one(&mut *conn)
            .await?,
        missing_consumers: crate::db::query_scalar(SQL_MISSING_CONSUMERS)
            .fetch_one(&mut *conn)
            .await?,
    })
}

/// Whether the alembic revision is 16.0.0's.
pub fn check_revision(version: Option<&str>) -> Result<(), SourceError> {
    match version {
        Some(PLACEMENT_HEAD) => Ok(()),
        Some(v) if OLDER_REVISIONS.contains(&v) => Err(SourceError::Version(format!(
            "the Placement schema is at revision {v}, older than 16.0.0's {PLACEMENT_HEAD}: run `placement-manage db sync` with openstack-placement 16.0.0 first"
        ))),
        Some(v) => Err(SourceError::Version(format!(
            "the Placement schema is at revision {v}, which this import does not know (it reads 16.0.0's {PLACEMENT_HEAD}); a newer Placement may store what it would lose"
        ))),
        None => Err(SourceError::NotPlacement("alembic_version is empty".into())),
    }
}

/// Opens the read-only, repeatable-read transaction and checks the schema.
pub async fn begin(conn: &mut PgConnection) -> Result<(), SourceError> {
    crate::db::query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *conn)
        .await?;
    let tables: Vec<String> =
        crate::db::query_scalar("SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NULL")
            .bind(TABLES)
            .fetch_all(&mut *conn)
            .await?;
    if !tables.is_empty() {
        return Err(SourceError::NotPlacement(format!(
            "no table {}",
            tables.join(", ")
        )));
    }
    let version: Option<String> = crate::db::query_scalar(SQL_REVISION)
        .fetch_optional(&mut *conn)
        .await?;
    check_revision(version.as_deref())
}

/// Reads every table, in the transaction [`begin`] opened.
pub async fn read(conn: &mut PgConnection) -> Result<Snapshot, SourceError> {
    let pairs = |sql: &'static str| crate::db::query_as::<_, (i32, String)>(sql);
    let links = |sql: &'static str| crate::db::query_as::<_, (i32, i32)>(sql);
    Ok(Snapshot {
        classes: pairs(SQL_CLASSES).fetch_all(&mut *conn).await?,
        traits: pairs(SQL_TRAITS).fetch_all(&mut *conn).await?,
        providers: crate::db::query_as(SQL_PROVIDERS)
            .fetch_all(&mut *conn)
            .await?,
        inventories: crate::db::query_as(SQL_INVENTORIES)
            .fetch_all(&mut *conn)
            .await?,
        aggregates: pairs(SQL_AGGREGATES).fetch_all(&mut *conn).await?,
        provider_aggregates: links(SQL_PROVIDER_AGGREGATES).fetch_all(&mut *conn).await?,
        provider_traits: links(SQL_PROVIDER_TRAITS).fetch_all(&mut *conn).await?,
        consumers: crate::db::query_as(SQL_CONSUMERS)
            .fetch_all(&mut *conn)
            .await?,
        consumer_types: pairs(SQL_CONSUMER_TYPES).fetch_all(&mut *conn).await?,
        allocations: crate::db::query_as(SQL_ALLOCATIONS)
            .fetch_all(&mut *conn)
            .await?,
    })
}

/// Consumers whose row is missing but whose allocations exist (data from
/// before microversion 1.8), as uuids.
pub fn incomplete_consumers(s: &Snapshot) -> Vec<String> {
    let known: std::collections::HashSet<&str> =
        s.consumers.iter().map(|c| c.uuid.as_str()).collect();
    let mut missing: Vec<String> = s
        .allocations
        .iter()
        .filter(|a| !known.contains(a.consumer_id.as_str()))
        .map(|a| a.consumer_id.clone())
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// Ends the read-only transaction.
pub async fn finish(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    crate::db::query("ROLLBACK").execute(conn).await.map(|_| ())
}
