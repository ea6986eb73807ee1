//! Real `placement serve` processes on one fresh database, for the tests
//! that race writers across processes or treat a server roughly.

use crate::common;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `placement serve` process, killed when dropped (also on panic).
pub struct Server {
    pub child: Child,
    pub base: String,
    pub port: u16,
    log: PathBuf,
}

impl Server {
    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        } else {
            eprintln!("server log kept: {}", self.log.display());
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `placement serve` on a free port with extra flags and waits
/// until it answers `GET /`.
pub async fn start_server_with(database_url: &str, label: &str, extra: &[&str]) -> Server {
    // A free port can be taken by another test's server before this one
    // binds it: then the start is tried again on another.
    for _ in 0..4 {
        match try_start(database_url, label, extra, &[], free_port()).await {
            Ok(server) => return server,
            Err(e) if e.contains("Address already in use") => continue,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("{label}: no free port could be bound in four tries")
}

/// Starts `placement serve` on `port` (a restart keeps its address).
pub async fn start_on_port(database_url: &str, label: &str, extra: &[&str], port: u16) -> Server {
    start_with_env(database_url, label, extra, &[], port).await
}

/// Starts `placement serve` on `port` with extra environment variables.
pub async fn start_with_env(
    database_url: &str,
    label: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    port: u16,
) -> Server {
    match try_start(database_url, label, extra, env, port).await {
        Ok(server) => server,
        Err(e) => panic!("{e}"),
    }
}

/// Whether process `pid` holds the listening socket of 127.0.0.1:`port`
/// (its inode in /proc/net/tcp among the process's descriptors): an
/// answer on the port from another test's server, which took the port
/// first, is not this server's.
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(tcp) = std::fs::read_to_string("/proc/net/tcp") else {
        return true;
    };
    let local = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Field 3 is the state; 0A is LISTEN.
            (f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A"))
                .then(|| f.get(9).map(|i| format!("socket:[{i}]")))
                .flatten()
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .any(|target| inodes.iter().any(|i| target.to_string_lossy() == *i))
}

/// Starts `placement serve` on `port` and waits until it answers `GET /`
/// on its own socket; the error says why it exited or never answered.
async fn try_start(
    database_url: &str,
    label: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    port: u16,
) -> Result<Server, String> {
    let log = std::env::temp_dir().join(format!("placement-{label}-{port}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(crate::placement_bin())
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env("DATABASE_URL", database_url)
        .env("PLACEMENT_DB_MAX_CONNECTIONS", "10")
        .envs(env.iter().copied())
        // TESTKIT_RUST_LOG: a bench's servers log more (their log files
        // are in the temporary directory, named by label and port).
        .env(
            "RUST_LOG",
            std::env::var("TESTKIT_RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start placement serve");
    let mut server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
        port,
        log,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!(
                "placement serve exited ({status}): {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            ));
        }
        if let Ok(r) = client.get(format!("{}/", server.base)).send().await {
            if r.status() == 200 && listens_on(server.child.id(), port) {
                return Ok(server);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("server on port {port} never answered GET /"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh database served by two processes.
pub struct Cluster {
    pub servers: Vec<Server>,
    pub client: reqwest::Client,
    admin_url: String,
    db: String,
    microversion: String,
    /// The pooler the servers go through, if any.
    bouncer: Option<crate::pgbouncer::PgBouncer>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.servers.clear();
        self.bouncer.take();
        common::drop_database(&self.admin_url, &self.db);
    }
}

impl Cluster {
    /// Two servers on a fresh database; requests carry `microversion`.
    pub async fn new(label: &str, microversion: &str) -> Cluster {
        Self::with_servers(label, microversion, 2).await
    }

    /// `n` servers (started at once) on a fresh database.
    pub async fn with_servers(label: &str, microversion: &str, n: usize) -> Cluster {
        Self::with_flags(label, microversion, n, &[]).await
    }

    /// `n` servers started with extra `serve` flags.
    pub async fn with_flags(label: &str, microversion: &str, n: usize, flags: &[&str]) -> Cluster {
        let (admin_url, db) = common::fresh_database().await;
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        Self::start(label, microversion, n, admin_url, db, None, flags).await
    }

    /// Two servers on a fresh database through PgBouncer in transaction
    /// mode with 4 server connections (`--db-pooler transaction`; the
    /// session URL goes to PostgreSQL directly). Their 20 connections
    /// queue for those 4, so a request may wait up to 10 s for one (not
    /// the default 3) on a loaded test machine.
    pub async fn behind_pgbouncer(label: &str, microversion: &str) -> Cluster {
        let (admin_url, db) = common::fresh_database().await;
        let bouncer = crate::pgbouncer::PgBouncer::start(&admin_url, 4);
        Self::start(
            label,
            microversion,
            2,
            admin_url,
            db,
            Some(bouncer),
            Vec::new(),
        )
        .await
    }

    async fn start(
        label: &str,
        microversion: &str,
        n: usize,
        admin_url: String,
        db: String,
        bouncer: Option<crate::pgbouncer::PgBouncer>,
        flags: Vec<String>,
    ) -> Cluster {
        let direct = common::url_with_db(&admin_url, &db);
        let (url, mut extra) = match &bouncer {
            None => (direct, Vec::new()),
            Some(b) => b.serve(&admin_url, &db, &direct),
        };
        extra.extend(flags);
        let mut starting = Vec::new();
        for _ in 0..n {
            let (url, label, extra) = (url.clone(), label.to_string(), extra.clone());
            starting.push(tokio::spawn(async move {
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                start_server_with(&url, &label, &extra).await
            }));
        }
        let mut servers = Vec::new();
        for s in starting {
            servers.push(s.await.expect("server start"));
        }
        Cluster {
            servers,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
            admin_url,
            db,
            microversion: format!("placement {microversion}"),
            bouncer,
        }
    }

    /// The database the servers share (directly, not through a pooler).
    pub fn database_url(&self) -> String {
        common::url_with_db(&self.admin_url, &self.db)
    }

    pub fn request(
        &self,
        server: usize,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let base = &self.servers[server % self.servers.len()].base;
        self.client
            .request(method, format!("{base}{path}"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", &self.microversion)
    }

    pub async fn json(&self, server: usize, path: &str) -> Value {
        let r = self
            .request(server, reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// A counter's value (`/metrics`, the series without labels) summed
    /// over every server; panics when one does not report it.
    pub async fn counter_total(&self, name: &str) -> f64 {
        let mut total = 0.0;
        for s in 0..self.servers.len() {
            let r = self
                .request(s, reqwest::Method::GET, "/metrics")
                .send()
                .await;
            let text = r.expect("metrics").text().await.expect("metrics text");
            total += text
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("server {s} does not report {name}"));
        }
        total
    }

    /// Creates a provider through server 0 and sets its inventories through
    /// server 1 (so both processes take part); returns its uuid.
    pub async fn provider(&self, name: &str, inventories: Value) -> String {
        let r = self
            .request(0, reqwest::Method::POST, "/resource_providers")
            .json(&serde_json::json!({"name": name}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let rp = r.json::<Value>().await.unwrap()["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        let path = format!("/resource_providers/{rp}/inventories");
        let r = self
            .request(1, reqwest::Method::PUT, &path)
            .json(
                &serde_json::json!({"resource_provider_generation": 0, "inventories": inventories}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        rp
    }
}

impl Cluster {
    /// A deployment node: provider, MEMORY_MB inventory, `cores` cores of
    /// 100 shares.
    pub async fn node(&self, name: &str, memory_mb: i64, cores: usize) -> String {
        let rp = self
            .provider(name, json!({"MEMORY_MB": {"total": memory_mb}}))
            .await;
        let cores: Vec<Value> = (0..cores).map(|i| json!({"id": i.to_string()})).collect();
        let r = self
            .request(
                0,
                reqwest::Method::PUT,
                &format!("/resource_providers/{rp}/cpu_topology"),
            )
            .json(&json!({"share_base": 100, "cores": cores}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        rp
    }
}
