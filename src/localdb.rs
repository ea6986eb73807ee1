//! The zero-configuration database: without `DATABASE_URL`, the service
//! runs its own PostgreSQL from the system install (`/usr/lib/postgresql/*/bin`)
//! in a data directory, and stops it on shutdown.
//!
//! It is sealed from other local users: no TCP listener at all, only a
//! Unix socket in a directory only the cluster's owner may enter (mode
//! 0700); the data directory's top level belongs to the service's user,
//! so nobody else can plant a file or a link where the service writes;
//! `initdb`, `pg_ctl` and `psql` run with a cleared environment, so the
//! server never inherits the service's secrets.
//!
//! PostgreSQL refuses to run as root, so when we are root the cluster is
//! owned by and run as the `postgres` system user (root, which connects,
//! passes the 0700 directory as root does). Only std is used: the
//! embedded-PostgreSQL crates download binaries, which this must not need.
//!
//! Layout of the data directory: `pgdata/` (the cluster), `run/` (its
//! socket), `log/postgresql.log`, and `placement.pid` (who started it).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The socket's port number (its file is `run/.s.PGSQL.5432`): nothing
/// listens on it, it only names the socket.
const SOCKET_PORT: u16 = 5432;

/// Unix socket paths are limited to 107 bytes on Linux.
const MAX_SOCKET_PATH: usize = 107;

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
    #[error("the data directory {dir} is in use by {holder} (its PostgreSQL is pid {postgres}): stop it (`pg_ctl -D {data} -m fast stop` as the directory's owner), give this server its own --data-dir, or set DATABASE_URL")]
    InUse {
        /// The data directory.
        dir: String,
        /// Its PostgreSQL data directory.
        data: String,
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

/// Who holds a data directory's PostgreSQL.
enum Occupant {
    /// Nobody: no lock file, or a stale one.
    Free,
    /// A PostgreSQL whose `placement` owner is gone (it crashed, or was
    /// killed before it could stop it).
    Orphan {
        /// The running postmaster.
        postgres: u32,
        /// The owner that is gone.
        owner: u32,
    },
    /// A live process's, or one nobody recorded.
    Busy(LocalDbError),
}

/// The running PostgreSQL of a data directory, and who started it.
fn occupant(root_dir: &Path, data: &Path) -> Occupant {
    let postgres = std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()
        .and_then(|lock| lock.lines().next()?.trim().parse::<u32>().ok())
        .filter(|pid| process_name(*pid).is_some_and(|n| n.starts_with("postgres")));
    let Some(postgres) = postgres else {
        return Occupant::Free;
    };
    let owner = std::fs::read_to_string(root_dir.join(OWNER_FILE))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let holder = match owner {
        Some(pid) if process_name(pid).is_some_and(|n| n.starts_with("placement")) => {
            format!("another placement serve (pid {pid})")
        }
        Some(owner) => return Occupant::Orphan { postgres, owner },
        None => "another process".to_string(),
    };
    Occupant::Busy(LocalDbError::InUse {
        dir: root_dir.display().to_string(),
        data: data.display().to_string(),
        holder,
        postgres,
    })
}

/// The local database as a one-shot command (`audit`, `import`) reaches
/// it: the one a running `placement serve` started, or one started for
/// the command alone.
pub enum LocalUse {
    /// Another process's PostgreSQL already runs in the data directory:
    /// connect through its socket and leave it running.
    Running {
        /// Connection URL of the service's database.
        url: String,
    },
    /// Started for this command; stopped by [`LocalUse::finish`].
    Started(LocalDb),
}

impl LocalUse {
    /// Reaches the data directory's database as `serve` would, without
    /// taking over a running one.
    pub fn open(root_dir: &Path) -> Result<LocalUse, LocalDbError> {
        let data = root_dir.join("pgdata");
        if !matches!(occupant(root_dir, &data), Occupant::Free) {
            return Ok(LocalUse::Running {
                url: socket_url(&root_dir.join("run"), "placement"),
            });
        }
        if !data.join("PG_VERSION").exists() {
            return Err(LocalDbError::Step {
                step: "the local database",
                detail: format!(
                    "{} holds no database yet: start `placement serve` once (without DATABASE_URL) or pass --database-url",
                    root_dir.display()
                ),
            });
        }
        LocalDb::start(root_dir).map(LocalUse::Started)
    }

    /// Connection URL of the service's database.
    pub fn url(&self) -> &str {
        match self {
            LocalUse::Running { url } => url,
            LocalUse::Started(db) => &db.url,
        }
    }

    /// Stops the database if this command started it.
    pub fn finish(self) -> Result<(), LocalDbError> {
        match self {
            LocalUse::Running { .. } => Ok(()),
            LocalUse::Started(db) => db.stop(),
        }
    }
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

/// Creates `dir` (mode 0700) if missing, owned by `owner` when given,
/// and makes sure of its mode and owner if it exists.
///
/// The mode and owner are set through a descriptor opened with
/// O_NOFOLLOW|O_DIRECTORY, never by path, so a link is not followed. As
/// root (`owner` given) a link is accepted only when root made it (an
/// operator's `pgdata` on another disk); a link anyone else could have
/// planted, as the cluster's owner could in a directory an older build
/// gave it, is refused: following it would hand root's directory to
/// `postgres`. Without root every entry is the user's own.
fn private_dir(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), LocalDbError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse = |what: String| LocalDbError::Step {
        step: "the data directory",
        detail: format!(
            "{} {what}; remove it (as root) and start again",
            dir.display()
        ),
    };
    let mut flags = libc::O_DIRECTORY | libc::O_CLOEXEC;
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
            flags |= libc::O_NOFOLLOW;
        }
        Err(e) => return Err(e.into()),
        Ok(m) if m.file_type().is_symlink() => {
            if owner.is_some() && m.uid() != 0 {
                let target = std::fs::read_link(dir)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".to_string());
                return Err(refuse(format!(
                    "is a link to {target} made by uid {}, not by root: root does not follow it",
                    m.uid()
                )));
            }
        }
        Ok(m) if !m.is_dir() => return Err(refuse("is not a directory".to_string())),
        Ok(_) => flags |= libc::O_NOFOLLOW,
    }
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(dir)?;
    handle.set_permissions(std::fs::Permissions::from_mode(0o700))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&handle, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Writes `name` in `dir` afresh: an existing file or link there is
