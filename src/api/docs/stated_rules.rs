//! Rules the service holds a request to beyond the JSON schema it is
//! validated against, stated in the OpenAPI document so that a generated
//! client or an API tester can send exactly what is accepted. Where a
//! rule is data it is read from its source (`PriorityClass::range`, the
//! colocation policy's `RANGES` and `CHOICES`, `fairness::projects::WEIGHTS`);
//! the validation schemas stay Placement's, whose error texts clients
//! match.
//!
//! What no schema can say stays out: that a named class, trait, provider
//! or queue marker exists, and rules relating a body to what is stored.

use crate::api::routes::Route;
use crate::fairness::projects::WEIGHTS;
use crate::sched::colocation::knobs::{Policy, CHOICES, RANGES};
use crate::types::PriorityClass;
use serde_json::{json, Map, Value};

/// Any text without NUL, which PostgreSQL text cannot hold: bodies and
/// queries that carry one are refused (`extract::JsonBody`, `QueryPairs`).
const NO_NUL: &str = "^[^\\u0000]*$";

/// The document's request body of `r`: its validation schema, `schema`,
/// with the rules stated that its handler checks after validation.
pub fn body(r: &Route, mut schema: Value) -> Value {
    match (r.method.as_str(), r.path) {
        // Placement's provider object refuses an empty name ("name is
        // required"), which its schema allows.
        ("POST", "/resource_providers") | ("PUT", "/resource_providers/{uuid}") => {
            if let Some(name) = schema.pointer_mut("/properties/name") {
                name["minLength"] = json!(1);
            }
        }
        // Every class's priority in its range (`colocation::priority::put`).
        ("PUT", "/consumers/{consumer_uuid}/priority") => by_class(&mut schema, |_| true),
        // Batch and free instances' priorities (`deploy::batch_deployments`); the
        // strings are the query grammars of `required` and `member_of`.
        ("POST", "/deployments") => {
            by_class(&mut schema, PriorityClass::low);
            for name in ["required", "member_of"] {
                if let (Some(field), Some(grammar)) = (
                    schema.pointer_mut(&format!("/properties/{name}")),
                    grammar(name),
                ) {
                    *field = grammar;
                }
            }
        }
        // Weights within `fairness::projects::WEIGHTS`.
        ("PUT", "/projects/{project_id}/fairness") => {
            if let Some(weight) = schema.pointer_mut("/properties/weight") {
                weight["minimum"] = json!(WEIGHTS.start());
                weight["maximum"] = json!(WEIGHTS.end());
            }
        }
        // Each knob's type, range and choices (checked on the merged policy).
        ("PUT", "/colocation_policy" | "/resource_providers/{uuid}/colocation_policy") => {
            schema = colocation_policy();
        }
        _ => {}
    }
    every_value(&mut schema);
    schema
}

/// A query parameter's schema: the grammar Placement parses inside the
/// string where its validation schema says only "string", with the rules
/// every value is held to.
pub fn query_parameter(r: &Route, name: &str, schema: Value) -> Value {
    let mut out = match (r.path, name) {
        ("/traits", "name") => {
            json!({"type": "string", "pattern": format!("^(in:{CLASS}(,{CLASS})*|startswith:[A-Z0-9_]{{0,255}})$")})
        }
        _ => grammar(name).unwrap_or(schema),
    };
    every_value(&mut out);
    out
}

/// Whether the document calls a query parameter required where the
/// validation schema cannot: a candidates query needs `resources` (or a
/// suffixed `resourcesN`, which the document does not list one by one).
pub fn query_required(r: &Route, name: &str) -> bool {
    r.path.starts_with("/allocation_candidates") && name == "resources"
}

/// A path parameter's schema, with the rules every value is held to.
pub fn path_parameter(mut schema: Value) -> Value {
    every_value(&mut schema);
    schema
}

const CLASS: &str = "[A-Z0-9_]{1,255}";
const UUID: &str = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
const SUFFIX: &str = "_?[a-zA-Z0-9_-]{1,64}";

