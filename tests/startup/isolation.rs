//! Nobody reaches another project: a real server under a policy file that
//! grants every project-addressing rule to `role:member and
//! project_id:%(project_id)s`. The walk covers every route of the table
//! whose policy target is a project, with the project given plainly,
//! twice, percent-encoded and with its key case-varied (in the query, the
//! path or a JSON body with duplicate keys): a member of project A asking
//! about project B never gets past 403 (or a 400), and B's state is the
//! same afterwards; asking about A itself is not refused by policy.

use super::*;
use placement::api::policy::Subject;
use placement::api::routes;
use placement_testkit::{cluster, common};
use serde_json::json;

const A: &str = "projA";
const B: &str = "projB";

/// The member of A every walked request is sent as.
const MEMBER_OF_A: [(&str, &str); 4] = [
    ("x-auth-token", "ua"),
    ("x-roles", "member"),
    ("x-project-id", A),
    ("x-user-id", "ua"),
];

async fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("openstack-api-version", "placement latest");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// What the walk knows of the seeded world.
struct World {
    provider: String,
    /// (project, its app, the consumer of its one instance), for A and B.
    owned: Vec<(&'static str, String, String)>,
    /// (project, its queued request that never fits), for A and B.
    queued: Vec<(&'static str, String)>,
}

impl World {
    fn app_of(&self, project: &str) -> &str {
        self.owned
            .iter()
            .find(|o| o.0 == project)
            .map_or("", |o| &o.1)
    }

    fn queued_of(&self, project: &str) -> &str {
        self.queued
            .iter()
            .find(|o| o.0 == project)
            .map_or("", |o| &o.1)
    }

    fn consumer_of(&self, project: &str) -> &str {
        self.owned
            .iter()
            .find(|o| o.0 == project)
            .map_or("", |o| &o.2)
    }
}

/// One request of the walk: method, path with query, body.
struct Probe {
    method: &'static str,
    path: String,
    body: Option<String>,
}

fn probe(method: &'static str, path: String, body: Option<String>) -> Probe {
    Probe { method, path, body }
}

/// The ways a query can name `target` while also naming A.
fn query_forms(target: &str) -> Vec<String> {
    vec![
        format!("project_id={target}"),
        format!("project_id={A}&project_id={target}"),
        format!("project%5Fid={A}&project_id={target}"),
        format!("project_id={A}&project%5fid={target}"),
        format!("project_id={A}&PROJECT_ID={target}"),
        format!("Project_Id={target}"),
    ]
}

/// The ways a path segment can spell `target`.
fn path_forms(target: &str) -> Vec<String> {
    let last = target.chars().last().map_or(0, u32::from);
    vec![
        target.to_string(),
        format!("{}%{last:02X}", &target[..target.len() - 1]),
    ]
}

/// A JSON object with `"project_id": A` then the same key again with `target`.
fn body_forms(template: &Value, target: &str) -> Vec<String> {
    let plain = template
        .to_string()
        .replace("\"@P\"", &format!("\"{target}\""));
    let twice = template
        .to_string()
        .replace("\"@P\"", &format!("\"{A}\",\"project_id\":\"{target}\""));
    vec![plain, twice]
}

/// Every request of `route` addressing `target`, or None for a route that
/// addresses no project (its target is the caller).
fn probes(route: &routes::Route, w: &World, target: &str) -> Option<Vec<Probe>> {
    let m = match route.method.as_str() {
        "GET" => "GET",
        "PUT" => "PUT",
        "POST" => "POST",
        "DELETE" => "DELETE",
        other => panic!("unexpected method {other}"),
    };
    let rp = &w.provider;
    let out = match (route.path, m) {
        ("/usages", _) => query_forms(target)
            .into_iter()
            .map(|q| probe(m, format!("/usages?{q}"), None))
            .collect(),
        ("/allocation_candidates" | "/allocation_candidates/explain", _) => query_forms(target)
            .into_iter()
            .map(|q| probe(m, format!("{}?resources=VCPU:1&{q}", route.path), None))
            .collect(),
        ("/declines", "DELETE") => query_forms(target)
            .into_iter()
            .map(|q| probe(m, format!("/declines?{q}"), None))
            .collect(),
        ("/declines", "POST") => body_forms(
            &json!({"project_id": "@P", "resource_provider_uuid": rp, "resources": {"VCPU": 1}}),
            target,
        )
        .into_iter()
        .map(|b| probe(m, "/declines".into(), Some(b)))
        .collect(),
        ("/admissions", _) => {
            let item = |p: &str| {
                json!({"id": format!("r-{p}"), "consumer_uuid": uuid::Uuid::new_v4(),
                       "project_id": p, "user_id": "ua", "resources": {"VCPU": 1}})
            };
            let mut forms: Vec<String> = body_forms(
                &json!({"dry_run": true, "requests": [{"id": "r", "consumer_uuid": uuid::Uuid::new_v4(),
                        "project_id": "@P", "user_id": "ua", "resources": {"VCPU": 1}}]}),
                target,
            );
            // Several projects in one round: each must pass.
            forms.push(json!({"dry_run": true, "requests": [item(A), item(target)]}).to_string());
            forms
                .into_iter()
                .map(|b| probe(m, "/admissions".into(), Some(b)))
                .collect()
        }
        ("/preemptions", _) => query_forms(target)
            .into_iter()
            .map(|q| probe(m, format!("/preemptions?{q}"), None))
            .collect(),
        ("/queue", "GET") => query_forms(target)
            .into_iter()
            .map(|q| probe(m, format!("/queue?{q}"), None))
            .collect(),
        ("/queue", _) => {
            let item = |p: &str| {
                json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": p, "user_id": "ua",
                       "resources": {"VCPU": 1000}})
            };
            let mut forms = body_forms(
                &json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": "@P",
                        "user_id": "ua", "resources": {"VCPU": 1000}}),
                target,
            );
            // Several projects in one batch: each must pass.
            forms.push(json!({"requests": [item(A), item(target)]}).to_string());
            forms
                .into_iter()
                .map(|b| probe(m, "/queue".into(), Some(b)))
                .collect()
        }
        ("/queue/{id}", _) => vec![probe(m, format!("/queue/{}", w.queued_of(target)), None)],
        ("/deployments", "POST") => body_forms(
            &json!({"app": "walk", "count": 1, "cpu": 1, "memory_mb": 64,
                    "project_id": "@P", "user_id": "ua", "dry_run": true}),
            target,
        )
        .into_iter()
        .map(|b| probe(m, "/deployments".into(), Some(b)))
        .collect(),
        ("/deployments/{app}", _) => {
            vec![probe(m, format!("/deployments/{}", w.app_of(target)), None)]
        }
        ("/deployments/{app}/instances/{consumer_uuid}/resize", _) => vec![probe(
            m,
            format!(
                "/deployments/{}/instances/{}/resize",
                w.app_of(target),
                w.consumer_of(target)
            ),
            Some(json!({"memory_mb": 1}).to_string()),
        )],
        ("/consumers/{consumer_uuid}/priority", _) => {
            let c = w.consumer_of(target);
            let body = (m == "PUT").then(|| json!({"priority_class": "batch"}).to_string());
            vec![probe(m, format!("/consumers/{c}/priority"), body)]
        }
        (p, _) if p.contains("{project_id}") => {
            let body = match (p.ends_with("/quota"), p.ends_with("/fairness"), m) {
                (true, _, "PUT") => Some(json!({"limits": {"VCPU": 1}}).to_string()),
                (_, true, "PUT") => Some(json!({"weight": 9.0}).to_string()),
                (_, _, "PUT") => Some(
                    json!({"resource_provider_generation": 0, "resources": {"VCPU": 1}})
                        .to_string(),
                ),
                _ => None,
            };
            path_forms(target)
                .into_iter()
                .map(|seg| {
                    let path = p.replace("{uuid}", rp).replace("{project_id}", &seg);
                    probe(m, path, body.clone())
                })
                .collect()
        }
        _ => return None,
    };
    Some(out)
}

