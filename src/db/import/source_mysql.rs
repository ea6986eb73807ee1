//! Reading a real Placement database on MySQL or MariaDB (Galera
//! included), where most deployment tools keep it: the same statements as
//! on PostgreSQL ([`super::source`]), in one consistent snapshot, from the
//! URL exactly as the tools write it (`mysql+pymysql://…?charset=utf8`,
//! `ssl_ca`, `ssl_verify_cert`, `ssl_verify_identity`, and
//! `read_default_file` for credentials in a my.cnf).

use super::source::{self, Allocation, Consumer, Inventory, Provider, Snapshot, SourceError};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlSslMode};
use sqlx::{ConnectOptions, Connection};
use std::collections::BTreeMap;

/// Whether `url` names a MySQL or MariaDB database (SQLAlchemy's
/// `mysql://` and `mysql+DRIVER://`, or `mariadb…`).
pub fn is_mysql_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    matches!(scheme.split('+').next(), Some("mysql" | "mariadb"))
}

/// The connection `url` describes, as PyMySQL reads it. The error never
/// quotes the URL (it holds a password).
pub fn options(url: &str) -> Result<MySqlConnectOptions, String> {
    let (_, rest) = url
        .split_once("://")
        .ok_or("not a database URL (expected mysql+pymysql://user:password@host/database)")?;
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let params: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let (authority, database) = base.split_once('/').unwrap_or((base, ""));
    let (userinfo, hostport) = authority.rsplit_once('@').unwrap_or(("", authority));
    let decode = |s: &str| {
        percent_decode(s)
            .ok_or_else(|| "the URL's user or password is not valid percent-encoding".to_string())
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (decode(u)?, Some(decode(p)?)),
        None => (decode(userinfo)?, None),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()) => (
            h.to_string(),
            Some(
                p.parse::<u16>()
                    .map_err(|_| "the URL's port is not a number".to_string())?,
            ),
        ),
        _ => (hostport.to_string(), None),
    };
    // PyMySQL: what the URL says wins; a my.cnf fills in the rest.
    let cnf = match params.get("read_default_file") {
        Some(path) => read_my_cnf(
            path,
            params
                .get("read_default_group")
                .map_or("client", String::as_str),
        )?,
        None => BTreeMap::new(),
    };
    let pick = |given: Option<String>, key: &str| {
        given
            .filter(|v| !v.is_empty())
            .or_else(|| cnf.get(key).cloned())
    };
    let mut o = MySqlConnectOptions::new()
        .host(
            &pick(Some(host.trim_matches(['[', ']']).to_string()), "host")
                .unwrap_or_else(|| "localhost".into()),
        )
        .port(
            port.or_else(|| cnf.get("port").and_then(|p| p.parse().ok()))
                .unwrap_or(3306),
        )
        .charset(params.get("charset").map_or("utf8mb4", String::as_str));
    if let Some(u) = pick(Some(user), "user") {
        o = o.username(&u);
    }
    if let Some(p) = pick(password, "password") {
        o = o.password(&p);
    }
    if let Some(db) = pick(Some(decode(database)?), "database") {
        o = o.database(&db);
    }
    Ok(with_tls(o, &params, &cnf).disable_statement_logging())
}