/// The grammars Placement parses inside a query value's string
/// (`api::allocation_candidates::query`), by parameter name.
fn grammar(name: &str) -> Option<Value> {
    let pattern = match name {
        "resources" => format!("^{CLASS}:[1-9][0-9]{{0,8}}(,{CLASS}:[1-9][0-9]{{0,8}})*$"),
        "required" | "root_required" => format!("^!?{CLASS}(,!?{CLASS})*$"),
        "member_of" => format!("^(in:)?{UUID}(,{UUID})*$"),
        "in_tree" => format!("^{UUID}$"),
        "same_subtree" => format!("^{SUFFIX}(,{SUFFIX})*$"),
        "associated" => "^(true|false)$".to_string(),
        _ => return None,
    };
    Some(json!({"type": "string", "pattern": pattern}))
}

/// `priority` within the range of `priority_class` for the classes
/// `checked` holds to one; the others (and an absent class, where the
/// body may leave it out) take any priority the schema allows.
fn by_class(schema: &mut Value, checked: fn(PriorityClass) -> bool) {
    let unchecked: Vec<&str> = PriorityClass::ALL
        .iter()
        .copied()
        .filter(|c| !checked(*c))
        .map(PriorityClass::name)
        .collect();
    let mut branches: Vec<Value> = PriorityClass::ALL
        .iter()
        .copied()
        .filter(|c| checked(*c))
        .map(|c| {
            json!({
                "required": ["priority_class"],
                "properties": {
                    "priority_class": {"enum": [c.name()]},
                    "priority": {"minimum": c.range().start(), "maximum": c.range().end()}
                }
            })
        })
        .collect();
    if !unchecked.is_empty() {
        branches.push(json!({"properties": {"priority_class": {"enum": unchecked}}}));
    }
    if let Some(object) = schema.as_object_mut() {
        object.insert("anyOf".into(), Value::Array(branches));
    }
}

/// The colocation policy's body: any of its knobs, each with its type
/// (optional ones may be null, meaning unset), range or choices.
fn colocation_policy() -> Value {
    let ranged = |name: &str, nullable: bool| {
        let (least, most) = RANGES
            .iter()
            .find(|(n, ..)| *n == name)
            .map_or((i64::MIN, None), |(_, least, most)| (*least, *most));
        let kind = if nullable {
            json!(["integer", "null"])
        } else {
            json!("integer")
        };
        json!({"type": kind, "minimum": least, "maximum": most.unwrap_or(i64::MAX)})
    };
    let defaults = serde_json::to_value(Policy::default()).unwrap_or_default();
    let mut fields = Map::new();
    for (name, default) in defaults.as_object().into_iter().flatten() {
        let field = if let Some((_, choices)) = CHOICES.iter().find(|(n, _)| n == name) {
            json!({"type": "string", "enum": choices})
        } else if let Some(inner) = default.as_object() {
            let properties: Map<String, Value> = inner
                .keys()
                .map(|k| (k.clone(), ranged(&format!("{name}.{k}"), false)))
                .collect();
            let required: Vec<&String> = inner.keys().collect();
            json!({"type": "object", "properties": properties, "required": required,
                   "additionalProperties": false})
        } else {
            ranged(name, default.is_null())
        };
        fields.insert(name.clone(), field);
    }
    json!({"type": "object", "properties": fields, "additionalProperties": false})
}

/// The rules every value is held to, on each string, key and integer of
/// a schema: no NUL, and integers that fit the 64 bits they are read into
/// (but generations: any number is taken there, and one that was never
/// handed out is a 409 conflict, as in Placement).
fn every_value(schema: &mut Value) {
    held(schema, "");
}