/// removed, never followed, and the new file is created exclusively
/// (O_CREAT|O_EXCL, which also refuses a link planted in between).
fn write_fresh(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(name);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?
        .write_all(text.as_bytes())
}

/// A connection URL for the socket directory `run` (percent-encoded, as a
/// `host` parameter libpq and sqlx both read).
fn socket_url(run: &Path, database: &str) -> String {
    let host: String =
        form_urlencoded::byte_serialize(run.display().to_string().as_bytes()).collect();
    format!("postgres://postgres@localhost:{SOCKET_PORT}/{database}?host={host}")
}

impl LocalDb {
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            c.uid(uid).gid(gid);
        }
        // Nothing of the service's environment (its passwords among it)
        // reaches PostgreSQL: only what the tools need to run.
        c.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C")
            .stdin(Stdio::null());
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

    /// The directories of `root_dir`: the top level the service's user
    /// owns (0700, or 0711 as root so the cluster's owner may pass
    /// through), and the cluster's own `pgdata`, `run` and `log`.
    fn prepare_dirs(root_dir: &Path, user: Option<(u32, u32)>) -> Result<(), LocalDbError> {
        std::fs::create_dir_all(root_dir)?;
        if let Some((postgres_uid, _)) = user {
            // Older versions gave this directory to the cluster's owner;
            // root takes it back (it writes placement.pid here). Anyone
            // else's directory is refused: its owner could plant links.
            use std::os::unix::fs::MetadataExt;
            match std::fs::metadata(root_dir)?.uid() {
                0 => {}
                uid if uid == postgres_uid => std::os::unix::fs::chown(root_dir, Some(0), Some(0))?,
                uid => {
                    return Err(LocalDbError::Step {
                        step: "the data directory",
                        detail: format!(
                            "{} belongs to uid {uid}; as root it must belong to root",
                            root_dir.display()
                        ),
                    })
                }
            }
            std::fs::set_permissions(root_dir, std::fs::Permissions::from_mode(0o711))?;
        } else {
            std::fs::set_permissions(root_dir, std::fs::Permissions::from_mode(0o700))?;
        }
        for sub in ["pgdata", "run", "log"] {
            private_dir(&root_dir.join(sub), user)?;
        }
        Ok(())
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
        let data = root_dir.join("pgdata");
        let run = root_dir.join("run");
        let socket = run.join(format!(".s.PGSQL.{SOCKET_PORT}"));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(LocalDbError::Step {
                step: "the socket path",
                detail: format!(
                    "{} is longer than a Unix socket path may be ({MAX_SOCKET_PATH} bytes): choose a shorter --data-dir",
                    socket.display()
                ),
            });
        }
        let mut db = LocalDb {
            bin,
            data: data.clone(),
            user,
            url: String::new(),
        };
        match occupant(root_dir, &data) {
            Occupant::Free => {}
            Occupant::Busy(busy) => return Err(busy),
            Occupant::Orphan { postgres, owner } => {
                tracing::warn!(
                    postgres,
                    owner,
                    "the placement serve that started this data directory's PostgreSQL is gone and left it running: stopping it, then starting afresh"
                );
                db.stop()?;
            }
        }
        Self::prepare_dirs(root_dir, user)?;
        db.init_if_new()?;
        let mut c = db.cmd("pg_ctl");
        c.arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(root_dir.join("log/postgresql.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {SOCKET_PORT} -c listen_addresses='' -c unix_socket_directories='{}' -c unix_socket_permissions=0700 -c max_connections=200",
                run.display()
            ))
            .arg("start");
        db.run("pg_ctl start", c)?;
        write_fresh(root_dir, OWNER_FILE, &std::process::id().to_string())?;
        db.ensure_database(&run)?;
        db.url = socket_url(&run, "placement");
        Ok(db)
    }

    /// Creates the cluster in its data directory unless one is there.
    fn init_if_new(&self) -> Result<(), LocalDbError> {
        if self.data.join("PG_VERSION").exists() {
            return Ok(());
        }
        let mut c = self.cmd("initdb");
        c.arg("-D").arg(&self.data).args([
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=reject",
            "-E",
            "UTF8",
            "--no-locale",
        ]);
        self.run("initdb", c).map(drop)
    }

    /// Creates the `placement` database, through the socket in `run`,
    /// unless it exists.
    fn ensure_database(&self, run: &Path) -> Result<(), LocalDbError> {
        let port = SOCKET_PORT.to_string();
        let psql_args = |c: &mut Command| {
            c.arg("-h").arg(run).args(["-p", &port, "-U", "postgres"]);
        };
        let mut c = self.cmd("psql");
        psql_args(&mut c);
        c.args(["-d", "postgres", "-tAc"])
            .arg("SELECT 1 FROM pg_database WHERE datname = 'placement'");
        if self.run("psql", c)?.trim() == "1" {
            return Ok(());
        }
        let mut c = self.cmd("createdb");
        psql_args(&mut c);
        c.arg("placement");
        self.run("createdb", c).map(drop)
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
