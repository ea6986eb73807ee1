//! The checks of `upgrade check`, as pure functions of what was read:
//! placement-status's three first (its names and words, so that a gate
//! written for placement-status reads ours), then this service's own.

use crate::db::import::source::StatusCounts;
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

impl Check {
    fn success(name: &'static str) -> Check {
        Check {
            name,
            outcome: Outcome::Success,
            details: None,
        }
    }

    fn with(name: &'static str, outcome: Outcome, details: String) -> Check {
        Check {
            name,
            outcome,
            details: Some(details),
        }
    }
}

/// Where this service's schema stands against this build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    Current,
    /// Migrations not applied yet: how many, and the first.
    Behind {
        count: usize,
        first: String,
    },
    /// A migration a newer release applied.
    Newer(i64),
    /// Every migration applied, but the write path's functions differ.
    OtherDefinitions,
}

/// Every check in order: placement-status's, then the policy file's
/// rules, then (on this service's database) its schema.
pub fn all(counts: StatusCounts, policy_file: Option<&Path>, schema: Option<Schema>) -> Vec<Check> {
    let mut checks = vec![
        missing_root_ids(counts.missing_root_ids),
        incomplete_consumers(counts.missing_consumers),
        policy_json(policy_file),
        policy_rules(policy_file),
    ];
    checks.extend(schema.map(schema_check));
    checks
}

/// placement-status's "Missing Root Provider IDs".
fn missing_root_ids(count: i64) -> Check {
    let name = "Missing Root Provider IDs";
    if count == 0 {
        return Check::success(name);
    }
    Check::with(
        name,
        Outcome::Failure,
        "There is at least one resource provider table record which misses its root provider id. \
         Run the \"placement-manage db online_data_migrations\" command."
            .into(),
    )
}

/// placement-status's "Incomplete Consumers": allocations whose consumer
/// has no row. A consumer owned by the incomplete-consumer project is
/// complete (Placement made its row), so it never counts.
fn incomplete_consumers(count: i64) -> Check {
    let name = "Incomplete Consumers";
    if count == 0 {
        return Check::success(name);
    }
    Check::with(
        name,
        Outcome::Warning,
        format!(
            "There are {count} incomplete consumers table records for existing allocations. \
             Run the \"placement-manage db online_data_migrations\" command."
        ),
    )
}

/// oslo.upgradecheck's "Policy File JSON to YAML Migration": a policy
/// file that parses as JSON fails, as it does for placement-status.
fn policy_json(path: Option<&Path>) -> Check {
    let name = "Policy File JSON to YAML Migration";
    let is_json = path
        .and_then(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|text| serde_json::from_str::<serde_json::Value>(&text).is_ok());
    if !is_json {
        return Check::success(name);
    }
    Check::with(
        name,
        Outcome::Failure,
        "Your policy file is JSON-formatted which is deprecated. You need to switch to \
         YAML-formatted file. Use the ``oslopolicy-convert-json-to-yaml`` tool to convert the \
         existing JSON-formatted files to YAML in a backwards-compatible manner: \
         https://docs.openstack.org/oslo.policy/latest/cli/oslopolicy-convert-json-to-yaml.html."
            .into(),
    )
}

/// This service's own: the policy file's rules build, as at start-up. A
/// file that is not there is oslo.policy's defaults (no finding, as for
/// placement-status); what builds with warnings is a success that says so.
fn policy_rules(path: Option<&Path>) -> Check {
    let name = "Policy file rules";
    let Some(path) = path else {
        return Check::success(name);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::with(
                name,
                Outcome::Success,
                format!("{} does not exist: the default rules apply", path.display()),
            )
        }
        Err(e) => return Check::with(name, Outcome::Failure, format!("{}: {e}", path.display())),
    };
    let shown = path.display().to_string();
    match crate::policy::Policy::build(crate::policy::Mode::default(), Some((&shown, &text))) {
        Ok(policy) if policy.warnings.is_empty() => Check::success(name),
        Ok(policy) => Check::with(name, Outcome::Success, policy.warnings.join("; ")),
        Err(e) => Check::with(name, Outcome::Failure, e.to_string()),
    }
}

/// This service's own: its schema is this build's.
fn schema_check(schema: Schema) -> Check {
    let name = "Database schema";
    match schema {
        Schema::Current => Check::success(name),
        Schema::Behind { count, first } => Check::with(
            name,
            Outcome::Failure,
            format!(
                "{count} migrations are not applied (the first: {first}); run `placement db sync`"
            ),
        ),
        Schema::Newer(v) => Check::with(
            name,
            Outcome::Failure,
            format!("migration {v} was applied by a newer release than this one"),
        ),
        Schema::OtherDefinitions => Check::with(
            name,
            Outcome::Failure,
            "the database runs other definitions of the write path's functions than this \
             release's; run `placement db sync`"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: StatusCounts = StatusCounts {
        missing_root_ids: 0,
        missing_consumers: 0,
    };

    #[test]
    fn placement_status_checks_come_first_with_its_names() {
        let names: Vec<&str> = all(CLEAN, None, Some(Schema::Current))
            .iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "Missing Root Provider IDs",
                "Incomplete Consumers",
                "Policy File JSON to YAML Migration",
                "Policy file rules",
                "Database schema"
            ]
        );
        let found = all(
            StatusCounts {
                missing_root_ids: 2,
                missing_consumers: 3,
            },
            None,
            None,
        );
        assert_eq!(found[0].outcome, Outcome::Failure);
        assert_eq!(found[1].outcome, Outcome::Warning);
        assert!(found[1]
            .details
            .as_deref()
            .unwrap()
            .starts_with("There are 3 incomplete"));
    }

    #[test]
    fn a_policy_file_is_judged_as_oslo_and_as_the_server_would() {
        let dir = std::env::temp_dir().join(format!("policy-check-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, "\"placement:usages\": \"role:admin or\"\n").unwrap();
        assert_eq!(policy_rules(Some(&bad)).outcome, Outcome::Failure);
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            "\"placement:resource_providers:list\": \"role:reader\"\n",
        )
        .unwrap();
        assert_eq!(policy_rules(Some(&good)).outcome, Outcome::Success);
        assert_eq!(policy_json(Some(&good)).outcome, Outcome::Success);
        let json = dir.join("policy.json");
        std::fs::write(&json, "{\"placement:usages\": \"role:admin\"}").unwrap();
        assert_eq!(policy_json(Some(&json)).outcome, Outcome::Failure);
        let none = dir.join("none.yaml");
        assert_eq!(policy_rules(Some(&none)).outcome, Outcome::Success);
        assert_eq!(policy_json(Some(&none)).outcome, Outcome::Success);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
