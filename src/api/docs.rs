//! The OpenAPI document (`/openapi.json`) and Swagger UI (`/docs`), both
//! served without authentication. The document is generated from the route
//! table (`routes.rs`) with utoipa; `openapi/placement.json` holds a committed copy
//! that a test keeps fresh.

use super::microversion::{HISTORY, MAX, MIN};
use axum::Router;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::{InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, ResponseBuilder};
use utoipa_swagger_ui::SwaggerUi;

fn method(m: &axum::http::Method) -> HttpMethod {
    match m.as_str() {
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "DELETE" => HttpMethod::Delete,
        _ => HttpMethod::Get,
    }
}

/// A JSON request body of the named schema.
fn request_body(name: &str) -> utoipa::openapi::request_body::RequestBody {
    utoipa::openapi::request_body::RequestBodyBuilder::new()
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(name)))
                .build(),
        )
        .required(Some(utoipa::openapi::Required::True))
        .build()
}

/// Every request and response schema.
fn schemas() -> super::schema::Schemas {
    let mut out = super::schema::responses::components();
    out.extend(super::schema::bodies::components());
    out
}

/// The success response, with its body's schema when it has one.
fn success(answer: Option<&str>) -> utoipa::openapi::Response {
    let builder = ResponseBuilder::new().description("Success");
    match answer {
        Some(name) => builder
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name(name)))
                    .build(),
            )
            .build(),
        None => builder.build(),
    }
}

/// Builds the OpenAPI document.
pub fn openapi() -> OpenApi {
    let history: Vec<String> = HISTORY
        .iter()
        .map(|(v, what)| format!("- {v}: {what}"))
        .collect();
    let description = format!(
        "OpenStack Placement API, microversions {MIN} to {MAX} (header `OpenStack-API-Version: placement X.Y`). \
         Errors use `{{\"errors\": [{{status, title, detail, code, request_id}}]}}`.\n\n{}",
        history.join("\n")
    );
    let mut paths = PathsBuilder::new();
    for r in super::routes::all() {
        let rule = r.rule.map_or("no token needed".to_string(), |rule| {
            format!("policy rule `{rule}`")
        });
        let mut op = OperationBuilder::new()
            .summary(Some(r.summary.to_string()))
            .description(Some(format!(
                "Available from microversion {}; {rule}.",
                r.since
            )))
            .response("200", success(r.answer))
            .response(
                "400",
                ResponseBuilder::new().description("Bad request (Placement error body)"),
            )
            .build();
        op.request_body = r
            .takes
            .map(|name| utoipa::openapi::RefOr::T(request_body(name)));
        paths = paths.path(r.path.to_string(), PathItem::new(method(&r.method), op));
    }
    OpenApiBuilder::new()
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
        .build()
}

/// `/openapi.json` and `/docs`.
pub fn router() -> Router {
    Router::new().merge(SwaggerUi::new("/docs").url("/openapi.json", openapi()))
}
