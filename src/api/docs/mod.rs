//! The OpenAPI document (`/openapi.json`) and Swagger UI (`/docs`), both
//! served without authentication. The document is generated from the route
//! table (`routes`): its paths, methods, microversions and policy rules, the
//! schemas of its bodies and answers (utoipa), and the JSON schemas its
//! queries are validated against (declared as query parameters);
//! `openapi/placement.json` holds a committed copy that a test keeps fresh.
//!
//! What a generated client or an API tester needs beside that is declared
//! here once for every operation: the token (a security scheme, so `/docs`
//! can send it), the microversion header, the path parameters' formats, and
//! every status the service answers with Placement's error body.

mod stated_rules;

use super::routes::Route;
use crate::microversions::{HISTORY, LATEST, MIN};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use stated_rules as rules;
use std::sync::LazyLock;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::{InfoBuilder, OpenApiBuilder, PathsBuilder, ResponseBuilder};
use utoipa_swagger_ui::{Config, SwaggerUi};

fn method(m: &axum::http::Method) -> HttpMethod {
    match m.as_str() {
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "DELETE" => HttpMethod::Delete,
        _ => HttpMethod::Get,
    }
}

/// Every answer's schema.
fn schemas() -> crate::api::schema::Schemas {
    crate::api::schema::responses::components()
}

/// Placement's error body, the answer of every refusal.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["errors"],
        "properties": {"errors": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["status", "title", "detail", "request_id"],
            "properties": {
                "status": {"type": "integer"},
                "title": {"type": "string"},
                "detail": {"type": "string"},
                "code": {"type": "string", "description": "placement.* code, from 1.23"},
                "request_id": {"type": "string"}
            }
        }}}
    })
}

/// The statuses a refusal may carry, on any operation: a body or query
/// that does not validate (400), no or a refused token (401), a policy
/// rule (403), a missing resource or a microversion the route is not in
/// (404), a method (405), an `Accept` without JSON (406), a generation or
/// state conflict (409), a body too large (413), a body that is not JSON
/// (415), and a database that cannot answer or a full service (503).
const REFUSALS: &[&str] = &[
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "503",
];

/// The success statuses of a route, by what Placement answers: a GET 200
/// (204 where it has no answer: a trait that exists), a DELETE 204; a PUT
/// 200 with its answer (before 1.7 a class's, after it 201 or 204), else
/// 201 (created) or 204; a POST 200, 201 or 202 with its answer, or 204.
fn successes(r: &Route) -> &'static [&'static str] {
    match (r.method.as_str(), r.answer.is_some()) {
        ("GET", true) => &["200"],
        ("GET", false) => &["200", "204"],
        ("DELETE", _) => &["204"],
        ("PUT", true) => &["200", "201", "204"],
        ("PUT", false) => &["201", "204"],
        (_, true) => &["200", "201", "202"],
        (_, false) => &["201", "204"],
    }
}

/// A path parameter's schema, as the route holds it to: uuids; class and
/// trait names, custom ones where a route writes them; a project id as a
/// body's where a write stores it. A read takes any text there (Placement
/// answers `GET /allocations/{c}` of any text with no allocations).
fn path_parameter(r: &Route, name: &str) -> Value {
    let writes = r.method != axum::http::Method::GET;
    let names = r.path.starts_with("/resource_classes/") || r.path.starts_with("/traits/");
    let text = json!({"type": "string", "minLength": 1});
    match name {
        "consumer_uuid" if r.path == "/allocations/{consumer_uuid}" && !writes => text,
        "uuid" | "consumer_uuid" | "id" => json!({"type": "string", "format": "uuid"}),
        "name" | "resource_class" if writes && names => {
            json!({"type": "string", "pattern": "^CUSTOM_[A-Z0-9_]+$", "maxLength": 255})
        }
        "name" | "resource_class" => {
            json!({"type": "string", "pattern": "^[A-Z0-9_]+$", "maxLength": 255})
        }
        "project_id" if r.method == axum::http::Method::PUT => {
            crate::api::schema::extensions::project_id_schema()
        }
        _ => text,
    }
}

