//! The validator's messages against texts Python jsonschema 4.26 printed
//! for the same schema and instance.

use super::*;
use serde_json::json;

fn message(schema: &Value, instance: &Value) -> String {
    validate(schema, instance)
        .err()
        .map_or(String::new(), |e| e.message)
}

#[test]
fn messages_match_python() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "total": {"type": "integer", "minimum": 1}
        },
        "required": ["name"],
        "additionalProperties": false
    });
    let err = |v: Value| message(&schema, &v);
    assert_eq!(err(json!({})), "'name' is a required property");
    assert_eq!(
        err(json!({"name": "a", "x": 1})),
        "Additional properties are not allowed ('x' was unexpected)"
    );
    assert_eq!(err(json!({"name": "abcdefg"})), "'abcdefg' is too long");
    assert_eq!(
        err(json!({"name": "a", "total": 0})),
        "0 is less than the minimum of 1"
    );
    assert_eq!(
        err(json!({"name": "a", "total": 1.5})),
        "1.5 is not of type 'integer'"
    );
    assert_eq!(err(json!({"name": 3})), "3 is not of type 'string'");
    // Draft 2020-12: a number without a fraction is an integer.
    assert!(validate(&schema, &json!({"name": "a", "total": 1.0})).is_ok());
    let e = validate(&schema, &json!({"name": "a", "total": 0})).unwrap_err();
    assert!(e
        .render()
        .contains("Failed validating 'minimum' in schema['properties']['total']"));
}

#[test]
fn sizes_use_the_new_wording_for_one_and_zero() {
    let s = |kw: &str, n: u64, t: &str| json!({"type": t, kw: n});
    assert_eq!(
        message(&s("minProperties", 1, "object"), &json!({})),
        "{} should be non-empty"
    );
    assert_eq!(
        message(&s("minItems", 1, "array"), &json!([])),
        "[] should be non-empty"
    );
    assert_eq!(
        message(&s("minLength", 1, "string"), &json!("")),
        "'' should be non-empty"
    );
    assert_eq!(
        message(&s("minLength", 2, "string"), &json!("a")),
        "'a' is too short"
    );
    assert_eq!(
        message(&s("minProperties", 2, "object"), &json!({"a": 1})),
        "{'a': 1} does not have enough properties"
    );
    assert_eq!(
        message(&s("maxItems", 0, "array"), &json!([1])),
        "[1] is expected to be empty"
    );
}

#[test]
fn pattern_properties_message() {
    let schema = json!({"type": "object", "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer"}}, "additionalProperties": false});
    assert_eq!(
        message(&schema, &json!({"bad": 1})),
        "'bad' does not match any of the regexes: '^[A-Z0-9_]+$'"
    );
}

/// Python printed this for `PUT /resource_providers/{u}/aggregates` at 1.19
/// with `["a", "b", "c"]`: the last of equal siblings wins, indexes are
/// unquoted.
#[test]
fn the_last_sibling_is_reported_with_its_index() {
    let schema = json!({
        "type": "object",
        "properties": {
            "aggregates": {"type": "array", "items": {"type": "string", "format": "uuid"}, "uniqueItems": true},
            "resource_provider_generation": {"type": "integer"}
        },
        "required": ["aggregates", "resource_provider_generation"],
        "additionalProperties": false
    });
    let e = validate(
        &schema,
        &json!({"aggregates": ["a", "b", "c"], "resource_provider_generation": 1}),
    )
    .unwrap_err();
    assert_eq!(
        e.render(),
        "'c' is not a 'uuid'\n\nFailed validating 'format' in schema['properties']['aggregates']['items']:\n    {'type': 'string', 'format': 'uuid'}\n\nOn instance['aggregates'][2]:\n    'c'"
    );
}

/// `anyOf` reports its best branch, relative to the branch.
#[test]
fn any_of_reports_the_branch_of_the_instance_type() {
    let schema = json!({"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]});
    let e = validate(&schema, &json!("xyz")).unwrap_err();
    assert_eq!(
        e.render(),
        "'xyz' is not a 'uuid'\n\nFailed validating 'format' in schema[0]:\n    {'type': 'string', 'format': 'uuid'}\n\nOn instance:\n    'xyz'"
    );
}

#[test]
fn whole_floats_become_integers_where_the_schema_says_integer() {
    let schema = json!({"type": "object", "properties": {
        "total": {"type": "integer"}, "ratio": {"type": "number"},
        "inventories": {"type": "object", "patternProperties": {"^[A-Z]+$": {"type": "object",
            "properties": {"total": {"type": "integer"}}}}}}});
    let mut v = json!({"total": 4.0, "ratio": 2.0, "inventories": {"VCPU": {"total": 8.0}}});
    assert!(validate(&schema, &v).is_ok());
    integers_as_integers(&schema, &mut v);
    assert_eq!(
        v,
        json!({"total": 4, "ratio": 2.0, "inventories": {"VCPU": {"total": 8}}})
    );
    assert!(v["total"].is_i64() && v["inventories"]["VCPU"]["total"].is_i64());
}

/// uniqueItems compares as `==` does (objects' keys in any order) and is
/// linear: 60,000 distinct uuids pass, one repeated at the end fails.
#[test]
fn unique_items_is_equality_and_scales() {
    let schema = json!({"type": "array", "uniqueItems": true});
    assert!(validate(
        &schema,
        &json!([{"a": 1, "b": [2, {"c": 3, "d": 4}]}, {"b": [2, {"d": 4, "c": 3}], "a": 1}])
    )
    .is_err());
    assert!(validate(
        &schema,
        &json!([{"a": 1}, {"a": 2}, [1, 2], [2, 1], "1", 1])
    )
    .is_ok());
    let mut many: Vec<serde_json::Value> = (0..60_000)
        .map(|_| json!(uuid::Uuid::new_v4().to_string()))
        .collect();
    assert!(validate(&schema, &serde_json::Value::Array(many.clone())).is_ok());
    many.push(many[0].clone());
    let e = validate(&schema, &serde_json::Value::Array(many)).unwrap_err();
    assert!(e.render().contains("has non-unique elements"));
}