/// PyMySQL's TLS parameters, as Placement's own SQLAlchemy + PyMySQL
/// connection reads them: a CA means the certificate is checked, and the
/// host name with it (PyMySQL's `check_hostname` defaults to true), so a
/// certificate for another name is refused even when the CA is the
/// system's bundle, where any publicly trusted certificate chains (issue
/// 64). `ssl_verify_identity=false` (or SQLAlchemy's
/// `ssl_check_hostname=false`) is the explicit choice to check the chain
/// only, `ssl_verify_cert=false` to check nothing; without a CA, TLS when
/// the server offers it, unchecked, unless a check is asked for.
fn with_tls(
    o: MySqlConnectOptions,
    params: &BTreeMap<String, String>,
    cnf: &BTreeMap<String, String>,
) -> MySqlConnectOptions {
    let flag = |k: &str| {
        params
            .get(k)
            .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
    };
    let ca = params
        .get("ssl_ca")
        .cloned()
        .or_else(|| cnf.get("ssl-ca").cloned());
    let identity = flag("ssl_verify_identity").or_else(|| flag("ssl_check_hostname"));
    let mode = match (&ca, flag("ssl_verify_cert"), identity) {
        (Some(_), Some(false), _) => MySqlSslMode::Required,
        (Some(_), _, Some(false)) => MySqlSslMode::VerifyCa,
        (Some(_), _, _) | (None, _, Some(true)) => MySqlSslMode::VerifyIdentity,
        (None, Some(true), _) => MySqlSslMode::VerifyCa,
        (None, _, _) => MySqlSslMode::Preferred,
    };
    let mut o = o.ssl_mode(mode);
    if let Some(ca) = ca {
        o = o.ssl_ca(ca);
    }
    if let Some(cert) = params.get("ssl_cert") {
        o = o.ssl_client_cert(cert);
    }
    if let Some(key) = params.get("ssl_key") {
        o = o.ssl_client_key(key);
    }
    o
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `key = value` of one `[group]` of a my.cnf (`#`/`;` comments, quotes
/// around a value stripped, `-` and `_` alike in keys).
fn read_my_cnf(path: &str, group: &str) -> Result<BTreeMap<String, String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read_default_file {path}: {e}"))?;
    let mut out = BTreeMap::new();
    let mut in_group = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_group = name.trim() == group;
            continue;
        }
        if !in_group {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|x| x.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
            .unwrap_or(v);
        out.insert(k.trim().replace('_', "-"), v.to_string());
    }
    Ok(out)
}

/// An inventory row as MySQL keeps it: `allocation_ratio` single-precision.
#[derive(sqlx::FromRow)]
struct InventoryRow {
    resource_provider_id: i32,
    resource_class_id: i32,
    total: i32,
    reserved: i32,
    min_unit: i32,
    max_unit: i32,
    step_size: i32,
    allocation_ratio: f32,
}

/// The ratio Placement was given: the single-precision value's shortest
/// decimal (0.9 stays 0.9, not 0.8999999761581421).
fn ratio(stored: f32) -> f64 {
    stored.to_string().parse().unwrap_or(f64::from(stored))
}

/// placement-status's counts of a Placement database on MySQL or MariaDB.
pub async fn status_counts(
    options: &MySqlConnectOptions,
) -> Result<source::StatusCounts, sqlx::Error> {
    let mut conn = options.connect().await?;
    let missing_root_ids = sqlx::query_scalar(source::SQL_MISSING_ROOT_IDS)
        .fetch_one(&mut conn)
        .await;
    let missing_consumers = sqlx::query_scalar(source::SQL_MISSING_CONSUMERS)
        .fetch_one(&mut conn)
        .await;
    let _ = conn.close().await;
    Ok(source::StatusCounts {
        missing_root_ids: missing_root_ids?,
        missing_consumers: missing_consumers?,
    })
}

/// Reads the whole database in one consistent snapshot, read-only.
pub async fn snapshot(options: &MySqlConnectOptions) -> Result<Snapshot, SourceError> {
    // Whole tables are read: a "slow statement" warning is expected here.
    let mut conn = options
        .clone()
        .disable_statement_logging()
        .connect()
        .await?;
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut conn)
        .await?;
    sqlx::query("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        .execute(&mut conn)
        .await?;
    let read = read(&mut conn).await;
    let ended = sqlx::query("ROLLBACK").execute(&mut conn).await;
    let _ = conn.close().await;
    let snapshot = read?;
    ended?;
    Ok(snapshot)
}

