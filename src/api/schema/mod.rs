//! Request schemas per microversion, transcribed from Placement's
//! `placement/schemas/*.py`, so that validation errors read the same.

pub mod allocations;
pub mod bodies;
pub mod extensions;
pub mod pyrepr;
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
use crate::microversions::LATEST;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::sync::OnceLock;

/// One slot per minor version served.
pub(crate) const VERSIONS: usize = LATEST.minor as usize + 1;

/// Schemas of a hot path, one per microversion, each built once: a claim's
/// `PUT` and every candidates query built theirs on every request, about a
/// tenth of the server's CPU in the claims bench.
pub(crate) type PerVersion = [OnceLock<Value>; VERSIONS];

/// The schema `build` makes for `mv`, from `cache` once built (a version
/// outside the cache's range, never negotiated, is built each time).
pub(crate) fn per_version(
    cache: &'static PerVersion,
    mv: Microversion,
    build: fn(Microversion) -> Value,
) -> Cow<'static, Value> {
    match cache.get(usize::from(mv.minor)) {
        Some(slot) if mv.major == LATEST.major => Cow::Borrowed(slot.get_or_init(|| build(mv))),
        _ => Cow::Owned(build(mv)),
    }
}

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

/// The keys of `GET /resource_providers` that may repeat, each value
/// counting (1.24 and 1.18's filters; the schema allows them).
pub fn provider_list_repeats(key: &str) -> bool {
    key == "required" || key == "member_of"
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
        "resource_provider_generation": {"type": "integer"},
        "total": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "reserved": {"type": "integer", "maximum": MAX_INT, "minimum": 0},
        "min_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "max_unit": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "step_size": {"type": "integer", "maximum": MAX_INT, "minimum": 1},
        "allocation_ratio": {"type": "number", "maximum": 3.40282e38}
    })
}

/// `PUT /resource_providers/{uuid}/inventories/{rc}` (BASE_INVENTORY_SCHEMA).
pub fn inventory_put_one() -> Value {
    json!({"type": "object", "properties": inventory_fields(),
           "required": ["total", "resource_provider_generation"], "additionalProperties": false})
}

/// `POST /resource_providers/{uuid}/inventories`.
pub fn inventory_post() -> Value {
    let mut props = inventory_fields();
    props["resource_class"] = json!({"type": "string", "pattern": RC_PATTERN});
    json!({"type": "object", "properties": props,
           "required": ["total", "resource_class"], "additionalProperties": false})
}

/// `PUT /resource_providers/{uuid}/inventories` (also the reshaper's
/// inventories). Like Placement's, a record may carry a (ignored)
/// `resource_provider_generation` of its own.
pub fn inventories_put() -> Value {
    let record = json!({"type": "object", "properties": inventory_fields(),
                        "required": ["total"], "additionalProperties": false});
    json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "inventories": {"type": "object", "patternProperties": {RC_PATTERN: record}}
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
            "traits": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 255}},
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

/// `POST /resource_classes` and `PUT /resource_classes/{name}` bodies
/// (1.2–1.6), and the path's name from 1.7.
pub fn resource_class_body() -> Value {
    json!({"type": "object",
           "properties": {"name": {"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255}},
           "required": ["name"], "additionalProperties": false})
}

/// Query of `GET /usages`. The consumer type's pattern is Placement's, as
/// loose as it is (`^all` also admits `allfoo`, which then matches nothing).
pub fn usages_query(mv: Microversion) -> Value {
    let mut props = json!({"project_id": external_id(), "user_id": external_id()});
    if mv.at_least(1, 38) {
        props["consumer_type"] = json!({"type": "string", "pattern": "^[A-Z0-9_]+$|^all|^unknown$", "minLength": 1, "maxLength": 255});
    }
    json!({"type": "object", "properties": props, "required": ["project_id"], "additionalProperties": false})
}

/// Resource class names, as Placement's schemas match them.
const RC_PATTERN: &str = "^[A-Z0-9_]+$";

/// Provider and consumer uuids as Placement's schemas match keys.
const UUID_PATTERN: &str = "^[0-9a-fA-F-]{36}$";

pub(crate) fn external_id() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255})
}

