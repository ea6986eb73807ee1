//! PostgreSQL made highly available as operators run it: Patroni 3 members
//! on one etcd, all on 127.0.0.1, synchronous replication
//! (`synchronous_mode`), so that a leader lost is replaced by the standby
//! that holds every acknowledged commit. Built from Debian's `patroni` and
//! `etcd-server`; as root, Patroni and PostgreSQL run as `postgres`.
//! Everything is stopped and removed when dropped.

use crate::pg::is_root;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The leader key's lifetime, the members' loop and their retry bound:
/// Patroni's own minimums, which give the fastest failover it allows
/// (a lost leader is replaced once its key expires, within `TTL`).
pub const TTL_SECONDS: u64 = 20;
const LOOP_WAIT_SECONDS: u64 = 1;
const RETRY_TIMEOUT_SECONDS: u64 = 5;

/// One member: its PostgreSQL port, its REST API port, its Patroni process.
pub struct Member {
    pub name: String,
    pub pg_port: u16,
    pub api_port: u16,
    data: PathBuf,
    patroni: Option<Child>,
}

/// etcd and the members.
pub struct PatroniCluster {
    dir: PathBuf,
    etcd: Child,
    pub members: Vec<Member>,
}

/// Why the cluster cannot run here: the packages it needs.
pub fn missing() -> Option<String> {
    let lacks: Vec<&str> = [("patroni", "patroni"), ("etcd", "etcd-server")]
        .into_iter()
        .filter(|(bin, _)| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {bin}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(_, package)| package)
        .collect();
    (!lacks.is_empty()).then(|| format!("apt-get install {}", lacks.join(" ")))
}

impl PatroniCluster {
    /// etcd and `n` members; returns once one leads and every other
    /// streams from it synchronously or asynchronously.
    pub fn start(n: usize) -> PatroniCluster {
        if let Some(how) = missing() {
            panic!("Patroni and etcd are not installed ({how}): the HA test cannot run");
        }
        let dir = std::env::temp_dir().join(format!("patroni-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        chown_to_postgres(&dir);
        let (client, peer) = (crate::cluster::free_port(), crate::cluster::free_port());
        let etcd = Command::new("etcd")
            .args(["--name", "e0", "--data-dir"])
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=e0=http://127.0.0.1:{peer}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
            .spawn()
            .expect("etcd");
        let mut cluster = PatroniCluster {
            dir,
            etcd,
            members: Vec::new(),
        };
        for i in 0..n {
            let member = cluster.member(i, client);
            cluster.members.push(member);
        }
        for i in 0..n {
            cluster.start_member(i);
        }
        cluster.wait_until_replicating(n, Duration::from_secs(120));
        cluster
    }

    fn member(&self, i: usize, etcd_port: u16) -> Member {
        let name = format!("pg{i}");
        let (pg_port, api_port) = (crate::cluster::free_port(), crate::cluster::free_port());
        let data = self.dir.join(&name);
        let config = format!(
            r#"scope: placement-ha
name: {name}
log:
  dir: {dir}
  file_num: 1
restapi:
  listen: 127.0.0.1:{api_port}
  connect_address: 127.0.0.1:{api_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: {TTL_SECONDS}
    loop_wait: {LOOP_WAIT_SECONDS}
    retry_timeout: {RETRY_TIMEOUT_SECONDS}
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        synchronous_commit: "on"
        max_connections: 200
        wal_keep_size: 256MB
        wal_log_hints: "on"
  initdb:
    - encoding: UTF8
    - no-locale
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/{name}.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
"#,
            dir = self.dir.join(format!("{name}-log")).display(),
            data = data.display(),
            bin = crate::pg::pg_bin().display(),
        );
        std::fs::create_dir_all(self.dir.join(format!("{name}-log"))).unwrap();
        chown_to_postgres(&self.dir.join(format!("{name}-log")));
        let file = self.dir.join(format!("{name}.yml"));
        std::fs::write(&file, config).unwrap();
        Member {
            name,
            pg_port,
            api_port,
            data,
            patroni: None,
        }
    }

    fn start_member(&mut self, i: usize) {
        let file = self.dir.join(format!("{}.yml", self.members[i].name));
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "patroni"]);
            c
        } else {
            Command::new("patroni")
        };
        let log =
            std::fs::File::create(self.dir.join(format!("{}.out", self.members[i].name))).unwrap();
        let child = cmd
            .arg(file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("patroni");
        self.members[i].patroni = Some(child);
    }

    /// The member whose REST API says it leads (`GET /leader` is 200).
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| rest_status(m.api_port, "/leader") == Some(200))
    }

    /// Waits for a leader and `n - 1` replicas that stream from it.
    fn wait_until_replicating(&self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.leader() {
                let streaming = self.sql(
                    l,
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                );
                let sync = self.sql(
                    l,
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                );
                if streaming.parse::<usize>().ok() == Some(n - 1) && sync == "1" {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the Patroni cluster never replicated; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for a leader other than `lost`; its index.
    pub fn wait_for_new_leader(&self, lost: usize, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.leader().filter(|l| *l != lost) {
                return l;
            }
            assert!(Instant::now() < deadline, "no new leader within {limit:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A URL naming every member, for libpq's (and the service's) choice
    /// of the one that accepts writes.
    pub fn url(&self, user: &str, database: &str) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!(
            "postgres://{user}@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// One statement on member `i` as `postgres`, in database `postgres`
    /// or the one named after `@` (`"@placement SELECT …"`); its output.
    pub fn sql(&self, i: usize, statement: &str) -> String {
        let (database, statement) = match statement.strip_prefix('@') {
            Some(rest) => rest.split_once(' ').unwrap_or((rest, "")),
            None => ("postgres", statement),
        };
        let out = Command::new(crate::pg::pg_bin().join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.members[i].pg_port.to_string(),
            ])
            .args(["-U", "postgres", "-d", database, "-XAtc", statement])
            .output()
            .expect("psql");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Member `i` lost as a machine is lost: SIGKILL to its Patroni and to
    /// its PostgreSQL (the postmaster; its backends follow it).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].patroni.take() {
            let _ = Command::new("pkill")
                .args(["-9", "-P", &p.id().to_string()])
                .status();
            let _ = p.kill();
            let _ = p.wait();
        }
        if let Some(pid) = postmaster_pid(&self.members[i].data) {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Where the logs are (kept until the cluster is dropped).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The HTTP status of a GET on a member's REST API.
fn rest_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn postmaster_pid(data: &Path) -> Option<u32> {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn chown_to_postgres(path: &Path) {
    if is_root() {
        let _ = Command::new("chown")
            .args(["postgres:postgres", path.to_str().unwrap()])
            .status();
    }
}
