//! The test harness: a fresh database per test (cloned from a migrated and
//! seeded template), the app built on it, a small request builder driving the
//! router with `oneshot`, assertions on Placement's error shape, and fixtures
//! that build state through the API itself.

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use placement::{app, config::Settings, db, AppState};
use serde_json::{json, Value};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};
use std::hash::{Hash, Hasher};
use tokio::sync::OnceCell;
use tower::ServiceExt;

/// A fresh database and the app on it; the database is dropped with it.
pub struct TestApp {
    pub app: Router,
    pub pool: PgPool,
    db_name: String,
    admin_url: String,
}

/// `DATABASE_URL` (a server whose role may CREATE DATABASE), or else a
/// throwaway PostgreSQL started once for this test process from the system
/// install, the way `placement serve` starts one, and stopped when the
/// process exits.
fn database_url() -> String {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return url;
    }
    static LOCAL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LOCAL.get_or_init(start_throwaway_postgres).clone()
}

fn start_throwaway_postgres() -> String {
    let dir = std::env::temp_dir().join(format!("placement-test-pg-{}", std::process::id()));
    let db = placement::localdb::LocalDb::start(&dir).unwrap_or_else(|e| {
        panic!("no DATABASE_URL and no local PostgreSQL could be started: {e}")
    });
    stop_when_this_process_exits(&dir);
    // Durability is not what these tests measure: no fsync, as in scripts/test.sh.
    let url = db.url.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut c = PgConnection::connect(&url)
                .await
                .expect("connect to the local PostgreSQL");
            for q in [
                "ALTER SYSTEM SET fsync = off",
                "ALTER SYSTEM SET synchronous_commit = off",
                "SELECT pg_reload_conf()",
            ] {
                sqlx::query(q).execute(&mut c).await.unwrap();
            }
        })
    })
    .join()
    .unwrap();
    db.url
}

/// A detached watchdog that stops the cluster and removes its directory
/// once this test process has gone.
fn stop_when_this_process_exits(dir: &std::path::Path) {
    let Some(bin) = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|d| {
        let mut bins: Vec<_> = d
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("pg_ctl").exists())
            .collect();
        bins.sort();
        bins.pop()
    }) else {
        return;
    };
    let as_pg = if std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"))
    {
        "runuser -u postgres --"
    } else {
        ""
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
         {as_pg} '{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        pg_ctl = bin.join("pg_ctl").display(),
        data = dir.join("pgdata").display(),
        dir = dir.display(),
    );
    let _ = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// `url` with its database name replaced by `db`.
pub fn url_with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// The template's name changes whenever the schema (the migrations and the
/// current definitions) or the standard names do.
fn template_name() -> String {
    // The service crate sits one directory above this one.
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut files: Vec<std::path::PathBuf> = ["migrations", "data"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.push(root.join("src/db/definitions.sql"));
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        f.file_name().hash(&mut h);
        std::fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    format!("placement_test_tpl_{:016x}", h.finish())
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// Creates the template database once per server (serialised across test
/// processes with an advisory lock; built under a temporary name and renamed
/// so a half-built template is never used).
async fn template(admin_url: &str) -> String {
    TEMPLATE
        .get_or_init(|| async {
            let name = template_name();
            let mut admin = PgConnection::connect(admin_url)
                .await
                .expect("connect to DATABASE_URL");
            sqlx::query("SELECT pg_advisory_lock(884422)")
                .execute(&mut admin)
                .await
                .unwrap();
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                    .bind(&name)
                    .fetch_optional(&mut admin)
                    .await
                    .unwrap();
            if exists.is_none() {
                let tmp = format!("placement_test_tmp_{}", uuid::Uuid::new_v4().simple());
                sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {tmp}")))
                    .execute(&mut admin)
                    .await
                    .expect("CREATE DATABASE (does the role have CREATEDB?)");
                let pool = PgPool::connect(&url_with_db(admin_url, &tmp))
                    .await
                    .unwrap();
                db::prepare(&pool).await.expect("migrate the template");
                pool.close().await;
                sqlx::query(AssertSqlSafe(format!(
                    "ALTER DATABASE {tmp} RENAME TO {name}"
                )))
                .execute(&mut admin)
                .await
                .unwrap();
            }
            sqlx::query("SELECT pg_advisory_unlock(884422)")
                .execute(&mut admin)
                .await
                .unwrap();
            let _ = admin.close().await;
            name
        })
        .await
        .clone()
}

/// Creates an empty, migrated and seeded database; returns its name.
pub async fn fresh_database() -> (String, String) {
    let admin_url = database_url();
    let tpl = template(&admin_url).await;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "CREATE DATABASE {name} TEMPLATE {tpl}"
    )))
    .execute(&mut admin)
    .await
    .expect("CREATE DATABASE from the template");
    let _ = admin.close().await;
    (admin_url, name)
}

