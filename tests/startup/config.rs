//! A Placement-style `placement.conf` configures a server; a malformed one stops it.

use super::*;
use placement_testkit::{cluster, common};

/// A server started with no flags at all: `placement.conf` (through
/// `PLACEMENT_CONFIG_FILE`) gives the database, the policy mode, the
/// candidate cap and CORS, and an option it does not use is a warning.
#[tokio::test]
async fn a_placement_conf_alone_configures_the_server() {
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
        // A value without a scheme is not echoed: it may hold a password.
        (
            "[placement_database]\nconnection = placement:s3cret@db/placement\n",
            "is not a database URL",
        ),
    ] {
        let conf = std::env::temp_dir().join(format!("placement-{}.conf", uuid::Uuid::new_v4()));
        std::fs::write(&conf, text).expect("write");
        let err = refused_start(&["--config-file", &conf.display().to_string()]);
        let _ = std::fs::remove_file(&conf);
        assert!(err.contains(says), "{text:?}: {err}");
        assert!(!err.contains("s3cret"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// A `placement.conf` that does not choose `[api] auth_strategy` means
/// Keystone, as in Placement: `admin` is no token there, and with nobody
/// to validate it the answer is 503, never a pass.
#[tokio::test]
async fn a_placement_conf_without_auth_strategy_means_keystone() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let dead = format!("http://127.0.0.1:{}", cluster::free_port());
    let conf = std::env::temp_dir().join(format!("placement-{}.conf", uuid::Uuid::new_v4()));
    std::fs::write(
        &conf,
        format!(
            "[placement_database]\nconnection = {url}\n\n[keystone_authtoken]\nauth_url = {dead}\n\
             username = placement\npassword = secret\nproject_name = service\nhttp_connect_timeout = 1\n"
        ),
    )
    .expect("write placement.conf");
    let server = cluster::start_server_with(
        &url,
        "conf-keystone",
        &["--config-file", &conf.display().to_string()],
    )
    .await;
    let (status, _, body) = send(
        &server.base,
        reqwest::Method::GET,
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["errors"][0]["code"], "placement.identity.unavailable");
    drop(server);
    let _ = std::fs::remove_file(&conf);
    common::drop_database(&admin_url, &db);
}

/// noauth2 (the default without a config file) does not serve an address
/// other hosts can reach unless it was chosen explicitly, and then says so.
#[tokio::test]
async fn noauth2_serves_beyond_loopback_only_when_chosen() {
    let err = refused_start(&["--bind", "0.0.0.0:0"]);
    assert!(
        err.contains("refusing to serve 0.0.0.0:0 without authentication"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let port = cluster::free_port();
    let log = std::env::temp_dir().join(format!("placement-open-{port}.log"));
    let mut child = Command::new(placement_testkit::placement_bin())
        .args(["serve", "--bind", &format!("0.0.0.0:{port}")])
        .args(["--auth-strategy", "noauth2"])
        .env("DATABASE_URL", &url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start placement");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("http://127.0.0.1:{port}/"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(text.contains("anyone who reaches it is admin"), "{text}");
    common::drop_database(&admin_url, &db);
}
