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
             [cors]\nallowed_origin = https://ui.example.com\n\n[placement]\nnot_an_option = 1\n\n[wsgi]\napi_paste_config = /etc/placement/api-paste.ini\n"
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
        text.contains("[placement] not_an_option: not used by this server"),
        "{text}"
    );
    // Another service's section is none of this server's business.
    assert!(!text.contains("api_paste_config"), "{text}");
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

/// The folder of the deployment tools' files and oslo.config's reading of them.
fn conf_cases() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/placement-conf")
}

fn sources_of(case: &std::path::Path) -> Vec<placement::config::placement_conf::Source> {
    use placement::config::placement_conf::Source;
    let mut sources = vec![Source::File(case.join("placement.conf"))];
    if case.join("placement.conf.d").is_dir() {
        sources.push(Source::Dir(case.join("placement.conf.d")));
    }
    sources
}

/// What oslo.config 10.7 (with Placement 16.0.0's options) made of each
/// case, recorded by scripts/oslo_config_reads.py, which scripts/test.sh
/// runs again against the record.
#[derive(serde::Deserialize)]
struct Recorded {
    values: Option<std::collections::BTreeMap<String, placement::config::placement_conf::Setting>>,
    refused: Option<String>,
}

#[test]
fn every_file_reads_as_oslo_config_reads_it() {
    let record: std::collections::BTreeMap<String, Recorded> = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/oslo-config-reads.json"),
        )
        .expect("the record"),
    )
    .expect("the record parses");
    let mut cases: Vec<String> = std::fs::read_dir(conf_cases())
        .expect("the cases")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert_eq!(
        cases,
        record.keys().cloned().collect::<Vec<_>>(),
        "every case is recorded (run scripts/oslo_config_reads.py)"
    );
    for name in cases {
        let ours =
            placement::config::placement_conf::settings(&sources_of(&conf_cases().join(&name)));
        let theirs = &record[&name];
        match (ours, &theirs.values, &theirs.refused) {
            (Ok(ours), Some(values), None) => assert_eq!(&ours, values, "{name}"),
            (Err(_), None, Some(_)) => {}
            (ours, _, refused) => panic!("{name}: ours {ours:?}, oslo.config refused: {refused:?}"),
        }
    }
}