/// The parameters of a route: its path's, its query's (from the schema
/// it is validated against) and the microversion header.
fn parameters(r: &Route) -> Vec<Value> {
    let mut out: Vec<Value> = r
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            json!({"name": name, "in": "path", "required": true,
                   "schema": rules::path_parameter(path_parameter(r, name))})
        })
        .collect();
    if let Some(query) = r.query {
        out.extend(query_parameters(r, &query()));
    }
    out.push(json!({
        "name": "OpenStack-API-Version",
        "in": "header",
        "required": false,
        "description": format!(
            "The microversion, `placement {MIN}` to `placement {LATEST}` or `placement latest`; \
             without it, {MIN}. The shapes documented here are {LATEST}'s; the operation's \
             description says when it appeared, and an older microversion may refuse \
             (or not know) what {LATEST} accepts. A version out of range is 406."
        ),
        // As `microversion::negotiate` reads it: empty (or no placement
        // entry) is the oldest.
        "schema": {"type": "string", "pattern": r"^([ \t]*[Pp][Ll][Aa][Cc][Ee][Mm][Ee][Nn][Tt][ \t]+(latest|0*1[ \t]*\.[ \t]*0*([0-9]|[1-3][0-9]))[ \t]*)?$"},
        "example": format!("placement {LATEST}")
    }));
    out
}

/// One query parameter per property (and per granular group's unsuffixed
/// name) of a query's validation schema.
fn query_parameters(r: &Route, schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut named: Map<String, Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // `^resources([a-zA-Z0-9_-]{1,64})?$` and the like: the unsuffixed name.
    if let Some(patterns) = schema.get("patternProperties").and_then(Value::as_object) {
        for (pattern, s) in patterns {
            let name = pattern
                .trim_start_matches('^')
                .split('(')
                .next()
                .unwrap_or_default();
            named.entry(name.to_string()).or_insert_with(|| s.clone());
        }
    }
    named
        .into_iter()
        .map(|(name, s)| {
            let needed = required.contains(&name.as_str()) || rules::query_required(r, &name);
            let s = rules::query_parameter(r, &name, s);
            json!({"name": name, "in": "query", "required": needed, "schema": s})
        })
        .collect()
}

/// Where a success's answer leads: a created provider's `uuid` is the
/// path parameter of every operation on that provider (so a client or a
/// stateful tester can follow it).
fn links(r: &Route) -> Option<Value> {
    if (r.method.as_str(), r.path) != ("POST", "/resource_providers") {
        return None;
    }
    let on_provider = crate::api::routes::all().filter(|o| {
        o.path.starts_with("/resource_providers/{uuid}") && o.path.matches('{').count() == 1
    });
    let mut links = Map::new();
    for o in on_provider {
        let method = o.method.as_str().to_lowercase();
        let name = format!(
            "{method}{}",
            o.path["/resource_providers/{uuid}".len()..].replace('/', "_")
        );
        links.insert(
            if name == method { format!("{method}_provider") } else { name },
            json!({
                "operationRef": format!("#/paths/{}/{method}", o.path.replace('~', "~0").replace('/', "~1")),
                "parameters": {"uuid": "$response.body#/uuid"}
            }),
        );
    }
    Some(Value::Object(links))
}

/// The responses of a route: its successes, with its answer's schema
/// where it has one, and every refusal with Placement's error body.
fn responses(r: &Route) -> Value {
    let mut out = Map::new();
    let body = |name: &str| json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}});
    for status in successes(r) {
        let mut response = json!({"description": "Success"});
        match (r.path, r.answer) {
            // Text for Prometheus; the others negotiate JSON.
            ("/metrics", _) => {
                response["content"] = json!({"text/plain": {"schema": {"type": "string"}}})
            }
            ("/healthcheck", Some(name)) => {
                response["content"] = body(name);
                response["content"]["text/plain"] = json!({"schema": {"type": "string"}});
            }
            // A PUT's 201 and 204 have no body (a class's PUT answered one
            // before 1.7 only, with 200).
            (_, Some(name))
                if *status != "204"
                    && !(r.method == axum::http::Method::PUT && *status != "200") =>
            {
                response["content"] = body(name)
            }
            _ => {}
        }
        if let Some(links) = links(r).filter(|_| *status == "200") {
            response["links"] = links;
        }
        out.insert((*status).to_string(), response);
    }
    for status in REFUSALS {
        let mut response = json!({"$ref": "#/components/responses/Refused"});
        if r.path == "/healthcheck" && *status == "503" {
            response = out["200"].clone();
            response["description"] = json!("The database cannot answer (the reason in `reasons`)");
        }
        out.insert((*status).to_string(), response);
    }
    Value::Object(out)
}