/// Drops a test database (also when the test panicked), unless KEEP_TEST_DB is set.
pub fn drop_database(admin_url: &str, name: &str) {
    if std::env::var_os("KEEP_TEST_DB").is_some() {
        eprintln!("kept test database {name}");
        return;
    }
    let (admin_url, name) = (admin_url.to_string(), name.to_string());
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            if let Ok(mut c) = PgConnection::connect(&admin_url).await {
                let _ = sqlx::query(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut c)
                .await;
                let _ = c.close().await;
            }
        })
    })
    .join();
}

impl Drop for TestApp {
    fn drop(&mut self) {
        drop_database(&self.admin_url, &self.db_name);
    }
}

impl TestApp {
    /// A fresh database with default settings.
    pub async fn new() -> TestApp {
        Self::with_settings(Settings::default()).await
    }

    /// A fresh database with the given behaviour settings.
    pub async fn with_settings(settings: Settings) -> TestApp {
        let (admin_url, db_name) = fresh_database().await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(5)
            .connect(&url_with_db(&admin_url, &db_name))
            .await
            .unwrap();
        // Idempotent: makes sure the seed matches this build even if the
        // template was made by an older one with the same data files.
        db::prepare(&pool).await.unwrap();
        let app = app(AppState::new(
            placement::db::Pool::new(pool.clone()),
            settings,
        ));
        TestApp {
            app,
            pool,
            db_name,
            admin_url,
        }
    }

