//! `placement audit` against real databases: a clean one (providers,
//! allocations and a CPU-bound deployment made through the API) passes;
//! then one problem of each kind is written with SQL and the audit names
//! it; a database that is not ours is refused with a clear error.

use placement_testkit::{cluster, common};
use serde_json::{json, Value};
use std::process::Command;

/// Runs the audit: (exit code, JSON report or stderr).
fn audit(url: &str) -> (i32, Value, String) {
    let out = Command::new(placement_testkit::placement_bin())
        .args(["audit", "--json"])
        .env("DATABASE_URL", url)
        .output()
        .expect("run placement audit");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn checks(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|x| x["check"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn call(base: &str, method: reqwest::Method, path: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    assert!(status.is_success(), "{path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

#[tokio::test]
async fn audit_finds_each_kind_of_problem() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "audit", &[]).await;
    let b = &server.base;
    let post = reqwest::Method::POST;
    let put = reqwest::Method::PUT;
    let rp = call(
        b,
        post.clone(),
        "/resource_providers",
        json!({"name": "cn1"}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    call(
        b,
        put.clone(),
        &format!("/resource_providers/{rp}/inventories"),
        json!({
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}}}),
    )
    .await;
    let consumer = uuid::Uuid::new_v4();
    call(b, put.clone(), &format!("/allocations/{consumer}"), json!({
        "allocations": {&rp: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
        "project_id": "p1", "user_id": "u1", "consumer_generation": null, "consumer_type": "INSTANCE"})).await;
    let node = call(
        b,
        post.clone(),
        "/resource_providers",
        json!({"name": "node1"}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    call(
        b,
        put.clone(),
        &format!("/resource_providers/{node}/inventories"),
        json!({
        "resource_provider_generation": 0, "inventories": {"MEMORY_MB": {"total": 8192}}}),
    )
    .await;
    call(
        b,
        put,
        &format!("/resource_providers/{node}/cpu_topology"),
        json!({
        "share_base": 100, "cores": [{"id": "0"}, {"id": "1"}]}),
    )
    .await;
    call(
        b,
        reqwest::Method::PUT,
        &format!("/resource_providers/{node}/volumes"),
        json!({"volumes": {"/sda0": 1000}}),
    )
    .await;
    call(
        b,
        post,
        "/deployments",
        json!({"app": "web", "count": 1, "memory_mb": 512, "cpu": 1.5,
        "cpu_bind": true, "volumes": ["AUTO:/data:rw:600"], "project_id": "p1", "user_id": "u1"}),
    )
    .await;
    // A provider whose allocations are gone may be deleted; its per-project
    // totals (zero) go with it, or the audit below finds them dangling.
    let gone = call(
        b,
        reqwest::Method::POST,
        "/resource_providers",
        json!({"name": "gone"}),
    )
    .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    call(
        b,
        reqwest::Method::PUT,
        &format!("/resource_providers/{gone}/inventories"),
        json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}),
    )
    .await;
    let brief = uuid::Uuid::new_v4();
    call(
        b,
        reqwest::Method::PUT,
        &format!("/allocations/{brief}"),
        json!({
        "allocations": {&gone: {"resources": {"VCPU": 1}}},
        "project_id": "p2", "user_id": "u1", "consumer_generation": null, "consumer_type": "INSTANCE"}),
    )
    .await;
    let del = reqwest::Method::DELETE;
    call(
        b,
        del.clone(),
        &format!("/allocations/{brief}"),
        json!(null),
    )
    .await;
    call(b, del, &format!("/resource_providers/{gone}"), json!(null)).await;
    drop(server);

    let (code, report, err) = audit(&url);
    assert_eq!(
        (code, report["ok"].clone()),
        (0, json!(true)),
        "clean: {report} {err}"
    );

    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    let sql = |s: &'static str| sqlx::query(s);
    for (corruption, check) in [
        ("UPDATE inventories SET total = 1 WHERE resource_class_id = 0", "over_capacity"),
        (
            "DELETE FROM inventories WHERE resource_class_id = 1 AND resource_provider_id = (SELECT id FROM resource_providers WHERE name = 'cn1')",
            "allocation_without_inventory",
        ),
        (
            "INSERT INTO consumers (uuid, project_id, user_id) SELECT gen_random_uuid(), project_id, user_id FROM consumers LIMIT 1",
            "consumer_without_allocations",
        ),
        (
            "UPDATE instances SET core_shares = ARRAY(SELECT s - 10 FROM UNNEST(core_shares) s) WHERE 10 < ALL (core_shares)",
            "cpu_shares_mismatch",
        ),
        ("UPDATE node_volumes SET size = 500", "volumes_over_size"),
        (
            "DELETE FROM allocations WHERE consumer_id IN (SELECT consumer_id FROM instances)",
            "instance_without_allocation",
        ),
        ("UPDATE project_allocations SET used = used + 1", "project_totals_drift"),
        (
            "INSERT INTO project_allocations (project_id, resource_provider_id, resource_class_id, used) \
             SELECT MIN(id), -1, 0, 0 FROM projects",
            "dangling_reference",
        ),
        (
            "UPDATE allocations SET resource_class_id = 99999 WHERE id = (SELECT MIN(id) FROM allocations)",
            "dangling_reference",
        ),
        ("ALTER TABLE allocations DISABLE TRIGGER allocations_changed_ins", "change_log"),
    ] {
        sql(corruption).execute(&pool).await.expect(corruption);
        let (code, report, err) = audit(&url);
        assert_eq!(code, 1, "{corruption}: {report} {err}");
        assert!(checks(&report).iter().any(|c| c == check), "{corruption}: {report}");
    }
    let human = Command::new(placement_testkit::placement_bin())
        .arg("audit")
        .env("DATABASE_URL", &url)
        .output()
        .expect("audit");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("trigger allocations_changed_ins on allocations is disabled"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("problem(s) found"), "{text}");
    pool.close().await;

    // A database without our schema.
    let other = format!("audit_other_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&admin_url).await.expect("admin");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {other}")))
        .execute(&admin)
        .await
        .expect("create");
    admin.close().await;
    let (code, _, err) = audit(&common::url_with_db(&admin_url, &other));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not a placement database of this service"),
        "{err}"
    );
    common::drop_database(&admin_url, &other);
    common::drop_database(&admin_url, &db);
}
