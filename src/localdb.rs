//! The zero-configuration database: without `DATABASE_URL`, the service
//! runs its own PostgreSQL from the system install (`/usr/lib/postgresql/*/bin`)
//! in a data directory, on a free loopback port, and stops it on shutdown.
//!
//! PostgreSQL refuses to run as root, so when we are root the cluster is
//! owned by and run as the `postgres` system user. Only std is used: the
//! embedded-PostgreSQL crates download binaries, which this must not need.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why the local database could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LocalDbError {
    /// No server binaries found.
    #[error("no PostgreSQL server found under /usr/lib/postgresql/*/bin: install it (e.g. `apt-get install postgresql`) or set DATABASE_URL")]
    NotInstalled,
    /// Running as root without a `postgres` user to run the server as.
    #[error("running as root needs a `postgres` system user to own the database (install the postgresql package) or set DATABASE_URL")]
    NoPostgresUser,
    /// A step failed.
    #[error("{step} failed: {detail}")]
    Step {
        /// What was being done.
        step: &'static str,
        /// Its output.
        detail: String,
    },
    /// Another instance's PostgreSQL runs in this data directory.
    #[error("the data directory {dir} is in use by {holder} (its PostgreSQL is pid {postgres}): stop it, give this server its own --data-dir, or set DATABASE_URL")]
    InUse {
        /// The data directory.
        dir: String,
        /// Who started it, as far as can be told.
        holder: String,
        /// The running postmaster.
        postgres: u32,
    },
    /// Filesystem or process error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The file naming the `placement serve` that started a data directory's
/// PostgreSQL, beside that directory.
const OWNER_FILE: &str = "placement.pid";

/// A live process's command name (Linux /proc), None when it is gone.
fn process_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The running PostgreSQL of a data directory, and who started it; None
/// when the directory is free (no lock file, or a stale one).
fn in_use(root_dir: &Path, data: &Path) -> Option<LocalDbError> {
    let lock = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let postgres: u32 = lock.lines().next()?.trim().parse().ok()?;
    if !process_name(postgres)?.starts_with("postgres") {
        return None;
    }
    let holder = std::fs::read_to_string(root_dir.join(OWNER_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|pid| process_name(*pid).is_some_and(|n| n.starts_with("placement")))
        .map_or_else(
            || "another process".to_string(),
            |pid| format!("another placement serve (pid {pid})"),
        );
    Some(LocalDbError::InUse {
        dir: root_dir.display().to_string(),
        holder,
        postgres,
    })
}

/// A running local PostgreSQL; call [`LocalDb::stop`] on shutdown.
pub struct LocalDb {
    bin: PathBuf,
    data: PathBuf,
    user: Option<(u32, u32)>,
    /// Connection URL of the service's database.
    pub url: String,
}

fn find_bin() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.split('.').next()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, b)| b)
}

fn postgres_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"postgres"))
            .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
    })
}

fn is_root() -> bool {
    // The effective uid of this process, read without libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The default data directory: `/var/lib/placement` for root (whose home the
/// `postgres` user cannot enter), else `$XDG_DATA_HOME/placement` or
/// `~/.local/share/placement`.
pub fn default_data_dir() -> PathBuf {
    if is_root() {
        return PathBuf::from("/var/lib/placement");
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("placement");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/placement")
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalDb {
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            c.uid(uid).gid(gid);
        }
        c.env_remove("PGDATA").stdin(Stdio::null());
        c
    }

    fn run(&self, step: &'static str, mut c: Command) -> Result<String, LocalDbError> {
        let out = c.output()?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(LocalDbError::Step {
                step,
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    /// Initialises (first time) and starts the cluster in `root_dir`, and
    /// creates the `placement` database.
    pub fn start(root_dir: &Path) -> Result<LocalDb, LocalDbError> {
        let bin = find_bin().ok_or(LocalDbError::NotInstalled)?;
        let user = if is_root() {
            Some(postgres_ids().ok_or(LocalDbError::NoPostgresUser)?)
        } else {
            None
        };
        std::fs::create_dir_all(root_dir)?;
        let data = root_dir.join("pgdata");
        let mut db = LocalDb {
            bin,
            data: data.clone(),
            user,
            url: String::new(),
        };
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(root_dir, Some(uid), Some(gid))?;
        }
        if !data.join("PG_VERSION").exists() {
            let mut c = db.cmd("initdb");
            c.arg("-D").arg(&data).args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ]);
            db.run("initdb", c)?;
        }
        if let Some(busy) = in_use(root_dir, &data) {
            return Err(busy);
        }
        let port = free_port()?;
        let mut c = db.cmd("pg_ctl");
        c.arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(root_dir.join("postgresql.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200"
            ))
            .arg("start");
        db.run("pg_ctl start", c)?;
        std::fs::write(root_dir.join(OWNER_FILE), std::process::id().to_string())?;
        let mut c = db.cmd("psql");
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-tAc",
        ])
        .arg("SELECT 1 FROM pg_database WHERE datname = 'placement'");
        if db.run("psql", c)?.trim() != "1" {
            let mut c = db.cmd("createdb");
            c.args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "placement",
            ]);
            db.run("createdb", c)?;
        }
        db.url = format!("postgres://postgres@127.0.0.1:{port}/placement");
        Ok(db)
    }

    /// Stops the cluster (fast shutdown: open sessions are ended).
    pub fn stop(&self) -> Result<(), LocalDbError> {
        let mut c = self.cmd("pg_ctl");
        c.arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"]);
        self.run("pg_ctl stop", c)?;
        if let Some(root) = self.data.parent() {
            let _ = std::fs::remove_file(root.join(OWNER_FILE));
        }
        Ok(())
    }
}