fn resources_map() -> Value {
    json!({"type": "object", "minProperties": 1,
           "patternProperties": {RC_PATTERN: {"type": "integer", "minimum": 1}},
           "additionalProperties": false})
}

/// The list form of `PUT /allocations/{consumer}` (before 1.12).
fn allocations_list(mv: Microversion) -> Value {
    let mut s = json!({
        "type": "object",
        "properties": {"allocations": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "properties": {
                "resource_provider": {"type": "object", "properties": {"uuid": uuid()},
                                      "additionalProperties": false, "required": ["uuid"]},
                "resources": resources_map()
            },
            "required": ["resource_provider", "resources"],
            "additionalProperties": false
        }}},
        "required": ["allocations"],
        "additionalProperties": false
    });
    if mv.at_least(1, 8) {
        s["properties"]["project_id"] = external_id();
        s["properties"]["user_id"] = external_id();
        s["required"] = json!(["allocations", "project_id", "user_id"]);
    }
    s
}

/// One consumer's allocations in the dict form (1.12+): Placement's
/// ALLOCATION_SCHEMA_V1_12 and its descendants. `min_allocations` is 1 for
/// PUT before 1.28, 0 (`{}` deletes) for PUT from 1.28 and for POST.
pub fn allocations_dict(mv: Microversion, min_allocations: u8) -> Value {
    let allocs = json!({
        "type": "object",
        "minProperties": min_allocations,
        "patternProperties": {UUID_PATTERN: {
            "type": "object",
            "properties": {"generation": {"type": "integer"}, "resources": resources_map()},
            "required": ["resources"],
            "additionalProperties": false
        }},
        "additionalProperties": false
    });
    let mut props =
        json!({"allocations": allocs, "project_id": external_id(), "user_id": external_id()});
    let mut required = vec!["allocations", "project_id", "user_id"];
    if mv.at_least(1, 28) {
        props["consumer_generation"] =
            json!({"type": ["integer", "null"], "additionalProperties": false});
        required.push("consumer_generation");
    }
    if mv.at_least(1, 34) {
        // Unanchored and without additionalProperties, as in Placement:
        // any key is accepted.
        props["mappings"] = json!({
            "type": "object", "minProperties": 1,
            "patternProperties": {"[a-zA-Z0-9_-]{1,64}": {"type": "array", "minItems": 1, "items": uuid()}}
        });
    }
    if mv.at_least(1, 38) {
        props["consumer_type"] =
            json!({"type": "string", "pattern": RC_PATTERN, "minLength": 1, "maxLength": 255});
        required.push("consumer_type");
    }
    json!({"type": "object", "properties": props, "additionalProperties": false, "required": required})
}

/// `PUT /allocations/{consumer}` at any version.
pub fn allocations_put(mv: Microversion) -> Cow<'static, Value> {
    static BUILT: PerVersion = [const { OnceLock::new() }; VERSIONS];
    per_version(&BUILT, mv, build_allocations_put)
}

fn build_allocations_put(mv: Microversion) -> Value {
    match (mv.at_least(1, 12), mv.at_least(1, 28)) {
        (false, _) => allocations_list(mv),
        (true, false) => allocations_dict(mv, 1),
        (true, true) => allocations_dict(mv, 0),
    }
}

/// `POST /allocations` (1.13+), also the reshaper's `allocations`
/// (`allow_empty`).
pub fn allocations_post(mv: Microversion, allow_empty: bool) -> Value {
    json!({
        "type": "object",
        "minProperties": if allow_empty { 0 } else { 1 },
        "additionalProperties": false,
        "patternProperties": {UUID_PATTERN: allocations_dict(mv, 0)}
    })
}

/// `POST /reshaper` (1.30+).
pub fn reshaper(mv: Microversion) -> Value {
    json!({
        "type": "object",
        "properties": {
            "inventories": {"type": "object",
                            "patternProperties": {UUID_PATTERN: inventories_put()},
                            "minProperties": 1,
                            "additionalProperties": false},
            "allocations": allocations_post(mv, true)
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": false
    })
}