    /// A request builder (admin token, no microversion header).
    pub fn req(&self, method: &str, path: &str) -> Req<'_> {
        Req {
            t: self,
            method: Method::from_bytes(method.as_bytes()).unwrap(),
            path: path.to_string(),
            headers: vec![("x-auth-token".into(), "admin".into())],
            body: None,
        }
    }

    pub async fn get(&self, path: &str, mv: &str) -> Resp {
        self.req("GET", path).mv(mv).send().await
    }

    pub async fn delete(&self, path: &str, mv: &str) -> Resp {
        self.req("DELETE", path).mv(mv).send().await
    }

    pub async fn put(&self, path: &str, mv: &str, body: Value) -> Resp {
        self.req("PUT", path).mv(mv).json(&body).send().await
    }

    pub async fn post(&self, path: &str, mv: &str, body: Value) -> Resp {
        self.req("POST", path).mv(mv).json(&body).send().await
    }

    // ---- fixtures, built through the API ----

    /// Creates a root provider; returns its uuid.
    pub async fn create_rp(&self, name: &str) -> String {
        let r = self
            .post("/resource_providers", "1.20", json!({"name": name}))
            .await
            .expect(200);
        r.json()["uuid"].as_str().unwrap().to_string()
    }

    /// Creates a provider with a known uuid and optional parent.
    pub async fn create_rp_full(&self, name: &str, uuid: &str, parent: Option<&str>) {
        self.post(
            "/resource_providers",
            "1.20",
            json!({"name": name, "uuid": uuid, "parent_provider_uuid": parent}),
        )
        .await
        .expect(200);
    }

    /// The provider's current generation.
    pub async fn generation(&self, rp: &str) -> i64 {
        self.get(&format!("/resource_providers/{rp}"), "1.14")
            .await
            .expect(200)
            .json()["generation"]
            .as_i64()
            .unwrap()
    }

    /// Replaces the provider's inventories (`{"VCPU": {"total": 8}, ...}`);
    /// returns the new generation.
    pub async fn set_inventories(&self, rp: &str, inventories: Value) -> i64 {
        let g = self.generation(rp).await;
        let r = self
            .put(
                &format!("/resource_providers/{rp}/inventories"),
                "1.26",
                json!({"resource_provider_generation": g, "inventories": inventories}),
            )
            .await
            .expect(200);
        r.json()["resource_provider_generation"].as_i64().unwrap()
    }

    /// Writes a new consumer's allocations at 1.28 (`{rp: {"VCPU": 1}}`).
    pub async fn allocate(&self, consumer: &str, project: &str, user: &str, allocs: Value) {
        let r = self.try_allocate(consumer, project, user, allocs).await;
        r.expect(204);
    }

    pub async fn try_allocate(
        &self,
        consumer: &str,
        project: &str,
        user: &str,
        allocs: Value,
    ) -> Resp {
        let mut allocations = serde_json::Map::new();
        for (rp, resources) in allocs.as_object().unwrap() {
            allocations.insert(rp.clone(), json!({ "resources": resources }));
        }
        self.put(
            &format!("/allocations/{consumer}"),
            "1.28",
            json!({
                "allocations": allocations,
                "project_id": project,
                "user_id": user,
                "consumer_generation": null,
            }),
        )
        .await
    }

    /// Sets a provider's aggregates at 1.19 (generation-checked).
    pub async fn set_aggregates(&self, rp: &str, aggs: &[&str]) {
        let g = self.generation(rp).await;
        self.put(
            &format!("/resource_providers/{rp}/aggregates"),
            "1.19",
            json!({"aggregates": aggs, "resource_provider_generation": g}),
        )
        .await
        .expect(200);
    }

    /// Creates a custom trait (idempotent).
    pub async fn create_trait(&self, name: &str) {
        let r = self
            .req("PUT", &format!("/traits/{name}"))
            .mv("1.6")
            .send()
            .await;
        assert!(
            r.status == 201 || r.status == 204,
            "PUT /traits/{name}: {r:?}"
        );
    }

    /// Sets a provider's traits.
    pub async fn set_traits(&self, rp: &str, traits: &[&str]) {
        let g = self.generation(rp).await;
        self.put(
            &format!("/resource_providers/{rp}/traits"),
            "1.6",
            json!({"traits": traits, "resource_provider_generation": g}),
        )
        .await
        .expect(200);
    }

    /// `GET /resource_providers?<query>` at `mv`: the names found, sorted.
    pub async fn rp_names(&self, query: &str, mv: &str) -> Vec<String> {
        let r = self
            .get(&format!("/resource_providers?{query}"), mv)
            .await
            .expect(200);
        let mut names: Vec<String> = r.json()["resource_providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }
}

/// A new random uuid, dashed lower case.
pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A request under construction.
pub struct Req<'a> {
    t: &'a TestApp,
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

impl Req<'_> {
    /// Sets `OpenStack-API-Version: placement <mv>`.
    pub fn mv(self, mv: &str) -> Self {
        self.header("openstack-api-version", &format!("placement {mv}"))
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        self.headers.push((k.to_string(), v.to_string()));
        self
    }

    /// Adds a header without removing earlier ones of the same name.
    pub fn append_header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }

    /// Replaces the token (`None`: no `x-auth-token` at all).
    pub fn token(mut self, token: Option<&str>) -> Self {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("x-auth-token"));
        if let Some(t) = token {
            self.headers.push(("x-auth-token".into(), t.into()));
        }
        self
    }

    pub fn json(self, v: &Value) -> Self {
        self.raw(Some("application/json"), v.to_string().into_bytes())
    }

    /// A raw body with an optional content type.
    pub fn raw(mut self, content_type: Option<&str>, body: impl Into<Vec<u8>>) -> Self {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
        if let Some(c) = content_type {
            self.headers.push(("content-type".into(), c.into()));
        }
        self.body = Some(body.into());
        self
    }

    pub async fn send(self) -> Resp {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(&self.path);
        let body = self.body.unwrap_or_default();
        for (k, v) in &self.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        if !body.is_empty() {
            b = b.header("content-length", body.len().to_string());
        }
        let req = b.body(Body::from(body)).unwrap();
        let resp = self.t.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        let resp = Resp {
            method: self.method,
            path: self.path,
            status,
            headers,
            body,
        };
        check_answer_schema(&resp);
        resp
    }
}

/// Every success answer with a JSON body must match the schema the
/// OpenAPI document gives its route: the typed responses and the document
/// cannot drift apart while the suite passes.
fn check_answer_schema(resp: &Resp) {
    let is_json = resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"));
    if !resp.status.is_success() || !is_json || resp.body.is_empty() {
        return;
    }
    let path = resp.path.split('?').next().unwrap_or_default();
    let method = if resp.method == Method::HEAD {
        Method::GET
    } else {
        resp.method.clone()
    };
    let Some(route) = placement::api::routes::ROUTES
        .iter()
        .find(|r| r.method == method && template_matches(r.path, path))
    else {
        return;
    };
    let name = route.answer.unwrap_or_else(|| {
        panic!(
            "{} {path} answered a JSON body but its route declares none",
            resp.method
        )
    });
    let schema = answer_schema(name);
    let body: Value = serde_json::from_slice(&resp.body).expect("a JSON body");
    if let Err(e) = placement::api::schema::validate::validate(&schema, &body) {
        panic!(
            "{} {} answered a body that does not match schema {name}: {}\n{}",
            resp.method,
            resp.path,
            e.render(),
            String::from_utf8_lossy(&resp.body)
        );
    }
}