fn held(schema: &mut Value, name: &str) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let types: Vec<String> = match object.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let has = |object: &Map<String, Value>, k: &str| object.contains_key(k);
    let free_text = !["pattern", "enum", "format"].iter().any(|k| has(object, k));
    if types.iter().any(|t| t == "string") && free_text {
        object.insert("pattern".into(), json!(NO_NUL));
    }
    if types.iter().any(|t| t == "integer") && !name.ends_with("generation") {
        if !has(object, "minimum") && !has(object, "exclusiveMinimum") {
            object.insert("minimum".into(), json!(i64::MIN));
        }
        if !has(object, "maximum") && !has(object, "exclusiveMaximum") {
            object.insert("maximum".into(), json!(i64::MAX));
        }
    }
    let open = !matches!(object.get("additionalProperties"), Some(Value::Bool(false)));
    if types.iter().any(|t| t == "object") && open && !has(object, "propertyNames") {
        object.insert("propertyNames".into(), json!({"pattern": NO_NUL}));
    }
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(children)) => children
                .iter_mut()
                .for_each(|(name, child)| held(child, name)),
            ("patternProperties", Value::Object(children)) => {
                children.values_mut().for_each(|child| held(child, ""))
            }
            ("anyOf" | "oneOf" | "allOf", Value::Array(children)) => {
                children.iter_mut().for_each(|child| held(child, name))
            }
            ("items" | "additionalProperties", child @ Value::Object(_)) => held(child, ""),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::schema::validate::validate;

    fn accepts(schema: &Value, body: Value) -> bool {
        validate(schema, &body).is_ok()
    }

    #[test]
    fn the_policy_document_takes_the_defaults_and_refuses_what_validate_refuses() {
        let schema = body_of("PUT", "/colocation_policy");
        let defaults = serde_json::to_value(Policy::default()).unwrap();
        assert!(accepts(&schema, defaults));
        for (field, bad) in [
            ("cpuSuppressThresholdPercent", json!(101)),
            ("forbidUsageThresholds", json!({"cpu": -1, "memory": 95})),
            ("degradeTimeMinutes", json!(0)),
            ("cpuCalculatePolicy", json!("request")),
            ("cpuReclaimThresholdPercent", json!(null)),
        ] {
            assert!(!accepts(&schema, json!({field: bad})), "{field}: {bad}");
            // The code refuses each as well, from the same table.
            assert!(
                Policy::layered(&[Some(&json!({field: bad}))]).is_err(),
                "{field}"
            );
        }
        assert!(accepts(&schema, json!({"batchCPUThresholdPercent": null})));
    }

    #[test]
    fn priorities_are_held_to_their_class_range() {
        let schema = body_of("PUT", "/consumers/{consumer_uuid}/priority");
        for &class in PriorityClass::ALL {
            let (lo, hi) = (*class.range().start(), *class.range().end());
            for (p, ok) in [(lo, true), (hi, true), (lo - 1, false), (hi + 1, false)] {
                let body = json!({"priority_class": class.name(), "priority": p});
                assert_eq!(accepts(&schema, body), ok, "{class:?} {p}");
                assert_eq!(class.admits(p).is_ok(), ok);
            }
        }
        // Deployments check the low classes alone.
        let schema = body_of("POST", "/deployments");
        let d = |class: &str, p: i32| {
            json!({"app": "a", "count": 1, "memory_mb": 1, "project_id": "p",
            "user_id": "u", "priority_class": class, "priority": p})
        };
        assert!(accepts(&schema, d("prod", 5)));
        assert!(!accepts(&schema, d("batch", 5)));
        assert!(accepts(&schema, d("batch", 5000)));
    }

    #[test]
    fn every_string_refuses_nul_and_integers_fit_64_bits_but_generations() {
        let schema = body_of("PUT", "/allocations/{consumer_uuid}");
        assert_eq!(
            schema.pointer("/properties/project_id/pattern"),
            Some(&json!(NO_NUL)),
            "{schema}"
        );
        let regex = regex::Regex::new(NO_NUL).unwrap();
        assert!(regex.is_match("plain text"));
        assert!(!regex.is_match("a\0b"));
        assert_eq!(
            schema.pointer("/properties/consumer_generation/maximum"),
            None,
            "{schema}"
        );
    }

    fn body_of(method: &str, path: &str) -> Value {
        let route = crate::api::routes::all()
            .find(|r| r.method.as_str() == method && r.path == path)
            .unwrap();
        body(route, (route.takes.unwrap())())
    }
}
