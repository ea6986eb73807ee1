//! Schema pieces shared by our extension routes' request checks.

use serde_json::{json, Value};

/// A project id as Placement's consumer bodies take it.
pub fn project_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255})
}

/// Units by class: non-negative whole numbers.
pub fn amounts_schema(minimum: i64) -> Value {
    json!({
        "type": "object",
        "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer", "minimum": minimum, "maximum": 9007199254740991_i64}},
        "additionalProperties": false
    })
}

/// The fields of one admission request, shared by `POST /admissions`
/// (which adds the caller's `id`) and `POST /queue` (which adds
/// `priority` and `expires_in`).
pub fn admission_request_properties() -> serde_json::Map<String, Value> {
    let mut resources = amounts_schema(1);
    resources["minProperties"] = json!(1);
    let properties = json!({
        "consumer_uuid": {"type": "string", "format": "uuid"},
        "project_id": project_id_schema(),
        "user_id": project_id_schema(),
        "resources": resources,
        "required": {"type": "array", "maxItems": 64, "items": {"type": "string", "pattern": "^!?[A-Z0-9_]{1,255}$"}},
        "member_of": {"type": "array", "maxItems": 64, "items": {"type": "string", "format": "uuid"}},
        "priority_class": {"enum": crate::types::PriorityClass::names()},
        "consumer_type": {"type": "string", "pattern": "^[A-Z0-9_]+$", "maxLength": 255}
    });
    match properties {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}
