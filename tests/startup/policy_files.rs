//! Policy files as operators write them, decided as oslo.policy 6.0.1
//! decides: tests/data/oslo-policy-decisions.json records oslo.policy's
//! answers (scripts/oslo_policy_decisions.py, checked against the library
//! by scripts/oslo_check.sh) for every file of tests/data/policy-files/,
//! and the service's policy must answer every question alike. A file
//! named `refused-here-*` is one oslo.policy reads but this service
//! refuses on purpose (an unquoted `!`, which oslo.policy takes as
//! "everyone").

use placement::policy::{Credentials, Decision, Mode, Policy, Target};
use std::collections::BTreeMap;

#[derive(serde::Deserialize)]
struct Record {
    callers: BTreeMap<String, Caller>,
    target: BTreeMap<String, String>,
    files: BTreeMap<String, Outcome>,
}

#[derive(serde::Deserialize)]
struct Caller {
    roles: Vec<String>,
    project_id: Option<String>,
    system_scope: Option<String>,
}

#[derive(serde::Deserialize)]
struct Outcome {
    decisions: Option<BTreeMap<String, BTreeMap<String, bool>>>,
    refused: Option<String>,
}

fn data(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path)
}

#[test]
fn every_policy_file_decides_as_oslo_policy_decides() {
    let record: Record = serde_json::from_str(
        &std::fs::read_to_string(data("oslo-policy-decisions.json")).expect("the record"),
    )
    .expect("the record parses");
    let mut files: Vec<String> = std::fs::read_dir(data("policy-files"))
        .expect("the files")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        record.files.keys().cloned().collect::<Vec<_>>(),
        "every file is recorded (run scripts/oslo_policy_decisions.py)"
    );
    // oslo.policy 6's defaults: only the new defaults; scope enforced.
    let mode = Mode {
        enforce_new_defaults: true,
        enforce_scope: true,
    };
    let mut target = Target::new();
    for (k, v) in &record.target {
        let key: &'static str = match k.as_str() {
            "project_id" => "project_id",
            "user_id" => "user_id",
            other => panic!("target key {other}"),
        };
        target.insert(key, v.clone());
    }
    let mut compared = 0;
    for name in files {
        let text = std::fs::read_to_string(data("policy-files").join(&name)).expect("read");
        let ours = Policy::build(mode, Some((&name, &text)));
        let theirs = &record.files[&name];
        match (&ours, &theirs.decisions, &theirs.refused) {
            (Err(_), _, _) if name.starts_with("refused-here-") => continue,
            (Ok(_), _, _) if name.starts_with("refused-here-") => {
                panic!("{name}: accepted, but refused here on purpose")
            }
            (Err(_), None, Some(_)) => continue,
            (Err(e), _, _) => panic!("{name}: refused ({e}), oslo.policy reads it"),
            (Ok(_), None, refused) => panic!("{name}: accepted, oslo.policy refused: {refused:?}"),
            (Ok(policy), Some(decisions), _) => {
                for (rule, by_caller) in decisions {
                    for (who, allowed) in by_caller {
                        let c = &record.callers[who];
                        let creds = Credentials {
                            user_id: format!("u-{who}"),
                            project_id: c.project_id.clone(),
                            domain_id: None,
                            roles: c.roles.clone(),
                            system_scope: c.system_scope.clone(),
                        };
                        let ours = policy.enforce(rule, &creds, &target) == Decision::Allowed;
                        assert_eq!(ours, *allowed, "{name}: {rule} for {who}");
                        compared += 1;
                    }
                }
            }
        }
    }
    println!("policy decisions: {compared} compared with oslo.policy's, all equal");
}
