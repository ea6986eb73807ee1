//! The schema's migrations, and the few whose text changed after release.
//!
//! sqlx refuses to start when an applied migration's checksum differs from
//! its file's. A migration is rewritten only when its first text cannot run
//! somewhere it must (20261206000001 and 20261207000001 named a custom
//! parameter in a function's `SET` clause, which PostgreSQL allows only a
//! superuser) and the new text ends in the same behaviour. A database that
//! applied the first text is then taken to have applied the new one: its
//! recorded checksum is moved forward, and its objects stay as the first
//! text made them.

use sqlx::migrate::Migrator;
use sqlx::PgConnection;

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// A migration whose text was replaced: its version, and the SHA-384 of
/// the text first released (what sqlx recorded when it applied it).
struct Rewritten {
    version: i64,
    first_checksum: &'static str,
}

const REWRITTEN: &[Rewritten] = &[
    Rewritten {
        version: 20261206000001,
        first_checksum: "549489dcf78978b8d0d410a40ded1d1125b87455d203e5adf8ce32a1803a63f3f9841a96aab3526fa7b037d783264e7f",
    },
    Rewritten {
        version: 20261207000001,
        first_checksum: "b4c06c32f7e260301e90a6456565561b62f984e33d0ee7181889a60047e6018e231736e5b8586e4fde8f3d1675cf79f9",
    },
];

/// Applies every migration not applied yet, after recording the current
/// text of a rewritten migration where its first text was applied, then
/// the current definitions (`db::definitions`). The caller holds the
/// migration lock.
pub async fn run(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    accept_rewritten(conn).await?;
    MIGRATOR
        .run(&mut *conn)
        .await
        .map_err(|e| sqlx::Error::Migrate(Box::new(e)))?;
    // A database a newer release migrated keeps that release's functions:
    // this build's text may call for a schema it does not know.
    let (_, unknown) = compare(&mut *conn).await?;
    if unknown.is_empty() {
        super::definitions::apply(&mut *conn).await?;
    }
    Ok(())
}

/// A migration of this build the database has not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub version: i64,
    pub description: String,
}

/// Migrations this build has that the database has not applied (all of
/// them on an empty database), and migrations the database applied that
/// this build does not know (a newer release ran there).
pub async fn compare(conn: &mut PgConnection) -> Result<(Vec<Pending>, Vec<i64>), sqlx::Error> {
    let recorded: bool =
        crate::db::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    let applied: Vec<i64> = if recorded {
        crate::db::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&mut *conn)
        .await?
    } else {
        Vec::new()
    };
    let pending = MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| Pending {
            version: m.version,
            description: m.description.to_string(),
        })
        .collect();
    let unknown = applied
        .into_iter()
        .filter(|v| !MIGRATOR.iter().any(|m| m.version == *v))
        .collect();
    Ok((pending, unknown))
}

async fn accept_rewritten(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let recorded: bool =
        crate::db::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !recorded {
        return Ok(());
    }
    for rewritten in REWRITTEN {
        let Some(current) = MIGRATOR.iter().find(|m| m.version == rewritten.version) else {
            continue;
        };
        crate::db::query(
            "UPDATE _sqlx_migrations SET checksum = $1
              WHERE version = $2 AND encode(checksum, 'hex') = $3",
        )
        .bind(current.checksum.as_ref())
        .bind(rewritten.version)
        .bind(rewritten.first_checksum)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rewritten_migration_exists_and_changed() {
        for rewritten in REWRITTEN {
            let current = MIGRATOR
                .iter()
                .find(|m| m.version == rewritten.version)
                .expect("a rewritten migration is still a migration");
            let hex: String = current
                .checksum
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_ne!(hex, rewritten.first_checksum, "{}", rewritten.version);
            assert_eq!(rewritten.first_checksum.len(), 96);
        }
    }
}
