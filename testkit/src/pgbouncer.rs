//! PgBouncer in transaction pooling mode in front of a test PostgreSQL,
//! from Debian's `pgbouncer` package (1.18: no prepared statements carried
//! between transactions). Every database of the server is reachable
//! through it; each gets `pool_size` server connections, fewer than the
//! service's pool, so clients really share them. Stopped when dropped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The running pooler.
pub struct PgBouncer {
    dir: PathBuf,
    /// Its loopback port.
    pub port: u16,
}

/// Where Debian puts it.
fn binary() -> PathBuf {
    let found = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    found.expect(
        "pgbouncer is not installed: apt-get install pgbouncer (scripts/test.sh and .ci/run install it)",
    )
}

impl PgBouncer {
    /// Starts it in front of the PostgreSQL of `admin_url`.
    pub fn start(admin_url: &str, pool_size: u32) -> PgBouncer {
        let o: sqlx::postgres::PgConnectOptions = admin_url.parse().expect("admin URL");
        let dir = std::env::temp_dir().join(format!("pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = crate::cluster::free_port();
        // A TCP address, or the directory of the server's Unix socket.
        let host = match o.get_socket() {
            Some(dir) => dir.display().to_string(),
            None => o.get_host().to_string(),
        };
        let ini = format!(
            "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {dir}/users.txt\npool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 1000\nlogfile = {dir}/pgbouncer.log\npidfile = {dir}/pgbouncer.pid\n",
            host,
            o.get_port(),
            dir = dir.display(),
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
        std::fs::write(
            dir.join("users.txt"),
            format!("\"{}\" \"\"\n", o.get_username()),
        )
        .unwrap();
        // PgBouncer refuses to run as root: as PostgreSQL's own user then.
        if crate::pg::is_root() {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres", dir.to_str().unwrap()])
                .status();
        }
        let ini = dir.join("pgbouncer.ini");
        let started = crate::pg::as_pg(&binary(), &["-d", ini.to_str().unwrap()]);
        assert!(started, "pgbouncer did not start");
        let bouncer = PgBouncer { dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "pgbouncer never listened: {}",
                bouncer.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    /// The URL of database `db` through the pooler.
    pub fn url(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    /// The database URL and the flags for a server on database `db`
    /// through the pooler, with `direct` (PostgreSQL itself) as its
    /// session URL; the user is `admin_url`'s. Connections queue for the
    /// pooler's few, so a request may wait up to 10 s for one.
    pub fn serve(&self, admin_url: &str, db: &str, direct: &str) -> (String, Vec<String>) {
        let user = admin_url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .expect("admin URL")
            .get_username()
            .to_string();
        let flags = [
            "--db-pooler",
            "transaction",
            "--database-session-url",
            direct,
            "--db-acquire-timeout",
            "10",
        ];
        (
            self.url(&user, db),
            flags.iter().map(|f| f.to_string()).collect(),
        )
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pgbouncer.pid")) {
            let pid = pid.trim().to_string();
            let _ = Command::new("kill").args(["-INT", &pid]).status();
            for _ in 0..100 {
                let alive = Command::new("kill")
                    .args(["-0", &pid])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !alive {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = Command::new("kill")
                .args(["-9", &pid])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
