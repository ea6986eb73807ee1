//! The zero-config data directory in use, and TLS to PostgreSQL.

use super::*;
use placement_testkit::{cluster, common};

/// A zero-config server, stopped with SIGTERM when dropped (also when an
/// assertion fails), so that it stops its PostgreSQL.
pub(crate) struct ZeroConfig(pub(crate) std::process::Child);

impl Drop for ZeroConfig {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// Starts a zero-configuration server on `dir`; it and its base URL.
pub(crate) async fn zero_config(dir: &std::path::Path) -> (ZeroConfig, String) {
    zero_config_with(dir, &[]).await
}

/// Like [`zero_config`], with extra environment variables.
pub(crate) async fn zero_config_with(
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (ZeroConfig, String) {
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
        .envs(env.iter().copied())
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
    (ZeroConfig(child), base)
}

#[tokio::test]
async fn a_second_zero_config_server_names_the_first() {
    let dir = std::env::temp_dir().join(format!("placement-data-{}", uuid::Uuid::new_v4()));
    let (first, _) = zero_config(&dir).await;
    let err = refused_start(&["--data-dir", &dir.display().to_string()]);
    assert!(
        err.contains(&format!(
            "is in use by another placement serve (pid {})",
            first.0.id()
        )),
        "{err}"
    );
    let error_lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("placement: "))
        .collect();
    assert_eq!(error_lines.len(), 1, "one line: {err}");
    assert!(error_lines[0].contains("--data-dir"), "{err}");
    drop(first);
    // Once the first is gone, the directory is free again.
    let (again, base) = zero_config(&dir).await;
    assert_eq!(
        reqwest::get(format!("{base}/"))
            .await
            .map(|r| r.status().as_u16())
            .ok(),
        Some(200)
    );
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `placement audit --json` on a data directory, without DATABASE_URL:
/// (exit code, stdout, stderr).
fn audit_local(dir: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(placement_testkit::placement_bin())
        .args(["audit", "--json", "--data-dir"])
        .arg(dir)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run placement audit");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The audit finds the zero-config database `serve` made: through the
/// running server's socket (leaving it running), and, once the server
/// has stopped, by starting the cluster for itself and stopping it after.
#[tokio::test]
async fn audit_finds_the_zero_config_database() {
    let dir = std::env::temp_dir().join(format!("placement-data-{}", uuid::Uuid::new_v4()));
    let (nothing, _, err) = audit_local(&dir);
    assert_eq!(nothing, 2, "no database yet: {err}");
    assert!(err.contains("placement serve"), "{err}");

    let (server, base) = zero_config(&dir).await;
    let client = reqwest::Client::new();
    let made = client
        .post(format!("{base}/resource_providers"))
        .header("x-auth-token", "admin")
        .json(&serde_json::json!({"name": "audited"}))
        .send()
        .await
        .expect("create a provider");
    assert_eq!(made.status().as_u16(), 201);
    let (code, report, err) = audit_local(&dir);
    assert_eq!(code, 0, "{report}{err}");
    let report: Value = serde_json::from_str(&report).expect("the audit's JSON");
    assert_eq!(report["findings"], serde_json::json!([]), "{report}");
    // The server still answers: the audit left its PostgreSQL alone.
    let still = reqwest::get(format!("{base}/"))
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(still.ok(), Some(200));
    drop(server);

    let (code, report, err) = audit_local(&dir);
    assert_eq!(code, 0, "{report}{err}");
    // The audit stopped what it started: a server starts there again.
    let (again, _) = zero_config(&dir).await;
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CA and a server certificate for localhost and 127.0.0.1, made with
/// the openssl CLI in `dir`: (ca.crt path, server cert PEM, server key PEM).
fn make_certs(dir: &std::path::Path, ca: &str) -> (std::path::PathBuf, String, String) {
    make_certs_for(dir, ca, "DNS:localhost,IP:127.0.0.1")
}

/// A CA named `ca` and a server certificate it signed for `names` (an
/// X.509 subjectAltName list): (CA file, certificate PEM, key PEM).
fn make_certs_for(
    dir: &std::path::Path,
    ca: &str,
    names: &str,
) -> (std::path::PathBuf, String, String) {
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
    std::fs::write(dir.join("san.ext"), format!("subjectAltName={names}\n")).expect("san");
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

/// Issue 64, defect 5: a CA given without `sslmode=verify-ca` checks the
/// server's name too. A PostgreSQL whose certificate (signed by the given
/// CA) names another host is refused under `require` and by default;
/// `verify-ca` is the explicit way to check the chain only.
#[tokio::test]
async fn a_certificate_for_another_name_is_refused_when_a_ca_is_given() {
    let dir = std::env::temp_dir().join(format!("placement-tls-name-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (ca, cert, key) = make_certs_for(&dir, "placement-test-ca", "DNS:db.other.example");
    let pg = placement_testkit::pg::PgCluster::start_tls(&cert, &key);
    let url = |query: String| format!("postgres://postgres@127.0.0.1:{}/app?{query}", pg.port);
    for query in [
        format!("sslrootcert={}", ca.display()),
        format!("sslmode=require&sslrootcert={}", ca.display()),
    ] {
        let out = Command::new(placement_testkit::placement_bin())
            .args(["db", "sync"])
            .env("DATABASE_URL", url(query.clone()))
            .stdin(Stdio::null())
            .output()
            .expect("db sync");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{query}: connected to the wrong name"
        );
        assert!(err.to_lowercase().contains("certificate"), "{query}: {err}");
    }
    let server = cluster::start_server_with(
        &url(format!("sslmode=verify-ca&sslrootcert={}", ca.display())),
        "tls-name",
        &[],
    )
    .await;
    let (status, _, body) = send(
        &server.base,
        reqwest::Method::GET,
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 200, "verify-ca: {body}");
    drop(server);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bad multi-host database settings stop start-up with one clear error
/// that names the hosts and never the password.
#[test]
fn bad_host_lists_are_one_clear_start_up_error() {
    let cases = [
        (
            "postgres://u:s3cret@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write",
            "no host of PostgreSQL at 127.0.0.1:1, 127.0.0.1:2/db accepts writes (127.0.0.1:1: ",
        ),
        (
            "postgres://u:s3cret@127.0.0.1:5432,127.0.0.1:99999/db",
            "invalid port for host 127.0.0.1",
        ),
        // The password's pieces never show, whatever shape puts them
        // where a port or a keyword should be.
        (
            "placement:s3cretPW==@127.0.0.1/placement",
            "an invalid connection option",
        ),
        (
            "postgres://placement:s3cr/etPW@127.0.0.1/placement",
            "invalid port for host placement",
        ),
        (
            "host=127.0.0.1 password=s3cr etPW dbname=placement",
            "an option without \"=\" after password=",
        ),
        (
            "host=127.0.0.1,127.0.0.2 port=1,2,3 password=s3cret",
            "2 hosts but 3 ports",
        ),
        (
            "postgres://u:s3cret@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=standby",
            "target_session_attrs=standby is refused: this service writes",
        ),
        (
            "postgres://u:s3cret@127.0.0.1:1/db?target_session_attrs=whatever",
            "unknown target_session_attrs \"whatever\"",
        ),
    ];
    for (url, want) in cases {
        let out = Command::new(placement_testkit::placement_bin())
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .output()
            .expect("run placement");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: started");
        assert!(said.contains(want), "{url}: {said}");
        for piece in ["s3cret", "s3cr", "etPW"] {
            assert!(!said.contains(piece), "{url}: {said}");
        }
        assert_eq!(
            said.lines().filter(|l| l.starts_with("placement:")).count(),
            1,
            "{url}: {said}"
        );
    }
}

/// A database migrated before 20261206000001 and 20261207000001 were
/// rewritten (so that a plain owner can apply them) recorded their first
/// texts' checksums; starting on it accepts them instead of refusing
/// "previously applied but has been modified", and any other checksum is
/// still refused.
#[tokio::test]
async fn a_database_migrated_with_a_rewritten_migrations_first_text_starts() {
    use sqlx::Connection;
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let first = [
        (20261206000001_i64, "549489dcf78978b8d0d410a40ded1d1125b87455d203e5adf8ce32a1803a63f3f9841a96aab3526fa7b037d783264e7f"),
        (20261207000001_i64, "b4c06c32f7e260301e90a6456565561b62f984e33d0ee7181889a60047e6018e231736e5b8586e4fde8f3d1675cf79f9"),
    ];
    for (version, checksum) in first {
        sqlx::query("UPDATE _sqlx_migrations SET checksum = decode($1, 'hex') WHERE version = $2")
            .bind(checksum)
            .bind(version)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    placement::db::migrations::run(&mut conn)
        .await
        .expect("the first texts are accepted");
    let current: Vec<String> = sqlx::query_scalar(
        "SELECT encode(checksum, 'hex') FROM _sqlx_migrations WHERE version = ANY($1) ORDER BY version",
    )
    .bind(first.map(|(v, _)| v).to_vec())
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for ((_, old), now) in first.iter().zip(&current) {
        assert_ne!(old, now, "the recorded checksum is the current text's");
    }
    sqlx::query("UPDATE _sqlx_migrations SET checksum = decode(repeat('00', 48), 'hex') WHERE version = 20261206000001")
        .execute(&mut conn)
        .await
        .unwrap();
    let err = placement::db::migrations::run(&mut conn)
        .await
        .expect_err("an unknown checksum is still refused");
    assert!(err.to_string().contains("20261206000001"), "{err}");
    drop(conn);
    common::drop_database(&admin_url, &db);
}

/// The deployment tools' steps: `placement db sync` migrates and exits,
/// `placement upgrade check` says whether this build can serve the
/// database (oslo.upgradecheck's table and exit codes), and `serve
/// --migrate false` refuses a schema `db sync` has not brought forward.
#[tokio::test]
async fn db_sync_and_upgrade_check_are_the_deployments_steps() {
    use sqlx::Connection;
    let (admin_url, template_copy) = common::fresh_database().await;
    common::drop_database(&admin_url, &template_copy);
    let db = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&mut admin)
        .await
        .unwrap();
    drop(admin);
    let url = common::url_with_db(&admin_url, &db);
    let run = |args: &[&str]| {
        let out = Command::new(placement_testkit::placement_bin())
            .args(args)
            .env("DATABASE_URL", &url)
            .env_remove("PLACEMENT_CONFIG_FILE")
            .stdin(Stdio::null())
            .output()
            .expect("run placement");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let err = refused_start_on(&url, &["--migrate", "false"]);
    assert!(
        err.contains("lacks") && err.contains("placement db sync"),
        "{err}"
    );
    let (code, table, _) = run(&["upgrade", "check"]);
    assert_eq!(code, Some(2), "{table}");
    assert!(
        table.contains("| Check: Database schema") && table.contains("| Result: Failure"),
        "{table}"
    );
    let (code, out, err) = run(&["db", "sync"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("migrations applied"), "{out}");
    assert!(!out.starts_with("0 "), "{out}");
    let (code, out, _) = run(&["db", "sync"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("0 migrations applied"), "{out}");
    let (code, table, err) = run(&["upgrade", "check"]);
    assert_eq!(code, Some(0), "{table}{err}");
    assert!(
        !table.contains("Failure") && !table.contains("Warning"),
        "{table}"
    );
    // A database that runs another text of the write path's functions
    // (an older release's, or a hand edit) is refused as a missing
    // migration is, and `db sync` brings the current text back.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE schema_definitions SET sha384 = 'another text'")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("CREATE OR REPLACE FUNCTION placement_capacity(total bigint, reserved bigint, allocation_ratio float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS $$ SELECT 0::float8 $$")
        .execute(&mut conn)
        .await
        .unwrap();
    let err = refused_start_on(&url, &["--migrate", "false"]);
    assert!(
        err.contains("other definitions") && err.contains("placement db sync"),
        "{err}"
    );
    let (code, table, _) = run(&["upgrade", "check"]);
    assert_eq!(code, Some(2), "{table}");
    assert!(table.contains("other definitions"), "{table}");
    let (code, out, err) = run(&["db", "sync"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let capacity: f64 = sqlx::query_scalar("SELECT placement_capacity(10, 2, 1.5)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(capacity, 12.0, "db sync applied the current definitions");
    drop(conn);
    let (code, table, err) = run(&["upgrade", "check"]);
    assert_eq!(code, Some(0), "{table}{err}");
    // A policy file whose check string does not parse fails the check.
    let bad = policy_file("\"placement:usages\": \"role:admin or (\"\n");
    let (code, table, _) = run(&["upgrade", "check", "--policy-file", &bad.arg()]);
    assert_eq!(code, Some(2), "{table}");
    assert!(table.contains("placement:usages"), "{table}");
    let server = cluster::start_server_with(&url, "migrate-false", &["--migrate", "false"]).await;
    let (status, _, _) = send(
        &server.base,
        reqwest::Method::GET,
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 200);
    drop(server);
    common::drop_database(&admin_url, &db);
}

/// A database error reaches an operator as PostgreSQL's message and
/// SQLSTATE, without the line of PostgreSQL's C source sqlx appends.
#[tokio::test]
async fn database_errors_are_explained_without_postgresqls_source_line() {
    use sqlx::Connection;
    let (admin_url, db) = common::fresh_database().await;
    let mut conn = sqlx::PgConnection::connect(&common::url_with_db(&admin_url, &db))
        .await
        .unwrap();
    let e = sqlx::query("SELECT 1 / 0")
        .execute(&mut conn)
        .await
        .expect_err("division by zero");
    assert!(e.to_string().contains(" at line "), "sqlx's own: {e}");
    let explained = placement::db::explain(&e);
    assert_eq!(explained, "division by zero [SQLSTATE 22012]");
    drop(conn);
    common::drop_database(&admin_url, &db);
}

/// Issue 50, item 7: a `hostaddr` pin after `host` is connected to; the
/// name (one that resolves nowhere) is never looked up in its place.
#[tokio::test]
async fn a_hostaddr_pin_after_host_is_what_is_connected_to() {
    let (admin_url, db) = common::fresh_database().await;
    let u = reqwest::Url::parse(&admin_url).expect("DATABASE_URL");
    let password = u.password().unwrap_or("");
    // The test database is local: its address, whatever name it was given by.
    let host = u.host_str().expect("host");
    let addr = match host.parse::<std::net::IpAddr>() {
        Ok(_) => host,
        Err(_) => "127.0.0.1",
    };
    let kv = format!(
        "host=placement-db.invalid hostaddr={addr} port={} dbname={db} user={} password='{}'",
        u.port().unwrap_or(5432),
        u.username(),
        percent_decode(password),
    );
    let server = cluster::start_server_with(&kv, "hostaddr", &[]).await;
    let r = reqwest::Client::new()
        .get(format!("{}/resource_providers", server.base))
        .header("x-auth-token", "admin")
        .send()
        .await
        .expect("served");
    assert_eq!(r.status(), 200);
    drop(server);
    common::drop_database(&admin_url, &db);
}

fn percent_decode(s: &str) -> String {
    form_urlencoded::parse(format!("p={s}").as_bytes())
        .next()
        .map(|(_, v)| v.replace('\'', "\\'"))
        .unwrap_or_default()
}

/// The postmaster running in `dir`'s data directory, if any.
fn running_postmaster(dir: &std::path::Path) -> Option<u32> {
    let lock = std::fs::read_to_string(dir.join("pgdata/postmaster.pid")).ok()?;
    let pid: u32 = lock.lines().next()?.trim().parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    comm.starts_with("postgres").then_some(pid)
}

/// SIGTERM at several instants of a zero-config start-up (during initdb,
/// pg_ctl, the migrations, and once listening): every time the process
/// exits on its own and no PostgreSQL is left running in its directory.
#[tokio::test]
async fn a_stop_at_any_moment_of_start_up_leaves_no_postgresql_running() {
    let dir = std::env::temp_dir().join(format!("placement-data-{}", uuid::Uuid::new_v4()));
    for after_ms in [150u64, 400, 800, 1500, 2500, 4000] {
        let port = cluster::free_port();
        let mut child = Command::new(placement_testkit::placement_bin())
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(&dir)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start placement");
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "still running {after_ms} ms in");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            running_postmaster(&dir).is_none(),
            "a SIGTERM {after_ms} ms into start-up left PostgreSQL running (the service exited {status})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server killed with SIGKILL leaves its PostgreSQL running; the next
/// start in the same directory stops that orphan and starts afresh.
#[tokio::test]
async fn the_next_start_stops_the_postgresql_a_killed_server_left() {
    let dir = std::env::temp_dir().join(format!("placement-data-{}", uuid::Uuid::new_v4()));
    let (mut first, _) = zero_config(&dir).await;
    first.0.kill().expect("SIGKILL");
    let _ = first.0.wait();
    let orphan = running_postmaster(&dir).expect("the killed server's PostgreSQL runs on");
    let (again, base) = zero_config(&dir).await;
    assert_eq!(
        reqwest::get(format!("{base}/"))
            .await
            .map(|r| r.status().as_u16())
            .ok(),
        Some(200)
    );
    let now = running_postmaster(&dir).expect("the new server's PostgreSQL");
    assert_ne!(now, orphan, "the orphan was not replaced");
    drop(again);
    assert!(running_postmaster(&dir).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
