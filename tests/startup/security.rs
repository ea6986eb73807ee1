//! Policy files, a Keystone that cannot answer, and CORS, through real processes.

use super::*;
use placement_testkit::{cluster, common};

#[test]
fn bad_policy_files_and_keystone_options_stop_start_up() {
    for (text, says) in [
        ("admin_api: \"role:admin or\"\n", "line 1"),
        (
            "admin_api: role:admin\nplacement:usages: !\n",
            "line 2: the check string of \"placement:usages\" is an unquoted !",
        ),
        (
            "admin_api: rule:service_api\nservice_api: rule:admin_api\n",
            "cycle",
        ),
        ("{\"admin_api\": \"role:admin\",\n", "line 2"),
        ("admin_api: [role:admin]\n", "line 1"),
        ("admin_api: role:admin\n  nested: x\n", "line 2"),
    ] {
        let f = policy_file(text);
        let err = refused_start(&["--policy-file", &f.arg()]);
        assert!(err.contains(says), "{text:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // Issue 64, defect 8: a string of 50,000 `not`s is refused with its
    // line, never a stack overflow.
    let f = policy_file(&format!(
        "admin_api: \"{}role:admin\"\n",
        "not ".repeat(50_000)
    ));
    let err = refused_start(&["--policy-file", &f.arg()]);
    assert!(
        err.contains("line 1") && err.contains("nest more than"),
        "{err}"
    );
    // As in oslo.policy, a policy file that is not there means the
    // defaults: the start goes on (to the database that is not there).
    let err = refused_start(&["--policy-file", "/nonexistent/policy.yaml"]);
    assert!(
        err.contains(
            "policy file /nonexistent/policy.yaml does not exist: the default rules apply"
        ),
        "{err}"
    );
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

#[tokio::test]
async fn a_policy_file_is_what_the_server_enforces() {
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
        send(b, get.clone(), "/traits", &[("x-auth-token", "admin")])
            .await
            .0,
        200
    );
    // As oslo.policy, a changed file is in force without a restart; a
    // broken one leaves the rules as they were.
    std::fs::write(
        &f.0,
        "placement:resource_providers:list: \"role:auditor\"\n",
    )
    .expect("edit");
    let deadline = Instant::now() + Duration::from_secs(30);
    while send(b, get.clone(), "/resource_providers", &operator)
        .await
        .0
        != 403
    {
        assert!(Instant::now() < deadline, "the edit never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let auditor = [
        ("x-auth-token", "user"),
        ("x-roles", "auditor"),
        ("x-project-id", "p1"),
    ];
    assert_eq!(
        send(b, get.clone(), "/resource_providers", &auditor)
            .await
            .0,
        200
    );
    std::fs::write(
        &f.0,
        "placement:resource_providers:list: \"role:operator or (\"\n",
    )
    .expect("break");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server
        .log()
        .contains("the rules in force stay as they were")
    {
        assert!(
            Instant::now() < deadline,
            "the broken file was never reported: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        send(b, get.clone(), "/resource_providers", &auditor)
            .await
            .0,
        200
    );
    // Issue 64, defect 8: hostile files (nesting that overflowed the
    // stack, a chain of 5,000 references that took 44 s to check) are
    // refused with their line while the server keeps answering, and the
    // rules in force stay.
    let mut chain = String::from("placement:resource_providers:list: rule:r0\n");
    for i in 0..5_000 {
        chain.push_str(&format!("r{i}: rule:r{}\n", i + 1));
    }
    chain.push_str("r5000: role:operator\n");
    for (text, says) in [
        (
            format!(
                "placement:resource_providers:list: \"{}role:operator\"\n",
                "not ".repeat(50_000)
            ),
            "nest more than 32 deep",
        ),
        (chain, "more than 64 deep"),
    ] {
        std::fs::write(&f.0, text).expect("hostile");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.log().contains(says) {
            assert!(
                Instant::now() < deadline,
                "the hostile file was never reported: {}",
                server.log()
            );
            let (status, _, _) = send(b, get.clone(), "/healthcheck", &[]).await;
            assert_eq!(status, 200, "the server stopped answering");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            send(b, get.clone(), "/resource_providers", &auditor)
                .await
                .0,
            200
        );
        assert_eq!(
            send(b, get.clone(), "/resource_providers", &operator)
                .await
                .0,
            403
        );
    }
    drop(server);
    common::drop_database(&admin_url, &db);
}

#[tokio::test]
async fn keystone_that_cannot_answer_means_503_never_a_pass() {
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

/// No secret reaches `--help`, an error or the process list: database URLs
/// and the Keystone password are hidden in help, and errors name the
/// database without its password.
#[test]
fn secrets_are_never_shown() {
    let secrets = [
        ("DATABASE_URL", "postgres://u:s3cret-db@127.0.0.1:1/db"),
        (
            "PLACEMENT_IMPORT_FROM",
            "postgres://u:s3cret-src@127.0.0.1:1/db",
        ),
        ("PLACEMENT_KEYSTONE_PASSWORD", "s3cret-ks"),
    ];
    let run = |args: &[&str]| -> String {
        let out = Command::new(placement_testkit::placement_bin())
            .args(args)
            .envs(secrets)
            .stdin(Stdio::null())
            .output()
            .expect("run placement");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    for args in [
        &["serve", "--help"][..],
        &["audit", "--help"],
        &["import", "--help"],
        &["audit"],
        &["import"],
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--db-acquire-timeout",
            "1",
        ],
    ] {
        let out = run(args);
        assert!(!out.contains("s3cret"), "{args:?} showed a secret: {out}");
        assert!(!out.trim().is_empty(), "{args:?} said nothing");
    }
    assert!(run(&["import", "--help"]).contains("PLACEMENT_IMPORT_FROM"));
}

/// Issue 64, defect 7: a `$` in a secret option's value (oslo.config reads
/// `$name` as a reference to another option) stops every command with an
/// error that names the option and where the `$` stands, never the text
/// after it.
#[test]
fn a_dollar_in_a_secret_is_never_echoed() {
    let dir = std::env::temp_dir().join(format!("placement-dollar-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (section, option, value) in [
        ("keystone_authtoken", "password", "pa$ntS3cret"),
        (
            "placement_database",
            "connection",
            "postgresql://placement:pw$ntS3cret@127.0.0.1:1/placement",
        ),
    ] {
        let conf = dir.join("placement.conf");
        std::fs::write(&conf, format!("[{section}]\n{option} = {value}\n")).expect("conf");
        for args in [
            &["serve", "--bind", "127.0.0.1:0"][..],
            &["db", "sync"],
            &["upgrade", "check"],
        ] {
            let out = Command::new(placement_testkit::placement_bin())
                .args(args)
                .env("PLACEMENT_CONFIG_FILE", &conf)
                .env_remove("DATABASE_URL")
                .stdin(Stdio::null())
                .output()
                .expect("run placement");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "{option} {args:?} ran: {text}");
            assert!(
                !text.contains("ntS3cret") && !text.contains("S3cret"),
                "{option} {args:?}: {text}"
            );
            assert!(
                text.contains(&format!("[{section}] {option}"))
                    && text.contains("the $ at character"),
                "{option} {args:?} does not say where: {text}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