/// A server on one of the deployment tools' files as written, with only
/// what must point at this machine overridden: the database (DATABASE_URL,
/// which wins over the file's MySQL connection), Keystone (a local port
/// where nothing answers) and the log file's folder.
struct ToolServer {
    child: std::process::Child,
    base: String,
    log: std::path::PathBuf,
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `placement serve ARGS` with ENV on a free port, answering `GET /`;
/// `log` is where its log goes (the tests' PLACEMENT_LOG_FILE or the
/// config file's), shown when it exits early.
async fn spawn_serve(
    label: &str,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    log: &std::path::Path,
) -> (std::process::Child, String) {
    let port = cluster::free_port();
    let mut child = Command::new(placement_testkit::placement_bin())
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start placement");
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{base}/")).await.is_err() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "{label}: exited: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        assert!(Instant::now() < deadline, "{label}: never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, base)
}

async fn start_on_tool_file(tool: &str, database_url: &str) -> ToolServer {
    let log = std::env::temp_dir().join(format!("placement-{tool}-{}.log", uuid::Uuid::new_v4()));
    let keystone = format!("http://127.0.0.1:{}/v3", cluster::free_port());
    let conf = conf_cases().join(tool).join("placement.conf");
    let (child, base) = spawn_serve(
        tool,
        &["--config-file".as_ref(), conf.as_os_str()],
        &[
            ("DATABASE_URL", database_url.as_ref()),
            ("PLACEMENT_KEYSTONE_URL", keystone.as_ref()),
            ("PLACEMENT_KEYSTONE_TIMEOUT", "1".as_ref()),
            ("PLACEMENT_LOG_FILE", log.as_os_str()),
        ],
        &log,
    )
    .await;
    ToolServer { child, base, log }
}

/// kolla-ansible's, openstack-ansible's and devstack's `placement.conf`
/// start the server as written: Keystone authentication (a 401 names
/// `www_authenticate_uri`, a token nobody can validate is 503), the MySQL
/// connection set aside with a warning for DATABASE_URL, kolla's policy
/// file beside it in force, and the log in the file.
#[tokio::test]
async fn the_deployment_tools_files_start_the_server() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    for (tool, challenge, mysql) in [
        (
            "kolla",
            "Keystone uri=\"https://openstack.example.com:5000\"",
            true,
        ),
        (
            "osa",
            "Keystone uri=\"https://cloud.example.com:5000\"",
            true,
        ),
        (
            "devstack",
            "Keystone uri=\"http://controller.example/identity\"",
            false,
        ),
    ] {
        let server = start_on_tool_file(tool, &url).await;
        let get = reqwest::Method::GET;
        let (status, headers, body) =
            send(&server.base, get.clone(), "/resource_providers", &[]).await;
        assert_eq!(status, 401, "{tool}: {body}");
        assert_eq!(
            headers
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some(challenge),
            "{tool}"
        );
        let (status, _, body) = send(
            &server.base,
            get,
            "/resource_providers",
            &[("x-auth-token", "some-token")],
        )
        .await;
        assert_eq!(status, 503, "{tool}: {body}");
        let text = std::fs::read_to_string(&server.log).unwrap_or_default();
        assert!(text.contains("placement listening"), "{tool}: {text}");
        assert_eq!(
            text.contains("[placement_database] connection: mysql is not supported"),
            mysql,
            "{tool}: {text}"
        );
        assert!(
            !text.contains("Q8dLr2VxN4kT7pWz1sYb") && !text.contains("b3e8f1a2c7d94e6f"),
            "{tool}: a password in the log"
        );
        if tool == "kolla" {
            assert!(
                text.contains("kolla/policy.yaml"),
                "kolla's policy file: {text}"
            );
        }
    }
    common::drop_database(&admin_url, &db);
}

/// A MySQL connection in the file with no DATABASE_URL or
/// --database-url to take its place stops start-up, naming the line.
#[test]
fn a_mysql_connection_alone_stops_start_up() {
    let conf = std::env::temp_dir().join(format!("placement-{}.conf", uuid::Uuid::new_v4()));
    std::fs::write(
        &conf,
        "[placement_database]\nconnection = mysql+pymysql://p:s3cret@db/placement\n",
    )
    .expect("write");
    let out = Command::new(placement_testkit::placement_bin())
        .args(["serve", "--bind", "127.0.0.1:0", "--config-file"])
        .arg(&conf)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run placement");
    let _ = std::fs::remove_file(&conf);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("line 2: [placement_database] connection: mysql is not supported"),
        "{err}"
    );
    assert!(err.contains("DATABASE_URL"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// `[DEFAULT] log_dir` and `log_file` put the log in that file, and after
/// logrotate moves it away, SIGHUP starts a new one; `--log-format oslo`
/// writes oslo.log's line.
#[tokio::test]
async fn the_log_goes_to_log_file_and_is_reopened_on_sighup() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let dir = std::env::temp_dir().join(format!("placement-logs-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let conf = dir.join("placement.conf");
    std::fs::write(
        &conf,
        format!(
            "[DEFAULT]\nlog_dir = {}\nlog_file = api.log\n[api]\nauth_strategy = noauth2\n",
            dir.display()
        ),
    )
    .expect("write");
    let log = dir.join("api.log");
    let (child, base) = spawn_serve(
        "log-file",
        &[
            "--config-file".as_ref(),
            conf.as_os_str(),
            "--log-format".as_ref(),
            "oslo".as_ref(),
        ],
        &[("DATABASE_URL", url.as_ref())],
        &log,
    )
    .await;
    let server = ToolServer {
        child,
        base,
        log: log.clone(),
    };
    let global = "req-6f1c5a4e-2b1d-4c7a-9a57-0f3c3a2b1d4e";
    let admin = [
        ("x-auth-token", "admin"),
        ("x-project-id", "p-1"),
        ("x-openstack-request-id", global),
        ("openstack-api-version", "placement 1.39"),
    ];
    let get = reqwest::Method::GET;
    assert_eq!(
        send(
            &server.base,
            get.clone(),
            "/resource_providers?name=x",
            &admin
        )
        .await
        .0,
        200
    );
    let wait_for = |path: std::path::PathBuf, what: &'static str| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains(what) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{what} never in {}: {text}",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let first = wait_for(log.clone(), "/resource_providers?name=x").await;
    let line = first
        .lines()
        .find(|l| l.contains("/resource_providers?name=x"))
        .expect("the request's line");
    // oslo.log: date time.ms pid LEVEL logger [global-id request-id user
    // project - - - -] and Placement's request log line.
    let fields: Vec<&str> = line.splitn(6, ' ').collect();
    assert_eq!(fields[2], server.child.id().to_string(), "{line}");
    assert_eq!(fields[3], "INFO", "{line}");
    assert_eq!(fields[4], "placement.requestlog", "{line}");
    let (context, message) = fields[5].split_once("] ").expect("brackets");
    let context: Vec<&str> = context.trim_start_matches('[').split(' ').collect();
    assert_eq!(context.len(), 8, "{line}");
    assert_eq!(context[0], global, "{line}");
    assert!(
        context[1].starts_with("req-") && context[1] != global,
        "{line}"
    );
    assert_eq!(
        &context[2..],
        ["admin", "p-1", "-", "-", "-", "-"],
        "{line}"
    );
    let len = message
        .strip_prefix("127.0.0.1 \"GET /resource_providers?name=x\" status: 200 len: ")
        .and_then(|rest| rest.strip_suffix(" microversion: 1.39"))
        .unwrap_or_else(|| panic!("not Placement's request line: {line}"));
    assert!(len.parse::<u64>().is_ok(), "{line}");
    std::fs::rename(&log, dir.join("api.log.1")).expect("rotate");
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    wait_for(log.clone(), "log file reopened").await;
    assert_eq!(
        send(&server.base, get, "/resource_providers", &admin)
            .await
            .0,
        200
    );
    wait_for(log.clone(), "status: 200").await;
    // What came before the signal stayed in the moved file, nothing after.
    let rotated = std::fs::read_to_string(dir.join("api.log.1")).unwrap_or_default();
    assert!(rotated.contains("status: 200"), "{rotated}");
    assert!(!rotated.contains("reopened"), "{rotated}");
    // A clean stop says so and warns of nothing (a stop is expected).
    let pid = server.child.id().to_string();
    let term = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(term.success());
    let stopped = wait_for(log.clone(), "shut down").await;
    assert!(
        !stopped.contains(" WARNING ") && !stopped.contains(" ERROR "),
        "{stopped}"
    );
    drop(server);
    // A fatal start-up error reaches the log file too, not only stderr.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let bind = taken.local_addr().expect("addr").to_string();
    let out = Command::new(placement_testkit::placement_bin())
        .args(["serve", "--config-file"])
        .arg(&conf)
        .args(["--log-format", "oslo", "--bind", &bind])
        .env("DATABASE_URL", &url)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let fatal = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        fatal
            .lines()
            .any(|l| l.contains(" ERROR ") && l.contains("cannot serve")),
        "{fatal}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    common::drop_database(&admin_url, &db);
}

/// Under `--path-prefix /placement` (devstack's mount point) the API
/// answers there and without it (a proxy may take it off), and the
/// answers' links and `Location` carry it.
#[tokio::test]
async fn a_path_prefix_is_served_and_named_in_answers() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "prefix", &["--path-prefix", "/placement"]).await;
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{}/placement/resource_providers", server.base))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.20")
        .json(&serde_json::json!({"name": "under-a-prefix"}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 200);
    // The route's policy holds under the prefix too: a member may not
    // create a provider there any more than without it.
    for path in ["/placement/resource_providers", "/resource_providers"] {
        let refused = client
            .post(format!("{}{path}", server.base))
            .header("x-auth-token", "member")
            .header("x-roles", "member")
            .header("x-project-id", "p")
            .header("x-user-id", "u")
            .header("openstack-api-version", "placement 1.20")
            .json(&serde_json::json!({"name": "by-a-member"}))
            .send()
            .await
            .expect("refused");
        assert_eq!(refused.status(), 403, "{path}");
    }
    let body: Value = created.json().await.expect("json");
    let uuid = body["uuid"].as_str().expect("uuid").to_string();
    assert_eq!(
        body["links"][0]["href"],
        format!("/placement/resource_providers/{uuid}")
    );
    let (status, _, body) = send(
        &server.base,
        reqwest::Method::GET,
        &format!("/resource_providers/{uuid}"),
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 200, "without the prefix too: {body}");
    let put = client
        .put(format!(
            "{}/placement/resource_classes/CUSTOM_PREFIXED",
            server.base
        ))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.7")
        .send()
        .await
        .expect("put");
    assert_eq!(put.status(), 201);
    let location = put.headers()["location"].to_str().unwrap_or("").to_string();
    assert!(
        location.ends_with("/placement/resource_classes/CUSTOM_PREFIXED"),
        "{location}"
    );
    drop(server);
    common::drop_database(&admin_url, &db);
}