/// Builds the OpenAPI document.
pub fn openapi() -> Value {
    let history: Vec<String> = HISTORY
        .iter()
        .map(|(v, what)| format!("- {v}: {what}"))
        .collect();
    let description = format!(
        "OpenStack Placement API, microversions {MIN} to {LATEST} (header `OpenStack-API-Version: placement X.Y`). \
         Errors use `{{\"errors\": [{{status, title, detail, code, request_id}}]}}`.\n\n{}",
        history.join("\n")
    );
    let mut paths = PathsBuilder::new();
    for r in crate::api::routes::all() {
        let rule = r.rule.map_or("no token needed".to_string(), |rule| {
            format!("policy rule `{rule}`")
        });
        let op = OperationBuilder::new()
            .summary(Some(r.summary.to_string()))
            .description(Some(format!(
                "Available from microversion {}; {rule}.",
                r.since
            )))
            .response("200", ResponseBuilder::new().description("Success"))
            .build();
        paths = paths.path(r.path.to_string(), PathItem::new(method(&r.method), op));
    }
    let built = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("placement")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(description)),
        )
        .paths(paths)
        .components(Some(
            utoipa::openapi::ComponentsBuilder::new()
                .schemas_from_iter(schemas())
                .build(),
        ))
        .build();
    let mut doc = serde_json::to_value(built).unwrap_or_default();
    complete(&mut doc);
    doc
}

/// What utoipa's builders do not say: each operation's parameters,
/// statuses and security, Placement's error body and the token scheme.
fn complete(doc: &mut Value) {
    for r in crate::api::routes::all() {
        let Some(op) = doc
            .pointer_mut(&format!(
                "/paths/{}/{}",
                r.path.replace('~', "~0").replace('/', "~1"),
                r.method.as_str().to_lowercase()
            ))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        op.insert("parameters".into(), Value::Array(parameters(r)));
        if let Some(body) = r.takes {
            // The very schema the body is validated against, with the
            // rules its handler checks after validation.
            let schema = rules::body(r, body());
            op.insert(
                "requestBody".into(),
                json!({"required": true, "content": {"application/json": {"schema": schema}}}),
            );
        }
        op.insert("responses".into(), responses(r));
        if r.rule.is_none() {
            // Public: a token may be sent, none is needed.
            op.insert("security".into(), json!([{}, {"token": []}]));
        }
    }
    if let Some(components) = doc.get_mut("components").and_then(Value::as_object_mut) {
        if let Some(schemas) = components.get_mut("schemas").and_then(Value::as_object_mut) {
            schemas.insert("Error".into(), error_schema());
        }
        components.insert(
            "responses".into(),
            json!({"Refused": {
                "description": "Refused (Placement's error body)",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            }}),
        );
        components.insert(
            "securitySchemes".into(),
            json!({"token": {
                "type": "apiKey", "in": "header", "name": "X-Auth-Token",
                "description": "A Keystone token (with --auth-strategy noauth2: `admin` for an admin, any other text for a member)"
            }}),
        );
    }
    if let Some(root) = doc.as_object_mut() {
        root.insert("security".into(), json!([{"token": []}]));
    }
}

/// The document's text, built once.
static DOCUMENT: LazyLock<Value> = LazyLock::new(openapi);

async fn document() -> impl IntoResponse {
    Json(&*DOCUMENT)
}

/// `/openapi.json` and `/docs`.
pub fn router() -> Router {
    Router::new()
        .route("/openapi.json", get(document))
        .merge(SwaggerUi::new("/docs").config(Config::from("/openapi.json")))
}
