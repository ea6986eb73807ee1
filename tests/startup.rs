//! Start-up and security through real server processes: a Placement-style
//! `placement.conf` alone configures a server, a malformed one stops it
//! with its line; a bad policy file stops start-up with one line naming
//! the line, and a good one's rules are what the server enforces; under
//! Keystone a token nobody can validate gets 503 (never a pass), a
//! missing or malformed one 401 with `WWW-Authenticate`, and identity
//! headers change nothing; CORS answers bad preflights without its
//! headers; a second zero-config server on a data directory in use names
//! the first. (The real Keystone is driven by `scripts/keystone_check.sh`.)

use placement_testkit::{cluster, common};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn policy_file(text: &str) -> tempfile_path::TempFile {
    tempfile_path::TempFile::with(text)
}

/// A file under the temp dir removed on drop (no extra crate for it).
mod tempfile_path {
    pub struct TempFile(pub std::path::PathBuf);
    impl TempFile {
        pub fn with(text: &str) -> Self {
            let path = std::env::temp_dir().join(format!("policy-{}.yaml", uuid::Uuid::new_v4()));
            std::fs::write(&path, text).expect("write policy file");
            TempFile(path)
        }
        pub fn arg(&self) -> String {
            self.0.display().to_string()
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Runs `placement serve` with `args` and expects it to exit at once with
/// an error; its stderr. (A `--data-dir` run gets no DATABASE_URL.)
fn refused_start(args: &[&str]) -> String {
    let mut cmd = Command::new(placement_testkit::placement_bin());
    if args.contains(&"--data-dir") {
        cmd.env_remove("DATABASE_URL");
    } else {
        cmd.env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none");
    }
    let mut child = cmd
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start placement");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(!status.success(), "{args:?} started");
            let out = child.wait_with_output().expect("stderr");
            return String::from_utf8_lossy(&out.stderr).into_owned();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?}: still running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_policy_files_and_keystone_options_stop_start_up() {
    for (text, says) in [
        ("admin_api: \"role:admin or\"\n", "line 1"),
        (
            "admin_api: role:admin\nplacement:no:such:rule: \"@\"\n",
            "line 2: unknown rule",
        ),
        (
            "admin_api: rule:service_api\nservice_api: rule:admin_api\n",
            "cycle",
        ),
        ("{\"admin_api\": \"role:admin\",}\n", "line 1"),
        ("admin_api: [role:admin]\n", "line 1"),
        ("admin_api: role:admin\n  nested: x\n", "line 2"),
    ] {
        let f = policy_file(text);
        let err = refused_start(&["--policy-file", &f.arg()]);
        assert!(err.contains(says), "{text:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let err = refused_start(&["--policy-file", "/nonexistent/policy.yaml"]);
    assert!(err.contains("/nonexistent/policy.yaml"), "{err}");
    let err = refused_start(&["--auth-strategy", "keystone"]);
    assert!(err.contains("--keystone-url"), "{err}");
    let err = refused_start(&[
        "--auth-strategy",
        "keystone",
        "--keystone-url",
        "http://127.0.0.1:1/v3",
        "--keystone-username",
        "placement",
        "--keystone-project",
        "service",
    ]);
    assert!(err.contains("--keystone-password"), "{err}");
}

async fn send(
    base: &str,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("openstack-api-version", "placement latest");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

#[tokio::test]
async fn a_policy_file_is_what_the_server_enforces() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    let f = policy_file(
        "# operators may list, nobody else\nplacement:resource_providers:list: \"role:operator\"\n\"admin_or_service_api\": 'role:admin'\n",
    );
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server =
        cluster::start_server_with(&url, "policy-file", &["--policy-file", &f.arg()]).await;
    let b = &server.base;
    let get = reqwest::Method::GET;
    let operator = [
        ("x-auth-token", "user"),
        ("x-roles", "operator"),
        ("x-project-id", "p1"),
    ];
    assert_eq!(
        send(b, get.clone(), "/resource_providers", &operator)
            .await
            .0,
        200
    );
    let (status, _, body) = send(
        b,
        get.clone(),
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 403, "the file replaced the default: {body}");
    assert_eq!(
        body["errors"][0]["detail"].as_str().unwrap_or(""),
        "Access was denied to this resource.\n\n Policy does not allow placement:resource_providers:list to be performed.  "
    );
    assert_eq!(send(b, get.clone(), "/traits", &operator).await.0, 403);
    assert_eq!(
        send(b, get, "/traits", &[("x-auth-token", "admin")])
            .await
            .0,
        200
    );
    drop(server);
    common::drop_database(&admin_url, &db);
}

#[tokio::test]
async fn keystone_that_cannot_answer_means_503_never_a_pass() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    // Nothing listens there: every validation fails to connect.
    let dead = format!("http://127.0.0.1:{}/v3", cluster::free_port());
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(
        &url,
        "keystone-down",
        &[
            "--auth-strategy",
            "keystone",
            "--keystone-url",
            &dead,
            "--keystone-username",
            "placement",
            "--keystone-project",
            "service",
            "--keystone-password",
            "secret",
            "--keystone-timeout",
            "2",
        ],
    )
    .await;
    assert!(
        !server.log().contains("secret"),
        "the password is never logged"
    );
    let b = &server.base;
    let get = reqwest::Method::GET;
    let (status, headers, body) = send(b, get.clone(), "/resource_providers", &[]).await;
    assert_eq!(status, 401, "{body}");
    let challenge = headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert_eq!(
        challenge,
        format!("Keystone uri=\"{}\"", dead.trim_end_matches("/v3"))
    );
    for forged in [
        vec![("x-auth-token", "admin")],
        vec![
            ("x-auth-token", "user"),
            ("x-roles", "admin"),
            ("x-project-id", "p1"),
            ("x-user-id", "u1"),
        ],
        vec![
            ("x-auth-token", "user"),
            ("x-identity-status", "Confirmed"),
            ("x-roles", "admin"),
        ],
    ] {
        let (status, headers, body) = send(b, get.clone(), "/resource_providers", &forged).await;
        assert_eq!(status, 503, "{forged:?}: {body}");
        assert_eq!(body["errors"][0]["code"], "placement.identity.unavailable");
        assert!(body["errors"][0]["request_id"]
            .as_str()
            .is_some_and(|r| r.starts_with("req-")));
        assert!(headers.contains_key("retry-after"));
    }
    // Malformed or enormous tokens are refused without asking anyone.
    let huge = "a".repeat(9000);
    for token in [huge.as_str(), "two words", "tab\there"] {
        let (status, _, body) = send(
            b,
            get.clone(),
            "/resource_providers",
            &[("x-auth-token", token)],
        )
        .await;
        assert_eq!(status, 401, "{body}");
    }
    // The version document needs no token and no Keystone.
    assert_eq!(send(b, get, "/", &[]).await.0, 200);
    drop(server);
    common::drop_database(&admin_url, &db);
}

#[tokio::test]
async fn cors_answers_bad_preflights_without_its_headers() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(
        &url,
        "cors",
        &[
            "--cors-allowed-origin",
            "https://ui.example.com,https://other.example.com",
            "--cors-max-age",
            "600",
        ],
    )
    .await;
    let b = &server.base;
    let opts = reqwest::Method::OPTIONS;
    let ok = [
        ("origin", "https://ui.example.com"),
        ("access-control-request-method", "PUT"),
        (
            "access-control-request-headers",
            "X-Auth-Token, OpenStack-API-Version, content-type",
        ),
    ];
    let (status, h, _) = send(b, opts.clone(), "/resource_providers", &ok).await;
    assert_eq!(status, 200);
    let header = |h: &reqwest::header::HeaderMap, n: &str| {
        h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string)
    };
    assert_eq!(
        header(&h, "access-control-allow-origin").as_deref(),
        Some("https://ui.example.com")
    );
    assert_eq!(
        header(&h, "access-control-allow-methods").as_deref(),
        Some("PUT")
    );
    assert_eq!(header(&h, "access-control-max-age").as_deref(), Some("600"));
    assert_eq!(
        header(&h, "access-control-allow-headers").as_deref(),
        Some("x-auth-token,openstack-api-version,content-type")
    );
    let long = format!("https://{}.example.com", "x".repeat(4000));
    for bad in [
        vec![
            ("origin", "https://evil.example.com"),
            ("access-control-request-method", "GET"),
        ],
        vec![("origin", "null"), ("access-control-request-method", "GET")],
        vec![
            ("origin", long.as_str()),
            ("access-control-request-method", "GET"),
        ],
        vec![
            ("origin", "https://ui.example.com"),
            ("access-control-request-method", "TRACE"),
        ],
        vec![("origin", "https://ui.example.com")],
        vec![
            ("origin", "https://ui.example.com"),
            ("access-control-request-method", "GET"),
            ("access-control-request-headers", "x-evil"),
        ],
    ] {
        let (status, h, _) = send(b, opts.clone(), "/resource_providers", &bad).await;
        assert_eq!(status, 200, "{bad:?}");
        assert!(h.get("access-control-allow-origin").is_none(), "{bad:?}");
    }
    // An actual request from an allowed origin can read the request id.
    let (status, h, _) = send(
        b,
        reqwest::Method::GET,
        "/resource_providers",
        &[
            ("x-auth-token", "admin"),
            ("origin", "https://other.example.com"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&h, "access-control-allow-origin").as_deref(),
        Some("https://other.example.com")
    );
    assert!(header(&h, "access-control-expose-headers")
        .is_some_and(|v| v.contains("X-Openstack-Request-Id")));
    drop(server);
    common::drop_database(&admin_url, &db);
}

/// A server started with no flags at all: `placement.conf` (through
/// `PLACEMENT_CONFIG_FILE`) gives the database, the policy mode, the
/// candidate cap and CORS, and an option it does not use is a warning.
#[tokio::test]
async fn a_placement_conf_alone_configures_the_server() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let sqlalchemy = url
        .replacen("postgres://", "postgresql+psycopg2://", 1)
        .replacen("postgresql://", "postgresql+psycopg2://", 1);
    let conf = std::env::temp_dir().join(format!("placement-{}.conf", uuid::Uuid::new_v4()));
    std::fs::write(
        &conf,
        format!(
            "[DEFAULT]\ndebug = False\n\n[api]\nauth_strategy = noauth2\n\n[placement_database]\nconnection = {sqlalchemy}\n\n\
             [placement]\nmax_allocation_candidates = 2\n\n[oslo_policy]\nenforce_new_defaults = True\nenforce_scope = True\n\n\
             [cors]\nallowed_origin = https://ui.example.com\n\n[wsgi]\napi_paste_config = /etc/placement/api-paste.ini\n"
        ),
    )
    .expect("write placement.conf");
    let port = cluster::free_port();
    let log = std::env::temp_dir().join(format!("placement-conf-{port}.log"));
    let mut child = Command::new(placement_testkit::placement_bin())
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env("PLACEMENT_CONFIG_FILE", &conf)
        .env("PLACEMENT_BIND", format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start placement");
    let b = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{b}/")).await.is_err() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "exited: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let admin = [
        ("x-auth-token", "admin"),
        ("content-type", "application/json"),
    ];
    let post = reqwest::Method::POST;
    // New defaults: the reshaper is the service role's alone.
    let (status, _, body) = send(&b, post.clone(), "/reshaper", &admin).await;
    assert_eq!(status, 403, "{body}");
    let client = reqwest::Client::new();
    for i in 0..3 {
        let rp = uuid::Uuid::new_v4();
        let r = client
            .post(format!("{b}/resource_providers"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.20")
            .json(&serde_json::json!({"name": format!("conf-{i}"), "uuid": rp}))
            .send()
            .await
            .expect("create");
        assert!(r.status().is_success());
        let r = client.put(format!("{b}/resource_providers/{rp}/inventories")).header("x-auth-token", "admin")
            .json(&serde_json::json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}))
            .send().await.expect("inventory");
        assert!(r.status().is_success());
    }
    let (status, _, body) = send(
        &b,
        reqwest::Method::GET,
        "/allocation_candidates?resources=VCPU:1",
        &admin,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["allocation_requests"].as_array().map(Vec::len),
        Some(2),
        "max_allocation_candidates = 2"
    );
    let (_, h, _) = send(
        &b,
        reqwest::Method::OPTIONS,
        "/",
        &[
            ("origin", "https://ui.example.com"),
            ("access-control-request-method", "GET"),
        ],
    )
    .await;
    assert!(
        h.contains_key("access-control-allow-origin"),
        "CORS from the file"
    );
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("[wsgi] api_paste_config is not used"),
        "{text}"
    );
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&conf);
    common::drop_database(&admin_url, &db);
}

#[test]
fn a_malformed_placement_conf_stops_start_up() {
    for (text, says) in [
        (
            "[placement]\nmax_allocation_candidates = lots\n",
            "line 2: [placement] max_allocation_candidates",
        ),
        ("[oslo_policy\n", "line 1"),
        (
            "[placement_database]\nconnection = mysql+pymysql://p:p@db/placement\n",
            "mysql is not supported",
        ),
    ] {
        let conf = std::env::temp_dir().join(format!("placement-{}.conf", uuid::Uuid::new_v4()));
        std::fs::write(&conf, text).expect("write");
        let err = refused_start(&["--config-file", &conf.display().to_string()]);
        let _ = std::fs::remove_file(&conf);
        assert!(err.contains(says), "{text:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// Starts a zero-configuration server on `dir`; its child and base URL.
async fn zero_config(dir: &std::path::Path) -> (std::process::Child, String) {
    let port = cluster::free_port();
    let mut child = Command::new(placement_testkit::placement_bin())
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start placement");
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while reqwest::get(format!("{base}/")).await.is_err() {
        assert!(child.try_wait().expect("wait").is_none(), "exited");
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, base)
}

/// SIGTERM, so that the server stops its PostgreSQL, then wait.
fn terminate(mut child: std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[tokio::test]
async fn a_second_zero_config_server_names_the_first() {
    let dir = std::env::temp_dir().join(format!("placement-data-{}", uuid::Uuid::new_v4()));
    let (first, _) = zero_config(&dir).await;
    let err = refused_start(&["--data-dir", &dir.display().to_string()]);
    assert!(
        err.contains(&format!(
            "is in use by another placement serve (pid {})",
            first.id()
        )),
        "{err}"
    );
    let error_lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("placement: "))
        .collect();
    assert_eq!(error_lines.len(), 1, "one line: {err}");
    assert!(error_lines[0].contains("--data-dir"), "{err}");
    terminate(first);
    // Once the first is gone, the directory is free again.
    let (again, base) = zero_config(&dir).await;
    assert_eq!(
        reqwest::get(format!("{base}/"))
            .await
            .map(|r| r.status().as_u16())
            .ok(),
        Some(200)
    );
    terminate(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CA and a server certificate for localhost and 127.0.0.1, made with
/// the openssl CLI in `dir`: (ca.crt path, server cert PEM, server key PEM).
fn make_certs(dir: &std::path::Path, ca: &str) -> (std::path::PathBuf, String, String) {
    let run = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "openssl {args:?}");
    };
    let subject = format!("/CN={ca}");
    run(&[
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "1", "-subj", &subject,
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("san");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
    (dir.join("ca.crt"), read("server.crt"), read("server.key"))
}

/// The server against a PostgreSQL that takes TLS connections only: it
/// connects with `require`, `verify-ca` and `verify-full`, and refuses
/// with a clear error a certificate from another CA and a plain connection.
#[tokio::test]
async fn tls_to_postgresql_honours_sslmode() {
    let dir = std::env::temp_dir().join(format!("placement-tls-{}", uuid::Uuid::new_v4()));
    let other = dir.join("other");
    std::fs::create_dir_all(&other).expect("dir");
    let (ca, cert, key) = make_certs(&dir, "placement-test-ca");
    let (wrong_ca, _, _) = make_certs(&other, "some-other-ca");
    let pg = placement_testkit::pg::PgCluster::start_tls(&cert, &key);
    let port = pg.port;
    let url = |host: &str, query: &str| format!("postgres://postgres@{host}:{port}/app?{query}");
    for (host, query) in [
        ("127.0.0.1", "sslmode=require".to_string()),
        (
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
        ),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        ),
    ] {
        let server = cluster::start_server_with(&url(host, &query), "tls", &[]).await;
        let (status, _, body) = send(
            &server.base,
            reqwest::Method::GET,
            "/resource_providers",
            &[("x-auth-token", "admin")],
        )
        .await;
        assert_eq!(status, 200, "{query}: {body}");
    }
    let refused = |query: String| {
        let mut child = Command::new(placement_testkit::placement_bin())
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("DATABASE_URL", url("localhost", &query))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start");
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{query}: still running");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("output");
        assert!(!out.status.success(), "{query} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(format!(
        "sslmode=verify-full&sslrootcert={}",
        wrong_ca.display()
    ));
    assert!(
        err.contains(&format!("connecting to PostgreSQL at localhost:{port}/app")),
        "{err}"
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    let err = refused("sslmode=disable".into());
    assert!(
        err.contains("no encryption") || err.contains("pg_hba.conf"),
        "{err}"
    );
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--log-format json`: every line is one JSON object, and a request's
/// line carries its id, route, microversion, status and latency.
#[tokio::test]
async fn json_logs_carry_the_request() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    let (admin_url, db) = common::fresh_database().await;
    let port = cluster::free_port();
    let log = std::env::temp_dir().join(format!("placement-json-{port}.log"));
    let mut child = Command::new(placement_testkit::placement_bin())
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        .env("DATABASE_URL", common::url_with_db(&admin_url, &db))
        .env("RUST_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start");
    let b = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{b}/")).await.is_err() {
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, headers, _) = send(
        &b,
        reqwest::Method::GET,
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 200);
    let id = headers["x-openstack-request-id"]
        .to_str()
        .expect("id")
        .to_string();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    let _ = std::fs::remove_file(&log);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let line = lines
        .iter()
        .find(|l| l["span"]["request_id"] == id.as_str() && l["fields"]["message"] == "request")
        .unwrap_or_else(|| panic!("no line for {id}: {text}"));
    assert_eq!(line["span"]["route"], "/resource_providers");
    assert_eq!(line["span"]["microversion"], "1.39");
    assert_eq!(line["fields"]["status"], 200);
    assert!(line["fields"]["ms"].as_f64().is_some(), "{line}");
    common::drop_database(&admin_url, &db);
}

/// `GET /metrics` without a token, parsed by a Prometheus text parser: the
/// request counters move by route (never by uuid), candidates and the
/// snapshot are counted, the pool is shown; `--metrics false` is a 404.
#[tokio::test]
async fn metrics_count_what_happened() {
    if std::env::var("DATABASE_URL").is_err() {
        return;
    }
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "metrics", &[]).await;
    let b = &server.base;
    let scrape = || async {
        let r = reqwest::get(format!("{b}/metrics")).await.expect("scrape");
        assert_eq!(r.status(), 200);
        let text = r.text().await.expect("text");
        let lines = text.lines().map(|l| Ok(l.to_string()));
        prometheus_parse::Scrape::parse(lines).expect("Prometheus text format")
    };
    let value = |s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]| -> f64 {
        s.samples
            .iter()
            .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .map(|x| match x.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let before = scrape().await;
    let admin = [
        ("x-auth-token", "admin"),
        ("content-type", "application/json"),
    ];
    let rp = uuid::Uuid::new_v4();
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{b}/resource_providers"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.20")
        .json(&serde_json::json!({"name": "m1", "uuid": rp}))
        .send()
        .await
        .expect("create");
    assert!(r.status().is_success());
    client
        .put(format!("{b}/resource_providers/{rp}/inventories"))
        .header("x-auth-token", "admin")
        .json(&serde_json::json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}))
        .send()
        .await
        .expect("inventory");
    for _ in 0..3 {
        let (s, _, _) = send(
            b,
            reqwest::Method::GET,
            &format!("/resource_providers/{rp}"),
            &admin,
        )
        .await;
        assert_eq!(s, 200);
    }
    let (s, _, _) = send(
        b,
        reqwest::Method::GET,
        "/allocation_candidates?resources=VCPU:1",
        &admin,
    )
    .await;
    assert_eq!(s, 200);
    let (s, _, _) = send(b, reqwest::Method::GET, "/resource_providers", &[]).await;
    assert_eq!(s, 401);
    let after = scrape().await;
    let shown = [
        ("route", "/resource_providers/:uuid"),
        ("method", "GET"),
        ("status", "200"),
    ];
    let requests = "placement_http_requests_total";
    assert_eq!(
        value(&after, requests, &shown) - value(&before, requests, &shown),
        3.0
    );
    let refused = [("route", "unmatched"), ("status", "401")];
    assert_eq!(
        value(&after, requests, &refused) - value(&before, requests, &refused),
        1.0
    );
    assert!(
        value(
            &after,
            "placement_http_request_duration_seconds_count",
            &[("route", "/allocation_candidates")]
        ) >= 1.0
    );
    assert_eq!(
        value(&after, "placement_candidates_returned_total", &[]),
        1.0
    );
    assert!(value(&after, "placement_snapshot_reloads_total", &[]) >= 1.0);
    assert_eq!(
        value(&after, "placement_db_pool_connections", &[("state", "max")]),
        10.0
    );
    let uuid_labels = after
        .samples
        .iter()
        .flat_map(|s| s.labels.values())
        .any(|v| uuid::Uuid::parse_str(v).is_ok());
    assert!(!uuid_labels, "no uuid in any label");
    drop(server);
    let off = cluster::start_server_with(&url, "metrics-off", &["--metrics", "false"]).await;
    assert_eq!(
        reqwest::get(format!("{}/metrics", off.base))
            .await
            .expect("get")
            .status(),
        404
    );
    drop(off);
    common::drop_database(&admin_url, &db);
}