async fn read(conn: &mut MySqlConnection) -> Result<Snapshot, SourceError> {
    let present: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE()",
    )
    .fetch_all(&mut *conn)
    .await?;
    let missing: Vec<&str> = source::TABLES
        .iter()
        .copied()
        .filter(|t| !present.iter().any(|p| p == t))
        .collect();
    if !missing.is_empty() {
        return Err(SourceError::NotPlacement(format!(
            "no table {}",
            missing.join(", ")
        )));
    }
    let version: Option<String> = sqlx::query_scalar(source::SQL_REVISION)
        .fetch_optional(&mut *conn)
        .await?;
    source::check_revision(version.as_deref())?;
    let pairs = |sql: &'static str| sqlx::query_as::<_, (i32, String)>(sql);
    let links = |sql: &'static str| sqlx::query_as::<_, (i32, i32)>(sql);
    let inventories: Vec<InventoryRow> = sqlx::query_as(source::SQL_INVENTORIES)
        .fetch_all(&mut *conn)
        .await?;
    Ok(Snapshot {
        classes: pairs(source::SQL_CLASSES).fetch_all(&mut *conn).await?,
        traits: pairs(source::SQL_TRAITS).fetch_all(&mut *conn).await?,
        providers: sqlx::query_as::<_, Provider>(source::SQL_PROVIDERS)
            .fetch_all(&mut *conn)
            .await?,
        inventories: inventories
            .into_iter()
            .map(|r| Inventory {
                resource_provider_id: r.resource_provider_id,
                resource_class_id: r.resource_class_id,
                capacity: crate::types::Inventory {
                    total: r.total,
                    reserved: r.reserved,
                    min_unit: r.min_unit,
                    max_unit: r.max_unit,
                    step_size: r.step_size,
                    allocation_ratio: ratio(r.allocation_ratio),
                },
            })
            .collect(),
        aggregates: pairs(source::SQL_AGGREGATES).fetch_all(&mut *conn).await?,
        provider_aggregates: links(source::SQL_PROVIDER_AGGREGATES)
            .fetch_all(&mut *conn)
            .await?,
        provider_traits: links(source::SQL_PROVIDER_TRAITS)
            .fetch_all(&mut *conn)
            .await?,
        consumers: sqlx::query_as::<_, Consumer>(source::SQL_CONSUMERS)
            .fetch_all(&mut *conn)
            .await?,
        consumer_types: pairs(source::SQL_CONSUMER_TYPES)
            .fetch_all(&mut *conn)
            .await?,
        allocations: sqlx::query_as::<_, Allocation>(source::SQL_ALLOCATIONS)
            .fetch_all(&mut *conn)
            .await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_precision_ratios_come_back_as_given() {
        for given in [0.9_f64, 1.5, 3.3, 16.0, 1.0, 0.1] {
            let stored = given as f32;
            assert_eq!(ratio(stored), given);
        }
    }

    #[test]
    fn urls_as_the_deployment_tools_write_them() {
        assert!(is_mysql_url("mysql+pymysql://p:x@db/placement"));
        assert!(is_mysql_url("mysql://p@db/placement"));
        assert!(!is_mysql_url("postgresql+psycopg2://p@db/placement"));
        let dir = std::env::temp_dir().join(format!("my-cnf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let cnf = dir.join("my.cnf");
        std::fs::write(&cnf, "[mysql]\nuser = wrong\n[client]\nuser = placement\npassword = \"from cnf\"\nhost = 127.0.0.1\n").unwrap();
        let url = format!(
            "mysql+pymysql:///placement?charset=utf8&read_default_file={}",
            cnf.display()
        );
        let o = options(&url).unwrap();
        assert_eq!(o.get_username(), "placement");
        assert_eq!(o.get_host(), "127.0.0.1");
        assert_eq!(o.get_port(), 3306);
        assert_eq!(o.get_database(), Some("placement"));
        let o = options("mysql+pymysql://pl%40ce:p%2Fw@db.example:3307/placement?ssl_ca=/etc/ca.pem&ssl_verify_cert=true").unwrap();
        assert_eq!(o.get_username(), "pl@ce");
        assert_eq!(o.get_port(), 3307);
        // A CA checks the name too, unless told to check the chain only.
        let mode = |query: &str| {
            let o = options(&format!("mysql+pymysql://p@db/placement?{query}")).unwrap();
            format!("{:?}", o.get_ssl_mode())
        };
        assert_eq!(mode("ssl_ca=/etc/ca.pem"), "VerifyIdentity");
        assert_eq!(
            mode("ssl_ca=/etc/ca.pem&ssl_verify_cert=true"),
            "VerifyIdentity"
        );
        assert_eq!(
            mode("ssl_ca=/etc/ca.pem&ssl_verify_identity=false"),
            "VerifyCa"
        );
        assert_eq!(
            mode("ssl_ca=/etc/ca.pem&ssl_check_hostname=false"),
            "VerifyCa"
        );
        assert_eq!(mode("ssl_ca=/etc/ca.pem&ssl_verify_cert=false"), "Required");
        assert_eq!(mode("ssl_verify_identity=true"), "VerifyIdentity");
        assert_eq!(mode("charset=utf8"), "Preferred");
        let e = options("mysql+pymysql://u:s3cret%zz@db/placement").unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
