//! The order of every answer, as the real Placement gives it: a history
//! recorded once from openstack-placement 16.0.0
//! (`scripts/record_answer_order.sh`, on MariaDB and on SQLite) is replayed
//! here, and each answer must carry the same keys in the same order, and
//! each list in the same order, wherever Placement's order is fixed (the
//! recording marks the answers whose order is the query plan's instead:
//! those must hold the same values in any order). Clients such as
//! osc-placement print one row per key in the order received, so the
//! order is part of what a client sees.

use crate::common::TestApp;
use serde::Deserialize;
use serde_json::Value;

const RECORDING: &str = include_str!("../data/placement-answer-order.json");

#[derive(Deserialize)]
struct Recording {
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    method: String,
    path: String,
    microversion: String,
    body: Option<Value>,
    status: u16,
    answer: Option<Value>,
    order_fixed: bool,
}

/// `value` with every object's keys and every list sorted: what is left to
/// compare where the order is not Placement's.
fn unordered(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), unordered(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(unordered).collect();
            items.sort_by_key(|v| v.to_string());
            Value::Array(items)
        }
        other => other.clone(),
    }
}

/// `value`'s text: two values are equal in order exactly when their texts
/// are (`Value`'s own `==` ignores the order of an object's keys).
fn in_order(value: &Value) -> String {
    value.to_string()
}

#[tokio::test]
async fn answers_come_in_placements_order() {
    let recording: Recording = serde_json::from_str(RECORDING).expect("the recording parses");
    let t = TestApp::new().await;
    let mut differences = Vec::new();
    for step in &recording.steps {
        let mut req = t.req(&step.method, &step.path).mv(&step.microversion);
        if let Some(body) = &step.body {
            req = req.json(body);
        }
        let resp = req.send().await;
        let where_ = format!("{} {} at {}", step.method, step.path, step.microversion);
        if resp.status.as_u16() != step.status {
            differences.push(format!("{where_}: status {} ({resp:?})", step.status));
            continue;
        }
        let answer = (!resp.body.is_empty()).then(|| resp.json());
        let same = match (&answer, &step.answer) {
            (Some(ours), Some(theirs)) if step.order_fixed => in_order(ours) == in_order(theirs),
            (Some(ours), Some(theirs)) => unordered(ours) == unordered(theirs),
            (ours, theirs) => ours == theirs,
        };
        if !same {
            differences.push(format!(
                "{where_}:\n  Placement: {}\n  ours:      {}",
                step.answer
                    .as_ref()
                    .map_or("(none)".into(), Value::to_string),
                answer.as_ref().map_or("(none)".into(), Value::to_string),
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} answers differ from Placement's:\n{}",
        differences.len(),
        recording.steps.len(),
        differences.join("\n")
    );
}