/// B's state as an administrator sees it: quota, fairness, reservations,
/// the consumer's priority and the deployment.
async fn state_of_b(base: &str, w: &World) -> Vec<Value> {
    let admin = [("x-auth-token", "admin")];
    let mut seen = Vec::new();
    for path in [
        format!("/projects/{B}/quota"),
        format!("/projects/{B}/fairness"),
        format!(
            "/resource_providers/{}/project_reservations/{B}",
            w.provider
        ),
        format!("/consumers/{}/priority", w.consumer_of(B)),
        format!("/deployments/{}", w.app_of(B)),
        format!("/queue/{}", w.queued_of(B)),
    ] {
        let mut shown = call(base, "GET", &path, None, &admin).await.1;
        // A queued request's wait grows and its reason comes with rounds:
        // only its state is B's to keep.
        if path.starts_with("/queue/") {
            shown = shown["state"].clone();
        }
        // The provider's generation moves with A's own writes.
        if let Some(o) = shown.as_object_mut() {
            o.remove("resource_provider_generation");
        }
        seen.push(shown);
    }
    seen
}

async fn seed(base: &str) -> World {
    let admin = [("x-auth-token", "admin")];
    let rp = uuid::Uuid::new_v4().to_string();
    let ok = |(s, body): (u16, Value), what: &str| {
        assert!((200..300).contains(&s), "{what}: {s} {body}");
        body
    };
    ok(
        call(
            base,
            "POST",
            "/resource_providers",
            Some(&json!({"name": "walk-node", "uuid": rp}).to_string()),
            &admin,
        )
        .await,
        "provider",
    );
    ok(
        call(
            base,
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            Some(
                &json!({"resource_provider_generation": 0, "inventories": {
                    "VCPU": {"total": 16}, "MEMORY_MB": {"total": 8192}}})
                .to_string(),
            ),
            &admin,
        )
        .await,
        "inventory",
    );
    ok(
        call(
            base,
            "PUT",
            &format!("/projects/{B}/quota"),
            Some(&json!({"limits": {"VCPU": 8}}).to_string()),
            &admin,
        )
        .await,
        "quota of B",
    );
    ok(
        call(
            base,
            "PUT",
            &format!("/resource_providers/{rp}/project_reservations/{B}"),
            Some(&json!({"resource_provider_generation": 1, "resources": {"VCPU": 2}}).to_string()),
            &admin,
        )
        .await,
        "reservation of B",
    );
    let mut owned = Vec::new();
    for (project, user) in [(A, "ua"), (B, "ub")] {
        let app = format!("app-of-{project}");
        ok(
            call(
                base,
                "POST",
                "/deployments",
                Some(
                    &json!({"app": app, "count": 1, "cpu": 1, "memory_mb": 128,
                            "project_id": project, "user_id": user})
                    .to_string(),
                ),
                &admin,
            )
            .await,
            "deployment",
        );
        let shown = ok(
            call(base, "GET", &format!("/deployments/{app}"), None, &admin).await,
            "app",
        );
        let consumer = shown["nodes"][&rp]["instances"][0]["consumer_uuid"]
            .as_str()
            .expect("an instance")
            .to_string();
        owned.push((project, app, consumer));
    }
    let mut queued = Vec::new();
    for project in [A, B] {
        let request = json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": project,
                             "user_id": "u", "resources": {"VCPU": 1000}});
        let shown = ok(
            call(base, "POST", "/queue", Some(&request.to_string()), &admin).await,
            "queued",
        );
        queued.push((project, shown["id"].as_str().expect("an id").to_string()));
    }
    World {
        provider: rp,
        owned,
        queued,
    }
}

