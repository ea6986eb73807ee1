//! Wire conventions: the root document, authentication and policy,
//! microversion negotiation, 404/405/406/415, the error body and its `code`.

use crate::common::{uuid, TestApp};
use serde_json::json;

#[tokio::test]
async fn root_document_needs_no_auth() {
    let t = TestApp::new().await;
    for path in ["/"] {
        let r = t.req("GET", path).token(None).send().await.expect(200);
        assert_eq!(
            r.json(),
            json!({"versions": [{"id": "v1.0", "max_version": "1.39", "min_version": "1.0",
                                 "status": "CURRENT", "links": [{"rel": "self", "href": ""}]}]})
        );
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        assert!(r
            .header("x-openstack-request-id")
            .unwrap()
            .starts_with("req-"));
        assert_eq!(
            r.header("openstack-api-version").as_deref(),
            Some("placement 1.0")
        );
    }
    let r = t.req("POST", "/").token(None).send().await.expect(405);
    assert_eq!(r.header("allow").as_deref(), Some("GET"));
}

#[tokio::test]
async fn api_documentation_needs_no_auth() {
    let t = TestApp::new().await;
    let r = t
        .req("GET", "/openapi.json")
        .token(None)
        .send()
        .await
        .expect(200);
    let doc = r.json();
    assert_eq!(doc["info"]["title"], json!("placement"));
    assert!(doc["paths"]["/deployments"]["post"].is_object());
    let r = t.req("GET", "/docs/").token(None).send().await.expect(200);
    assert!(r
        .header("content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    // Everything else still needs a token.
    t.req("GET", "/resource_providers")
        .token(None)
        .send()
        .await
        .expect(401);
}

#[tokio::test]
async fn authentication_and_policy() {
    let t = TestApp::new().await;
    let r = t
        .req("GET", "/resource_providers")
        .token(None)
        .send()
        .await
        .expect(401);
    r.error();
    // An empty token is no token.
    t.req("GET", "/resource_providers")
        .token(Some(""))
        .send()
        .await
        .expect(401);
    // Any other user without roles: 403 naming the rule.
    t.req("GET", "/resource_providers")
        .token(Some("alice:proj"))
        .send()
        .await
        .expect_error(
            403,
            None,
            "Policy does not allow placement:resource_providers:list to be performed.",
        );
    t.req("POST", "/resource_providers")
        .mv("1.23")
        .token(Some("alice"))
        .json(&json!({"name": "x"}))
        .send()
        .await
        .expect_error(
            403,
            Some("placement.undefined_code"),
            "Policy does not allow placement:resource_providers:create to be performed.",
        );
    // Roles admin or service are enough.
    for role in ["admin", "service", "Member,service"] {
        t.req("GET", "/resource_providers")
            .token(Some("bob:proj"))
            .header("x-roles", role)
            .send()
            .await
            .expect(200);
    }
    t.req("GET", "/resource_providers")
        .token(Some("bob:proj"))
        .header("x-roles", "reader,member")
        .send()
        .await
        .expect(403);
    // Nothing was created by the refused POST.
    assert!(t.rp_names("", "1.0").await.is_empty());
}

#[tokio::test]
async fn microversion_negotiation() {
    let t = TestApp::new().await;
    let version_of = |r: &crate::common::Resp| r.header("openstack-api-version");

    let r = t.req("GET", "/resource_providers").send().await.expect(200);
    assert_eq!(version_of(&r).as_deref(), Some("placement 1.0"));
    assert_eq!(r.header("vary").as_deref(), Some("openstack-api-version"));
    let r = t.get("/resource_providers", "latest").await.expect(200);
    assert_eq!(version_of(&r).as_deref(), Some("placement 1.39"));
    let r = t.get("/resource_providers", "1.02").await.expect(200);
    assert_eq!(version_of(&r).as_deref(), Some("placement 1.2"));
    // The last placement entry wins; other services are ignored.
    let r = t
        .req("GET", "/resource_providers")
        .header(
            "openstack-api-version",
            "placement 1.5, compute 2.1, placement 1.14",
        )
        .send()
        .await
        .expect(200);
    assert_eq!(version_of(&r).as_deref(), Some("placement 1.14"));
    // The legacy header is not read.
    let r = t
        .req("GET", "/resource_providers")
        .header("x-openstack-placement-api-version", "1.14")
        .send()
        .await
        .expect(200);
    assert_eq!(version_of(&r).as_deref(), Some("placement 1.0"));

    // Unparseable: 400, no code, no version header.
    for bad in ["pony.horse", "1.2.3", "LATEST", "1"] {
        let r = t.get("/resource_providers", bad).await.expect_error(
            400,
            None,
            &format!("Invalid microversion: invalid version string: {bad}"),
        );
        assert!(version_of(&r).is_none(), "{r:?}");
    }
    // Parses but unsupported: 406 with the bounds.
    for bad in ["1.40", "0.5", "2.0"] {
        let r = t.get("/resource_providers", bad).await.expect_error(
            406,
            None,
            &format!("Invalid microversion: Unacceptable version header: {bad}"),
        );
        let e = r.error();
        assert_eq!(e["max_version"], json!("1.39"));
        assert_eq!(e["min_version"], json!("1.0"));
        assert!(version_of(&r).is_none());
    }
    // Checked before routing: an unknown URL with a bad version is 400.
    t.get("/no/such/thing", "pony.horse").await.expect(400);
    // A route newer than the request: plain 404.
    let r = t.get("/traits", "1.5").await;
    r.expect_error(404, None, "The resource could not be found.");
}

#[tokio::test]
async fn error_code_only_from_1_23() {
    let t = TestApp::new().await;
    let u = uuid();
    let path = format!("/resource_providers/{u}");
    let r = t.get(&path, "1.22").await.expect(404);
    assert!(r.error().get("code").is_none(), "{r:?}");
    let e = t.get(&path, "1.23").await.expect(404).error();
    assert_eq!(e["code"], json!("placement.undefined_code"));
    assert_eq!(
        e["detail"],
        json!(format!(
            "The resource could not be found.\n\n No resource provider with uuid {u} found  "
        ))
    );
    assert_eq!(e["title"], json!("Not Found"));
}

#[tokio::test]
async fn not_found_and_method_not_allowed() {
    let t = TestApp::new().await;
    t.get("/nothing/here", "1.39").await.expect_error(
        404,
        Some("placement.undefined_code"),
        "The resource could not be found.",
    );
    let cases = [
        ("DELETE", "/resource_providers", "GET, POST"),
        ("PATCH", "/resource_providers/x", "GET, PUT, DELETE"),
        (
            "POST",
            "/resource_providers/x/inventories/VCPU",
            "GET, PUT, DELETE",
        ),
        ("POST", "/resource_providers/x/usages", "GET"),
        ("DELETE", "/resource_providers/x/aggregates", "GET, PUT"),
        ("OPTIONS", "/traits", "GET"),
        ("POST", "/traits/CUSTOM_X", "GET, PUT, DELETE"),
        ("GET", "/allocations", "POST"),
        ("POST", "/allocations/x", "GET, PUT, DELETE"),
        ("GET", "/reshaper", "POST"),
        ("PUT", "/usages", "GET"),
        ("DELETE", "/resource_classes", "GET, POST"),
    ];
    for (method, path, allow) in cases {
        let r = t.req(method, path).mv("1.39").send().await.expect_error(
            405,
            Some("placement.undefined_code"),
            &format!("The method {method} is not allowed for this resource."),
        );
        assert_eq!(r.header("allow").as_deref(), Some(allow), "{method} {path}");
    }
}

#[tokio::test]
async fn content_type_and_accept_rules() {
    let t = TestApp::new().await;
    // 415 with and without a type.
    t.req("POST", "/resource_providers")
        .mv("1.23")
        .raw(Some("text/plain"), r#"{"name": "x"}"#)
        .send()
        .await
        .expect_error(
            415,
            Some("placement.undefined_code"),
            "The media type text/plain is not supported, use application/json",
        );
    // Parameters such as charset are fine.
    t.req("POST", "/resource_providers")
        .mv("1.20")
        .raw(Some("application/json; charset=UTF-8"), r#"{"name": "x"}"#)
        .send()
        .await
        .expect(200);
    // A body without a content type: 400 before routing.
    t.req("POST", "/resource_providers")
        .raw(None, r#"{"name": "y"}"#)
        .send()
        .await
        .expect_error(
            400,
            None,
            "content-type header required when content-length > 0",
        );
    // A JSON route with no body and no type: 415 naming None.
    t.req("PUT", &format!("/resource_providers/{}/traits", uuid()))
        .mv("1.6")
        .send()
        .await
        .expect_error(415, None, "The media type None is not supported");

    // Accept: JSON must be acceptable on GETs.
    // ... and the error body is then plain text, as asked.
    let r = t
        .req("GET", "/resource_providers")
        .header("accept", "text/plain")
        .send()
        .await
        .expect(406);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = r.text();
    assert!(text.starts_with("406 Not Acceptable"), "{text}");
    assert!(text.contains("Only application/json is provided"), "{text}");
    t.req("GET", "/resource_providers")
        .header("accept", "application/xml, application/json;q=0.1")
        .send()
        .await
        .expect(200);
    t.req("GET", "/resource_providers")
        .header("accept", "application/json;q=0, text/html")
        .send()
        .await
        .expect(406);
    t.req("GET", "/resource_providers")
        .header("accept", "text/html,application/xml;q=0.9,*/*;q=0.8")
        .send()
        .await
        .expect(200);
    // Error bodies follow Accept: HTML when asked for.
    let r = t
        .req("GET", "/no/such/thing")
        .header("accept", "text/html")
        .send()
        .await
        .expect(404);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.text().contains("404 Not Found"), "{r:?}");

    // Malformed JSON.
    t.req("POST", "/resource_providers")
        .mv("1.23")
        .raw(Some("application/json"), "{\"name\": ")
        .send()
        .await
        .expect_error(400, Some("placement.undefined_code"), "Malformed JSON");
    assert_eq!(t.rp_names("", "1.0").await, ["x"]);
}

#[tokio::test]
async fn last_modified_on_providers() {
    let t = TestApp::new().await;
    let r = t
        .post("/resource_providers", "1.20", json!({"name": "x"}))
        .await
        .expect(200);
    assert!(r.header("last-modified").is_some());
    assert!(r.header("cache-control").is_some());
    let r = t
        .post("/resource_providers", "1.14", json!({"name": "y"}))
        .await
        .expect(201);
    assert!(r.header("last-modified").is_none());
    let r = t.get("/resource_providers", "1.15").await.expect(200);
    assert_eq!(r.header("cache-control").as_deref(), Some("no-cache"));
    let r = t.get("/resource_providers", "1.14").await.expect(200);
    assert!(r.header("cache-control").is_none());
}

#[tokio::test]
async fn location_is_absolute_from_the_request_host() {
    let t = TestApp::new().await;
    let u = uuid();
    let r = t
        .req("POST", "/resource_providers")
        .mv("1.0")
        .header("host", "placement.example:8778")
        .json(&json!({"name": "x", "uuid": u}))
        .send()
        .await
        .expect(201);
    assert_eq!(
        r.header("location").as_deref(),
        Some(format!("http://placement.example:8778/resource_providers/{u}").as_str())
    );
    let r = t
        .req("PUT", "/traits/CUSTOM_LOC")
        .mv("1.6")
        .header("host", "placement.example")
        .send()
        .await
        .expect(201);
    assert_eq!(
        r.header("location").as_deref(),
        Some("http://placement.example/traits/CUSTOM_LOC")
    );
    // Every response carries a fresh request id.
    let a = t.get("/", "1.0").await.header("x-openstack-request-id");
    let b = t.get("/", "1.0").await.header("x-openstack-request-id");
    assert_ne!(a, b);
}
