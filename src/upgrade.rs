//! What an upgrade runs, as the deployment tools run Placement's:
//! `placement db sync` (placement-manage's: apply the migrations, exit) and
//! `placement upgrade check` (placement-status's: can this build serve
//! that database and configuration?), with oslo.upgradecheck's results and
//! exit codes.

use crate::db;
use std::path::Path;

/// How one check came out (oslo.upgradecheck's `Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Success,
    Warning,
    Failure,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub outcome: Outcome,
    pub details: Option<String>,
}

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
    pub url: &'a str,
    pub policy_file: Option<&'a Path>,
    pub incomplete_consumer_project_id: &'a str,
}

/// Every check, in order; a database that cannot be reached is an error.
pub async fn check(input: &CheckInput<'_>) -> Result<Vec<Check>, String> {
    let pool = connect(input.url).await?;
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    let (pending, unknown) = db::migrations::compare(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let definitions_current = db::definitions::current(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let schema = if let Some(v) = unknown.first() {
        Check {
            name: "Database schema",
            outcome: Outcome::Failure,
            details: Some(format!(
                "migration {v} was applied by a newer release than this one"
            )),
        }
    } else if pending.is_empty() && !definitions_current {
        Check {
            name: "Database schema",
            outcome: Outcome::Failure,
            details: Some(
                "the database runs other definitions of the write path's functions than this release's; run `placement db sync`".into(),
            ),
        }
    } else if pending.is_empty() {
        Check {
            name: "Database schema",
            outcome: Outcome::Success,
            details: None,
        }
    } else {
        Check {
            name: "Database schema",
            outcome: Outcome::Failure,
            details: Some(format!(
                "{} migrations are not applied (the first: {} {}); run `placement db sync`",
                pending.len(),
                pending[0].version,
                pending[0].description
            )),
        }
    };
    let incomplete = if pending.is_empty() {
        let n = db::consumers::count_in_project(&mut conn, input.incomplete_consumer_project_id)
            .await
            .map_err(|e| e.to_string())?;
        Check {
            name: "Incomplete consumers",
            outcome: if n == 0 {
                Outcome::Success
            } else {
                Outcome::Warning
            },
            details: (n > 0).then(|| {
                format!(
                    "{n} consumers are owned by project {} (allocations written before microversion 1.8); Nova's next report gives them their owner",
                    input.incomplete_consumer_project_id
                )
            }),
        }
    } else {
        Check {
            name: "Incomplete consumers",
            outcome: Outcome::Warning,
            details: Some("not checked: the schema is not current".into()),
        }
    };
    drop(conn);
    pool.close().await;
    Ok(vec![schema, incomplete, policy_check(input.policy_file)])
}

/// The policy file reads and its rules build, as at start-up.
fn policy_check(path: Option<&Path>) -> Check {
    let name = "Policy file";
    let Some(path) = path else {
        return Check {
            name,
            outcome: Outcome::Success,
            details: Some("none configured: the default rules apply".into()),
        };
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check {
                name,
                outcome: Outcome::Warning,
                details: Some(format!(
                    "{} does not exist: the default rules apply",
                    path.display()
                )),
            }
        }
        Err(e) => {
            return Check {
                name,
                outcome: Outcome::Failure,
                details: Some(format!("{}: {e}", path.display())),
            }
        }
    };
    let shown = path.display().to_string();
    match crate::policy::Policy::build(crate::policy::Mode::default(), Some((&shown, &text))) {
        Ok(policy) if policy.warnings.is_empty() => Check {
            name,
            outcome: Outcome::Success,
            details: None,
        },
        Ok(policy) => Check {
            name,
            outcome: Outcome::Warning,
            details: Some(policy.warnings.join("; ")),
        },
        Err(e) => Check {
            name,
            outcome: Outcome::Failure,
            details: Some(e.to_string()),
        },
    }
}

/// oslo.upgradecheck's table.
pub fn render(checks: &[Check]) -> String {
    let lines: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            vec![
                format!("Check: {}", c.name),
                format!(
                    "Result: {}",
                    match c.outcome {
                        Outcome::Success => "Success",
                        Outcome::Warning => "Warning",
                        Outcome::Failure => "Failure",
                    }
                ),
                format!("Details: {}", c.details.as_deref().unwrap_or("None")),
            ]
        })
        .collect();
    let title = "Upgrade Check Results";
    let width = lines
        .iter()
        .flatten()
        .map(|l| l.chars().count())
        .chain([title.len()])
        .max()
        .unwrap_or(0);
    let rule = format!("+{}+", "-".repeat(width + 2));
    let row = |text: &str| format!("| {text}{} |", " ".repeat(width - text.chars().count()));
    let mut out = vec![rule.clone(), row(title), rule.clone()];
    for check in &lines {
        out.extend(check.iter().map(|l| row(l)));
        out.push(rule.clone());
    }
    out.join("\n")
}

/// placement-status's exit code: 0 all succeeded, 1 a warning, 2 a failure.
pub fn exit_code(checks: &[Check]) -> u8 {
    match checks.iter().map(|c| c.outcome).max() {
        Some(Outcome::Failure) => 2,
        Some(Outcome::Warning) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_the_exit_code_are_oslo_upgradechecks() {
        let checks = [
            Check {
                name: "Database schema",
                outcome: Outcome::Success,
                details: None,
            },
            Check {
                name: "Policy file",
                outcome: Outcome::Warning,
                details: Some("x does not exist".into()),
            },
        ];
        let table = render(&checks);
        assert!(table.starts_with("+---"), "{table}");
        assert!(table.contains("| Check: Database schema "), "{table}");
        assert!(table.contains("| Details: None "), "{table}");
        assert!(table.contains("| Result: Warning "), "{table}");
        let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
        assert_eq!(exit_code(&checks), 1);
        assert_eq!(exit_code(&checks[..1]), 0);
    }

    #[test]
    fn a_policy_file_that_does_not_build_fails_the_check() {
        let dir = std::env::temp_dir().join(format!("policy-check-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "\"placement:usages\": \"role:admin or\"\n").unwrap();
        assert_eq!(policy_check(Some(&bad)).outcome, Outcome::Failure);
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            "\"placement:resource_providers:list\": \"role:reader\"\n",
        )
        .unwrap();
        assert_eq!(policy_check(Some(&good)).outcome, Outcome::Success);
        assert_eq!(
            policy_check(Some(&dir.join("none.yaml"))).outcome,
            Outcome::Warning
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
