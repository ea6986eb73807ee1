//! `/ui` in a real headless Chromium against two real server processes,
//! with data created through the API: the token field, the provider tree
//! and its usage bars, the fullest providers, an explanation, a
//! deployment's core map and the project shares render, and the page
//! talks to nothing but its own origin. The screenshot is kept under
//! `target/test-artifacts/`.

use placement_testkit::browser::{self, Browser};
use placement_testkit::cluster::Cluster;
use reqwest::Method;
use serde_json::{json, Value};

/// Sends a request through the cluster and wants `status`.
async fn call(c: &Cluster, method: Method, path: &str, body: Value, status: u16) -> Value {
    let r = c
        .request(0, method, path)
        .json(&body)
        .send()
        .await
        .expect("send");
    let got = r.status().as_u16();
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(got, status, "{path}: {answer}");
    answer
}

/// A compute node with a NUMA child, an allocation on the root, and a
/// deployment of two bound instances on a node with a CPU topology.
async fn seed(c: &Cluster) -> (String, String, String) {
    let root = c
        .provider(
            "compute-1",
            json!({"VCPU": {"total": 16, "allocation_ratio": 1.0}, "MEMORY_MB": {"total": 8192}}),
        )
        .await;
    let child = call(
        c,
        Method::POST,
        "/resource_providers",
        json!({"name": "compute-1-numa0", "parent_provider_uuid": root}),
        200,
    )
    .await["uuid"]
        .as_str()
        .expect("uuid")
        .to_string();
    call(
        c,
        Method::PUT,
        &format!("/resource_providers/{child}/inventories"),
        json!({"resource_provider_generation": 0, "inventories": {"DISK_GB": {"total": 100}}}),
        200,
    )
    .await;
    let consumer = uuid::Uuid::new_v4();
    call(
        c,
        Method::PUT,
        &format!("/allocations/{consumer}"),
        json!({"allocations": {&root: {"resources": {"VCPU": 4, "MEMORY_MB": 1024}}},
               "project_id": "tenant-a", "user_id": "u", "consumer_generation": null,
               "consumer_type": "INSTANCE"}),
        204,
    )
    .await;
    let node = c.node("eru-1", 4096, 4).await;
    call(
        c,
        Method::POST,
        "/deployments",
        json!({"app": "web", "count": 2, "cpu": 1.5, "cpu_bind": true, "memory_mb": 256,
               "project_id": "tenant-b", "user_id": "u"}),
        201,
    )
    .await;
    // Two requests that can never fit (no provider has 1000 VCPU) wait in
    // the fair queue with that reason.
    let waiting: Vec<Value> = (0..2)
        .map(|_| {
            json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": "tenant-q",
                        "user_id": "u", "resources": {"VCPU": 1000}})
        })
        .collect();
    let queued = call(c, Method::POST, "/queue", json!({"requests": waiting}), 202).await;
    let id = queued["requests"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    for _ in 0..100 {
        let shown = c.json(0, &format!("/queue/{id}")).await;
        if shown["reason"] == "never_fits" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    (root, child, node)
}

#[tokio::test]
async fn the_dashboard_renders_what_the_api_holds() {
    // No browser is a failure, never a pass that tested nothing.
    assert!(
        browser::available(),
        "the dashboard's test needs a real browser: apt-get install chromium chromium-driver \
         (scripts/test.sh installs them when run as root)"
    );
    let c = Cluster::new("ui", "1.39").await;
    let (root, child, node) = seed(&c).await;
    let base = c.servers[0].base.clone();
    let b = Browser::start().await;
    b.goto(&format!("{base}/ui")).await;

    // Without a token the API refuses, and the page says what to do.
    b.wait_until(
        "the refusal",
        "return document.body.dataset.loaded === 'true'",
    )
    .await;
    let note = b.text(&b.find("#providers-note").await).await;
    assert!(note.contains("enter a token"), "{note}");
    b.type_into(&b.find("#token").await, "admin").await;
    b.click(&b.find("#auth button[type=submit]").await).await;
    b.wait_until(
        "the trees",
        "return document.querySelectorAll('#trees .provider').length === 3 \
         && document.querySelectorAll('#apps .core').length === 4 \
         && document.querySelectorAll('#shares tbody tr').length >= 2 \
         && document.querySelectorAll('#queue tbody tr').length === 1",
    )
    .await;

    // The child sits inside its root's tree; the bars show usage.
    let nested = format!("li[data-uuid='{root}'] li[data-uuid='{child}']");
    assert_eq!(b.find_all(&nested).await.len(), 1, "the child is nested");
    let vcpu = format!("li[data-uuid='{root}'] > .bars .bar[data-class='VCPU']");
    assert_eq!(b.text(&b.find(&vcpu).await).await, "VCPU 4 / 16");
    let width = b
        .script(&format!(
            "return document.querySelector(\"{vcpu} .fill\").style.width"
        ))
        .await;
    assert_eq!(width, json!("25%"));
    let memory = format!("li[data-uuid='{root}'] > .bars .bar[data-class='MEMORY_MB']");
    assert_eq!(
        b.text(&b.find(&memory).await).await,
        "MEMORY_MB 1024 / 8192"
    );
    let fullest = b.text(&b.find("#fullest").await).await;
    assert!(
        fullest.starts_with("eru-1"),
        "the deployed node is fullest: {fullest}"
    );

    // The explain form renders the why-not table.
    b.type_into(&b.find("#explain-query").await, "resources=VCPU:13")
        .await;
    b.click(&b.find("#explain-form button").await).await;
    b.wait_until(
        "the explanation",
        "return document.querySelectorAll('#explain-result tbody tr').length === 2",
    )
    .await;
    let row = |uuid: &str| format!("#explain-result tr[data-uuid='{uuid}'] td.reason");
    assert_eq!(b.text(&b.find(&row(&root)).await).await, "capacity");
    assert_eq!(b.text(&b.find(&row(&node)).await).await, "no_inventory");
    let summary = b.text(&b.find("#explain-summary").await).await;
    assert_eq!(summary, "capacity: 1, no_inventory: 1");
    let numbers = b
        .text(
            &b.find(&format!("#explain-result tr[data-uuid='{root}']"))
                .await,
        )
        .await;
    assert!(numbers.contains("free=12"), "{numbers}");

    // The deployment with its core map, and the projects' shares.
    let app = b.text(&b.find(".app[data-app='web'] h3").await).await;
    assert_eq!(app, "web: 2 instances on 1 nodes");
    for project in ["tenant-a", "tenant-b"] {
        let found = b
            .find_all(&format!("#shares tr[data-project='{project}']"))
            .await;
        assert_eq!(found.len(), 1, "{project} has a row");
    }

    // The queue per project, with why its requests wait.
    let queue = "#queue tr[data-project='tenant-q']";
    assert_eq!(
        b.text(&b.find(&format!("{queue} td.pending")).await).await,
        "2"
    );
    assert_eq!(
        b.text(&b.find(&format!("{queue} td.reasons")).await).await,
        "never_fits: 2"
    );

    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-artifacts/dashboard.png");
    b.screenshot(&shot).await;
    assert!(std::fs::metadata(&shot).expect("screenshot").len() > 10_000);

    // Nothing but this origin was asked for anything.
    let fetched = b
        .script("return performance.getEntriesByType('resource').map(e => e.name)")
        .await;
    let fetched: Vec<&str> = fetched
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(fetched.iter().any(|u| u.ends_with("/ui/app.js")));
    assert!(fetched
        .iter()
        .any(|u| u.contains("/allocation_candidates/explain")));
    let foreign: Vec<&&str> = fetched.iter().filter(|u| !u.starts_with(&base)).collect();
    assert!(foreign.is_empty(), "requests elsewhere: {foreign:?}");
}

/// The assets carry a policy that keeps the page to its own origin, need
/// no token, and unknown assets are 404s.
#[tokio::test]
async fn the_assets_are_served_with_a_strict_policy() {
    let c = Cluster::new("ui-assets", "1.39").await;
    let base = &c.servers[0].base;
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.expect("get");
        assert_eq!(r.status(), 200, "{path}");
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        let csp = header("content-security-policy");
        assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
        assert_eq!(header("x-content-type-options"), "nosniff");
    }
    let r = reqwest::get(format!("{base}/ui/elsewhere.js"))
        .await
        .expect("get");
    assert_eq!(r.status(), 404);
}
