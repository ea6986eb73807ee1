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