/// True when `path` fits the route template (`{x}` matches one segment).
fn template_matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(a, b)| a == b || (a.starts_with('{') && !b.is_empty()))
}

/// A component schema with its references inlined, in the dialect the
/// service's validator reads (`oneOf` as `anyOf`: the branches are exclusive).
fn answer_schema(name: &str) -> Value {
    static COMPONENTS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let components = COMPONENTS.get_or_init(|| {
        let doc = serde_json::to_value(placement::api::docs::openapi()).unwrap();
        doc["components"]["schemas"].clone()
    });
    inline(&components[name], components)
}

fn inline(v: &Value, components: &Value) -> Value {
    match v {
        Value::Object(m) => {
            if let Some(name) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                return inline(&components[name], components);
            }
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                let key = if k == "oneOf" { "anyOf" } else { k.as_str() };
                out.insert(key.to_string(), inline(x, components));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| inline(x, components)).collect()),
        other => other.clone(),
    }
}

/// `GET /allocations/{c}` at `mv`, which must answer 200.
pub async fn consumer_allocations(t: &TestApp, c: &str, mv: &str) -> Value {
    t.get(&format!("/allocations/{c}"), mv)
        .await
        .expect(200)
        .json()
}

/// A response, fully read.
pub struct Resp {
    pub method: Method,
    pub path: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} -> {} {}",
            self.method,
            self.path,
            self.status.as_u16(),
            String::from_utf8_lossy(&self.body)
        )
    }
}

impl Resp {
    /// Asserts the status (showing the body when it differs).
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(self.status.as_u16(), status, "unexpected status: {self:?}");
        self
    }

    /// The body as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }

    /// What is wrong with the body as a Placement error, if anything:
    /// `{"errors": [{"status", "title", "detail", "request_id"[, "code"]}]}`
    /// with `status` equal to the HTTP status and `request_id` equal to the
    /// `x-openstack-request-id` header.
    pub fn shape_problem(&self) -> Option<String> {
        let Ok(v) = serde_json::from_slice::<Value>(&self.body) else {
            return Some("body is not JSON".into());
        };
        let Some(errors) = v["errors"].as_array() else {
            return Some("no errors list".into());
        };
        if errors.len() != 1 {
            return Some(format!("{} errors", errors.len()));
        }
        let e = &errors[0];
        if e["status"] != json!(self.status.as_u16()) {
            return Some("status differs from the HTTP status".into());
        }
        if e["title"].as_str() != self.status.canonical_reason() {
            return Some("wrong title".into());
        }
        if !e["detail"].is_string() {
            return Some("no detail".into());
        }
        let Some(rid) = e["request_id"].as_str() else {
            return Some("no request_id".into());
        };
        if !rid.starts_with("req-") {
            return Some("request_id does not start with req-".into());
        }
        if self.header("x-openstack-request-id").as_deref() != Some(rid) {
            return Some("request_id differs from x-openstack-request-id".into());
        }
        if let Some(code) = e.get("code") {
            if !code.as_str().is_some_and(|c| c.starts_with("placement.")) {
                return Some(format!("bad code {code}"));
            }
        }
        None
    }

    /// The first error object, after checking Placement's error shape.
    #[track_caller]
    pub fn error(&self) -> Value {
        if let Some(p) = self.shape_problem() {
            panic!("not a Placement error ({p}): {self:?}");
        }
        self.json()["errors"][0].clone()
    }

    /// The negotiated microversion's minor part, from the response header.
    pub fn minor_version(&self) -> Option<u32> {
        self.header("openstack-api-version")?
            .strip_prefix("placement 1.")?
            .parse()
            .ok()
    }

    /// Asserts an error with this status and a detail containing `detail`,
    /// and its `code`: absent below microversion 1.23 (or when no version was
    /// negotiated), else `code` (`None`: `placement.undefined_code`).
    #[track_caller]
    pub fn expect_error(self, status: u16, code: Option<&str>, detail: &str) -> Self {
        assert_eq!(self.status.as_u16(), status, "unexpected status: {self:?}");
        let e = self.error();
        let want = match self.minor_version() {
            Some(m) if m >= 23 => Some(code.unwrap_or("placement.undefined_code")),
            _ => None,
        };
        assert_eq!(e["code"].as_str(), want, "wrong code: {self:?}");
        let d = e["detail"].as_str().unwrap();
        assert!(d.contains(detail), "detail lacks {detail:?}: {self:?}");
        self
    }
}
