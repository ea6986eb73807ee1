//! Request schemas per microversion, transcribed from Placement's
//! `placement/schemas/*.py`, so that validation errors read the same.

pub mod allocations;
pub mod bodies;
pub mod extensions;
pub mod responses;
pub mod validate;

/// Named schemas for the OpenAPI components.
pub type Schemas = Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::Schema>)>;

/// Adds a type's schema and every schema it refers to.
pub fn register<T: utoipa::ToSchema>(out: &mut Schemas) {
    T::schemas(out);
    out.push((T::name().into_owned(), T::schema()));
}

use crate::api::microversion::Microversion;
use serde_json::{json, Value};

const MAX_INT: i64 = 2147483647;

fn uuid() -> Value {
    json!({"type": "string", "format": "uuid"})
}

fn nullable_uuid() -> Value {
    json!({"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]})
}

/// `POST /resource_providers`.
pub fn provider_create(mv: Microversion) -> Value {
    let mut s = json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 200}, "uuid": uuid()},
        "required": ["name"],
        "additionalProperties": false
    });
    if mv.at_least(1, 14) {
        s["properties"]["parent_provider_uuid"] = nullable_uuid();
    }
    s
}

/// `PUT /resource_providers/{uuid}`.
pub fn provider_update(mv: Microversion) -> Value {
    let mut s = json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 200}},
        "required": ["name"],
        "additionalProperties": false
    });
    if mv.at_least(1, 14) {
        s["properties"]["parent_provider_uuid"] = nullable_uuid();
    }
    s
}

/// Query of `GET /resource_providers`.
pub fn provider_list_query(mv: Microversion) -> Value {
    let mut props = json!({"name": {"type": "string"}, "uuid": uuid()});
    if mv.at_least(1, 3) {
        props["member_of"] = json!({"type": "string"});
    }
    if mv.at_least(1, 4) {
        props["resources"] = json!({"type": "string"});
    }
    if mv.at_least(1, 14) {
        props["in_tree"] = uuid();
    }
    if mv.at_least(1, 18) {
        props["required"] = json!({"type": "string"});
    }
    json!({"type": "object", "properties": props, "additionalProperties": false})
}

fn inventory_fields() -> Value {
    json!({
        "total": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "reserved": {"type": "integer", "maximum": MAX_INT, "minimum": 0},
        "min_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "max_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "step_size": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "allocation_ratio": {"type": "number", "maximum": 3.40282e38}
    })
}

/// `PUT /resource_providers/{uuid}/inventories/{rc}`.
pub fn inventory_put_one() -> Value {
    let mut props = inventory_fields();
    props["resource_provider_generation"] = json!({"type": "integer"});
    json!({"type": "object", "properties": props,
           "required": ["total", "resource_provider_generation"], "additionalProperties": false})
}

/// `POST /resource_providers/{uuid}/inventories`.
pub fn inventory_post() -> Value {
    let mut props = inventory_fields();
    props["resource_provider_generation"] = json!({"type": "integer"});
    props["resource_class"] = json!({"type": "string", "pattern": "^[A-Z0-9_]+$"});
    json!({"type": "object", "properties": props,
           "required": ["total", "resource_class"], "additionalProperties": false})
}

/// `PUT /resource_providers/{uuid}/inventories` (also the reshaper's inventories).
pub fn inventories_put() -> Value {
    let record = json!({"type": "object", "properties": inventory_fields(),
                        "required": ["total"], "additionalProperties": false});
    json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "inventories": {"type": "object", "patternProperties": {"^[A-Z0-9_]+$": record}}
        },
        "required": ["resource_provider_generation", "inventories"],
        "additionalProperties": false
    })
}

/// `PUT /resource_providers/{uuid}/aggregates`.
pub fn aggregates_put(mv: Microversion) -> Value {
    let list = json!({"type": "array", "items": uuid(), "uniqueItems": true});
    if mv.at_least(1, 19) {
        json!({"type": "object",
               "properties": {"aggregates": list, "resource_provider_generation": {"type": "integer"}},
               "required": ["aggregates", "resource_provider_generation"],
               "additionalProperties": false})
    } else {
        list
    }
}

/// `PUT /resource_providers/{uuid}/traits`.
pub fn provider_traits_put() -> Value {
    json!({
        "type": "object",
        "properties": {
            "traits": {"type": "array", "items": {"type": "string", "maxLength": 255}},
            "resource_provider_generation": {"type": "integer"}
        },
        "required": ["traits", "resource_provider_generation"],
        "additionalProperties": false
    })
}

/// Query of `GET /traits`.
pub fn traits_list_query() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}, "associated": {"type": "string"}},
           "additionalProperties": false})
}

/// `POST /resource_classes` and `PUT /resource_classes/{name}` bodies (1.2–1.6).
pub fn resource_class_body() -> Value {
    json!({"type": "object",
           "properties": {"name": {"type": "string", "pattern": "^CUSTOM\\_[A-Z0-9_]+$", "maxLength": 255}},
           "required": ["name"], "additionalProperties": false})
}

/// Query of `GET /usages`.
pub fn usages_query(mv: Microversion) -> Value {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 255});
    let mut props = json!({"project_id": id, "user_id": id});
    if mv.at_least(1, 38) {
        props["consumer_type"] = json!({"type": "string", "pattern": "^([A-Z0-9_]+|all|unknown)$", "minLength": 1, "maxLength": 255});
    }
    json!({"type": "object", "properties": props, "required": ["project_id"], "additionalProperties": false})
}

fn resources_map() -> Value {
    json!({"type": "object", "minProperties": 1,
           "patternProperties": {"^[0-9A-Z_]+$": {"type": "integer", "minimum": 1}},
           "additionalProperties": false})
}