/// Listings that address no project but show each caller only the
/// items whose project it passes (checked by their own test below).
const FILTERED_LISTINGS: [(&str, &str); 1] = [("/deployments", "GET")];

/// A policy file granting every project-addressing rule to the members
/// of the project addressed.
fn member_policy() -> String {
    let grant = "rule:admin_or_service_api or (role:member and project_id:%(project_id)s)";
    let mut text = String::new();
    for r in routes::all().filter(|r| r.target != Subject::Caller) {
        if let Some(rule) = r.rule {
            if !text.contains(&format!("\"{rule}\"")) {
                text.push_str(&format!("\"{rule}\": \"{grant}\"\n"));
            }
        }
    }
    text
}

/// Issue 50, item 4: an app belongs to the project that first deployed
/// it. A member of A can neither deploy into B's app nor see its
/// instances through a dry run; B's member still sees B's app; the
/// listing shows each member its own project's apps only.
#[tokio::test]
async fn an_app_belongs_to_the_project_that_deployed_it() {
    let f = policy_file(&member_policy());
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "app-owners", &["--policy-file", &f.arg()]).await;
    let b = &server.base;
    let world = seed(b).await;
    let app_b = world.app_of(B).to_string();
    for dry_run in [true, false] {
        let body = json!({"app": app_b, "count": 1, "cpu": 1, "memory_mb": 64,
                          "project_id": A, "user_id": "ua", "dry_run": dry_run});
        let (status, v) = call(
            b,
            "POST",
            "/deployments",
            Some(&body.to_string()),
            &MEMBER_OF_A,
        )
        .await;
        assert_eq!(status, 409, "dry run {dry_run}: {v}");
        assert_eq!(v["errors"][0]["code"], "placement.deploy.app_owned", "{v}");
    }
    let member_of_b = [
        ("x-auth-token", "ub"),
        ("x-roles", "member"),
        ("x-project-id", B),
        ("x-user-id", "ub"),
    ];
    let (status, v) = call(
        b,
        "GET",
        &format!("/deployments/{app_b}"),
        None,
        &member_of_b,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["count"], 1, "{v}");
    let (status, v) = call(b, "GET", "/deployments", None, &MEMBER_OF_A).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["deployments"],
        json!([{"app": world.app_of(A), "count": 1, "nodes": 1}]),
        "a member lists its own project's apps only"
    );
    let (_, v) = call(b, "GET", "/deployments", None, &[("x-auth-token", "admin")]).await;
    assert_eq!(v["deployments"].as_array().map(Vec::len), Some(2), "{v}");
    // A's own app takes A's deployments as before.
    let body = json!({"app": world.app_of(A), "count": 1, "cpu": 1, "memory_mb": 64,
                      "project_id": A, "user_id": "ua"});
    let (status, v) = call(
        b,
        "POST",
        "/deployments",
        Some(&body.to_string()),
        &MEMBER_OF_A,
    )
    .await;
    assert_eq!(status, 201, "{v}");
    drop(server);
    common::drop_database(&admin_url, &db);
}

