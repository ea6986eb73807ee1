//! A private PostgreSQL cluster that a test can stop and start again on the
//! same port, for the fault suite (the database vanishes under load). Built
//! from the system install like `scripts/test.sh` does; as root the server
//! runs as `postgres`. Removed when dropped.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The cluster: its binaries, data directory and port.
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    /// The loopback port it listens on, kept across restarts.
    pub port: u16,
    /// Settings on the server's command line beside the common ones.
    settings: &'static str,
}

/// A test database need not survive the machine: commits return at once.
const FAST_COMMITS: &str = "-c synchronous_commit=off";

/// Whether the tests run as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL binary, as `postgres` when we are root.
pub(crate) fn as_pg(bin: &std::path::Path, args: &[&str]) -> bool {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn pg_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .expect("an initdb under /usr/lib/postgresql/*/bin")
}

impl PgCluster {
    /// initdb, start on a free port, create the database `app`.
    pub fn start() -> PgCluster {
        Self::start_with(None, FAST_COMMITS)
    }

    /// Durable commits, as in production: `fsync` and
    /// `synchronous_commit` on (the benches that count a write's cost).
    pub fn start_durable() -> PgCluster {
        Self::start_with(None, "-c fsync=on -c synchronous_commit=on")
    }

    /// The same, TLS only: `ssl = on` with this certificate and key (PEM),
    /// and `pg_hba.conf` admitting nothing but `hostssl` connections.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> PgCluster {
        Self::start_with(Some((cert_pem, key_pem)), FAST_COMMITS)
    }

    fn start_with(tls: Option<(&str, &str)>, settings: &'static str) -> PgCluster {
        let bin = pg_bin();
        let dir = new_dir();
        let data = dir.join("data");
        assert!(
            as_pg(
                &bin.join("initdb"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "--no-sync"
                ]
            ),
            "initdb failed"
        );
        if let Some((cert, key)) = tls {
            tls_only(&data, cert, key);
        }
        let cluster = PgCluster {
            bin,
            dir,
            port: crate::cluster::free_port(),
            settings,
        };
        cluster.up();
        assert!(
            Command::new(cluster.bin.join("createdb"))
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &cluster.port.to_string(),
                    "-U",
                    "postgres",
                    "app"
                ])
                .status()
                .is_ok_and(|s| s.success()),
            "createdb failed"
        );
        cluster
    }

    /// The database URL.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/app", self.port)
    }

    /// Starts the server (again) on its port; waits until it accepts.
    pub fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100 {}",
            self.port,
            self.dir.display(),
            self.settings
        );
        assert!(
            as_pg(
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    self.dir.join("data").to_str().unwrap(),
                    "-l",
                    self.dir.join("log").to_str().unwrap(),
                    "-w",
                    "-t",
                    "30",
                    "-o",
                    &opts,
                    "start"
                ]
            ),
            "pg_ctl start failed"
        );
    }

    /// Stops the server the way an operator or a failover does: sessions
    /// are terminated, transactions in flight roll back.
    pub fn down(&self) {
        as_pg(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.dir.join("data").to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        );
    }
}

/// Replication: a primary whose every commit waits until a streaming
/// standby has applied it, as "nothing acknowledged lost" needs.
impl PgCluster {
    /// Freezes the server as a hung host would: SIGSTOP to the postmaster
    /// and every backend. Connections stay open and nothing answers.
    pub fn freeze(&self) {
        self.signal_all("-STOP");
    }

    /// Lets a frozen server run again.
    pub fn thaw(&self) {
        self.signal_all("-CONT");
    }

    fn signal_all(&self, signal: &str) {
        let postmaster = self.postmaster_pid();
        let mut pids = vec![postmaster.to_string()];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: the comm may hold spaces.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(postmaster) {
                pids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        let status = Command::new("kill")
            .arg(signal)
            .args(&pids)
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pids:?}");
    }

    /// The postmaster's process id, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> u32 {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(pid_file).expect("postmaster.pid");
        let first = text.lines().next().unwrap_or("").trim();
        first.parse().expect("a pid on postmaster.pid's first line")
    }

    /// A primary and its synchronous standby (`pg_basebackup -R`), with
    /// `synchronous_standby_names = '*'` and `synchronous_commit =
    /// remote_apply` on the primary once the standby streams.
    pub fn start_replicated() -> (PgCluster, PgCluster) {
        let primary = Self::start_with(None, "");
        let standby = PgCluster {
            bin: primary.bin.clone(),
            dir: new_dir(),
            port: crate::cluster::free_port(),
            settings: "",
        };
        let data = standby.dir.join("data");
        assert!(
            as_pg(
                &standby.bin.join("pg_basebackup"),
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &primary.port.to_string(),
                    "-U",
                    "postgres",
                    "-D",
                    data.to_str().unwrap(),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast"
                ]
            ),
            "pg_basebackup failed"
        );
        standby.up();
        primary.sql("ALTER SYSTEM SET synchronous_commit = 'remote_apply'");
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        primary.sql("SELECT pg_reload_conf()");
        for _ in 0..100 {
            if primary.sql("SELECT sync_state FROM pg_stat_replication") == "sync" {
                return (primary, standby);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the standby never became synchronous");
    }

    /// One statement through psql; its output, trimmed.
    pub fn sql(&self, statement: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "app", "-XAtc", statement])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "{statement}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGKILL to the postmaster, as a crash or a lost machine ends it.
    pub fn kill(&self) {
        let pid = self.postmaster_pid().to_string();
        assert!(
            Command::new("kill")
                .args(["-9", &pid])
                .status()
                .is_ok_and(|s| s.success()),
            "kill -9 {pid}"
        );
    }

    /// Promotes a standby to primary; waits until it accepts writes.
    pub fn promote(&self) {
        assert!(
            as_pg(
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    self.dir.join("data").to_str().unwrap(),
                    "-w",
                    "promote"
                ]
            ),
            "pg_ctl promote failed"
        );
    }
}

/// A fresh directory for a cluster, owned by `postgres` when we are root.
fn new_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgfault-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    if is_root() {
        let _ = Command::new("chown")
            .args(["postgres:postgres", dir.to_str().unwrap()])
            .status();
    }
    dir
}

/// Certificate, key, `ssl = on`, and only `hostssl` in pg_hba.conf.
fn tls_only(data: &std::path::Path, cert: &str, key: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(data.join("server.crt"), cert).unwrap();
    std::fs::write(data.join("server.key"), key).unwrap();
    std::fs::set_permissions(
        data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let conf = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    std::fs::write(&conf, text).unwrap();
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
    )
    .unwrap();
    if is_root() {
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres", data.to_str().unwrap()])
            .status();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        as_pg(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.dir.join("data").to_str().unwrap(),
                "-m",
                "immediate",
                "stop",
            ],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