fn owner_fields(s: &mut Value) {
    let id = json!({"type": "string", "minLength": 1, "maxLength": 255});
    s["properties"]["project_id"] = id.clone();
    s["properties"]["user_id"] = id;
}

fn push_required(s: &mut Value, name: &str) {
    if let Some(r) = s["required"].as_array_mut() {
        r.push(json!(name));
    }
}

/// One consumer's allocations in the dict form (1.12+), as PUT takes it;
/// `deletable` allows `{}` (POST /allocations, and PUT from 1.28).
pub fn allocations_dict(mv: Microversion, deletable: bool) -> Value {
    let mut allocs = json!({
        "type": "object",
        "patternProperties": {"^[0-9a-fA-F-]{36}$": {
            "type": "object",
            "properties": {"generation": {"type": "integer"}, "resources": resources_map()},
            "required": ["resources"],
            "additionalProperties": false
        }},
        "additionalProperties": false
    });
    if !deletable {
        allocs["minProperties"] = json!(1);
    }
    let mut s = json!({"type": "object", "properties": {"allocations": allocs},
                       "required": ["allocations"], "additionalProperties": false});
    owner_fields(&mut s);
    push_required(&mut s, "project_id");
    push_required(&mut s, "user_id");
    if mv.at_least(1, 28) {
        s["properties"]["consumer_generation"] = json!({"type": ["integer", "null"]});
        push_required(&mut s, "consumer_generation");
    }
    if mv.at_least(1, 34) {
        s["properties"]["mappings"] = json!({
            "type": "object", "minProperties": 1,
            "patternProperties": {"^[a-zA-Z0-9_-]{0,64}$": {"type": "array", "minItems": 1, "items": uuid()}},
            "additionalProperties": false
        });
    }
    if mv.at_least(1, 38) {
        s["properties"]["consumer_type"] =
            json!({"type": "string", "pattern": "^[A-Z0-9_]+$", "minLength": 1, "maxLength": 255});
        push_required(&mut s, "consumer_type");
    }
    s
}

/// `PUT /allocations/{consumer}` at any version.
pub fn allocations_put(mv: Microversion) -> Value {
    if mv.at_least(1, 12) {
        return allocations_dict(mv, mv.at_least(1, 28));
    }
    let mut s = json!({
        "type": "object",
        "properties": {"allocations": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "properties": {
                "resource_provider": {"type": "object", "properties": {"uuid": uuid()},
                                      "required": ["uuid"], "additionalProperties": false},
                "resources": resources_map()
            },
            "required": ["resource_provider", "resources"],
            "additionalProperties": false
        }}},
        "required": ["allocations"],
        "additionalProperties": false
    });
    if mv.at_least(1, 8) {
        owner_fields(&mut s);
        push_required(&mut s, "project_id");
        push_required(&mut s, "user_id");
    }
    s
}

/// `POST /allocations` (1.13+), also the reshaper's `allocations`.
pub fn allocations_post(mv: Microversion, allow_empty: bool) -> Value {
    let mut s = json!({
        "type": "object",
        "patternProperties": {"^[0-9a-fA-F-]{36}$": allocations_dict(mv, true)},
        "additionalProperties": false
    });
    if !allow_empty {
        s["minProperties"] = json!(1);
    }
    s
}

/// `POST /reshaper` (1.30+).
pub fn reshaper(mv: Microversion) -> Value {
    json!({
        "type": "object",
        "properties": {
            "inventories": {"type": "object", "minProperties": 1,
                            "patternProperties": {"^[0-9a-fA-F-]{36}$": inventories_put()},
                            "additionalProperties": false},
            "allocations": allocations_post(mv, true)
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": false
    })
}

/// Query of `GET /allocation_candidates`.
/// Our extension to the candidates query: the project asking, so that its
/// own reservations count as available (without it, no reservation does).
fn project_id() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255})
}

/// Our extension for low-priority work (§C.3): batch and free queries see
/// only the batch capacity of providers the load filter accepts.
fn priority_class() -> Value {
    json!({"type": "string", "enum": ["prod", "mid", "batch", "free"]})
}

/// Query of `GET /allocation_candidates` (plus our `project_id` and
/// `priority_class`).
pub fn candidates_query(mv: Microversion) -> Value {
    let limit = json!({"type": "string", "pattern": "^[1-9][0-9]*$"});
    if !mv.at_least(1, 25) {
        let mut props = json!({"resources": {"type": "string"}, "project_id": project_id(), "priority_class": priority_class()});
        if mv.at_least(1, 16) {
            props["limit"] = limit;
        }
        if mv.at_least(1, 17) {
            props["required"] = json!({"type": "string"});
        }
        if mv.at_least(1, 21) {
            props["member_of"] = json!({"type": "string"});
        }
        return json!({"type": "object", "properties": props, "required": ["resources"], "additionalProperties": false});
    }
    let suffix = if mv.at_least(1, 33) {
        "[a-zA-Z0-9_-]{1,64}"
    } else {
        "[1-9][0-9]*"
    };
    let mut props = json!({"group_policy": {"type": "string", "enum": ["none", "isolate"]}, "limit": limit, "project_id": project_id(), "priority_class": priority_class()});
    if mv.at_least(1, 35) {
        props["root_required"] = json!({"type": "string"});
    }
    if mv.at_least(1, 36) {
        props["same_subtree"] = json!({"type": "string"});
    }
    let mut patterns = serde_json::Map::new();
    let mut keys = vec!["resources", "required", "member_of"];
    if mv.at_least(1, 31) {
        keys.push("in_tree");
    }
    for k in keys {
        patterns.insert(format!("^{k}({suffix})?$"), json!({"type": "string"}));
    }
    json!({"type": "object", "properties": props, "patternProperties": patterns, "additionalProperties": false})
}