#[tokio::test]
async fn no_member_reaches_another_project() {
    let f = policy_file(&member_policy());
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "isolation", &["--policy-file", &f.arg()]).await;
    let b = &server.base;
    let world = seed(b).await;
    let before = state_of_b(b, &world).await;
    let mut walked = 0;
    for route in routes::all().filter(|r| r.rule.is_some()) {
        if FILTERED_LISTINGS.contains(&(route.path, route.method.as_str())) {
            continue;
        }
        let Some(to_b) = probes(route, &world, B) else {
            // A route the walk has no request for must address no project.
            assert_eq!(
                route.target,
                Subject::Caller,
                "{} {}: its target is a project, so the walk must cover it",
                route.method,
                route.path
            );
            assert!(!route.path.contains("project_id"), "{}", route.path);
            continue;
        };
        assert_ne!(
            route.target,
            Subject::Caller,
            "{} {}",
            route.method,
            route.path
        );
        for p in to_b {
            let (status, body) = call(b, p.method, &p.path, p.body.as_deref(), &MEMBER_OF_A).await;
            assert!(
                status == 403 || status == 400,
                "{} {} {:?}: a member of {A} got {status} for {B}: {body}",
                p.method,
                p.path,
                p.body
            );
            walked += 1;
        }
        for p in probes(route, &world, A).unwrap_or_default() {
            let (status, body) = call(b, p.method, &p.path, p.body.as_deref(), &MEMBER_OF_A).await;
            // A case-varied key names no project: refused either way.
            let odd_key = p.path.contains("PROJECT_ID") || p.path.contains("Project_Id");
            let refused = status == 400 || status == 403;
            assert!(
                status < 500 && (if odd_key { refused } else { status != 403 }),
                "{} {} {:?}: a member of {A} got {status} for its own project: {body}",
                p.method,
                p.path,
                p.body
            );
        }
    }
    assert!(walked >= 45, "only {walked} requests walked");
    assert_eq!(state_of_b(b, &world).await, before, "B's state changed");
    drop(server);
    common::drop_database(&admin_url, &db);
}
