//! Command-line and environment configuration. Every option has an
//! environment fallback so containers can be configured without flags.

pub mod agent_conf;
pub mod oslo_files;
pub mod placement_conf;
pub mod reference;
pub mod security;

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// The `placement` command.
#[derive(Debug, Parser)]
#[command(
    name = "placement",
    version,
    about = "OpenStack Placement-compatible resource placement and scheduling service"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service.
    Serve(Box<ServeArgs>),
    /// Print the OpenAPI document to standard output.
    Openapi,
    /// Copy a running OpenStack Placement's database (16.0.0's schema, on
    /// PostgreSQL, MySQL or MariaDB) into this service's, verified, in one
    /// transaction.
    Import(ImportArgs),
    /// Check a database for problems, read-only (exit 1 when any).
    Audit(AuditArgs),
    /// The database's schema (placement-manage's `db sync`).
    #[command(subcommand)]
    Db(DbCommand),
    /// Before and after an upgrade (placement-status's `upgrade check`).
    #[command(subcommand)]
    Upgrade(UpgradeCommand),
    /// Run on a machine: publish its provider tree (NUMA cells, SR-IOV
    /// functions, CPU traits) from /sys and /proc. The token comes from
    /// PLACEMENT_TOKEN (never a flag: every local user sees flags).
    Agent(AgentArgs),
}

/// Options of `placement agent`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// The service (default: the Keystone catalog's placement endpoint
    /// with --config-file, else http://127.0.0.1:8778).
    #[arg(long, env = "PLACEMENT_URL")]
    pub placement_url: Option<String>,
    /// A config file whose `[placement]` section gives Keystone password
    /// credentials, as nova-compute's nova.conf does (else the token is
    /// PLACEMENT_TOKEN's, for noauth2).
    #[arg(long, env = "PLACEMENT_AGENT_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,
    /// Sync once and exit (else: at start, then whenever the machine changes).
    #[arg(long)]
    pub once: bool,
    /// Seconds between looks at the machine (without --once).
    #[arg(long, env = "PLACEMENT_AGENT_SYNC_INTERVAL", default_value_t = 60)]
    pub sync_interval: u64,
    /// The node's provider name (default: the host's name).
    #[arg(long, env = "PLACEMENT_AGENT_PROVIDER_NAME")]
    pub provider_name: Option<String>,
    /// Where /sys is (a copy of it, for a machine described in a fixture).
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Where /proc is.
    #[arg(long, default_value = "/proc")]
    pub procfs_root: PathBuf,
    /// The class of an SR-IOV function's virtual functions.
    #[arg(long, default_value = "SRIOV_NET_VF")]
    pub vf_resource_class: String,
    /// Memory kept for the host (reserved on the first NUMA cell), in MB.
    #[arg(long, default_value_t = 0)]
    pub reserved_host_memory_mb: u64,
    /// VCPU's allocation ratio.
    #[arg(long, default_value_t = 1.0)]
    pub cpu_allocation_ratio: f64,
    /// MEMORY_MB's allocation ratio.
    #[arg(long, default_value_t = 1.0)]
    pub ram_allocation_ratio: f64,
    /// Where the node's VCPU and MEMORY_MB go: `nested` (one provider per
    /// NUMA cell, Placement's nested model) or `flat` (on the node, as
    /// Nova and colocation's usage reports have them).
    #[arg(long, value_enum, default_value_t = TreeLayout::Nested)]
    pub tree_layout: TreeLayout,
    /// Publish the node's CPU topology for the deployment engine (each
    /// online CPU a core of 100 shares in its NUMA cell; --tree-layout flat).
    #[arg(long, conflicts_with = "beside_nova")]
    pub cpu_topology: bool,
    /// A path whose filesystem's size the node offers deployments as a
    /// volume (repeatable; --tree-layout flat).
    #[arg(long = "volume", value_name = "PATH", conflicts_with = "beside_nova")]
    pub volumes: Vec<PathBuf>,
    /// Measure, report and enforce colocation's watermarks on this machine
    /// (the consumers' cgroups under --cgroup-parent).
    #[arg(long)]
    pub colocation: bool,
    /// Beside nova-compute: never write the provider tree (Nova owns it);
    /// find the node by name and own only usage and enforcement.
    #[arg(long, requires = "colocation", conflicts_with = "once")]
    pub beside_nova: bool,
    /// Where the cgroup filesystems are mounted.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// The consumers' parent cgroup, relative, the same in every
    /// controller: `prod/<uuid>`, `mid/<uuid>` and `be/<uuid>` under it.
    #[arg(
        long,
        env = "PLACEMENT_AGENT_CGROUP_PARENT",
        default_value = "placement"
    )]
    pub cgroup_parent: PathBuf,
    /// Milliseconds between looks at memory (eviction is this quick).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=1000))]
    pub memory_check_interval_ms: u64,
    /// Seconds between usage reports (and refreshes of the policy).
    #[arg(long, env = "PLACEMENT_AGENT_REPORT_INTERVAL", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub report_interval: u64,
    /// The agent's own directory: the last policy and the evictions the
    /// service has not recorded yet, kept across restarts.
    #[arg(long, default_value = "/var/lib/placement-agent")]
    pub state_dir: PathBuf,
}

/// Where a node's VCPU and MEMORY_MB go in its provider tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TreeLayout {
    /// One provider per NUMA cell.
    Nested,
    /// On the node itself.
    Flat,
}

/// `placement db …`.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Apply every migration this build has, then exit (what deployment
    /// tools run as a step of their own before starting the service).
    Sync(DbSyncArgs),
}

/// `placement upgrade …`.
#[derive(Debug, Subcommand)]
pub enum UpgradeCommand {
    /// placement-status's checks (same names, table and exit codes: 0
    /// success, 1 a warning, 2 a failure, 255 when they cannot run), then
    /// this build's own: the policy file's rules build and the schema is
    /// current. --database-url may also name the Placement database to be
    /// imported (PostgreSQL, MySQL or MariaDB), to check it before a switch.
    Check(UpgradeCheckArgs),
}

/// Options of `placement db sync`.
#[derive(Debug, Clone, Args)]
pub struct DbSyncArgs {
    /// The database (`[placement_database] connection` when a config file
    /// gives it). Without one, the local database `serve` runs without
    /// DATABASE_URL (in --data-dir).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Data directory of the local database (only without DATABASE_URL).
    #[arg(long, env = "PLACEMENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    /// The config files read.
    pub config: ConfigFiles,
}

/// Options of `placement upgrade check`.
#[derive(Debug, Clone, Args)]
pub struct UpgradeCheckArgs {
    /// The database (`[placement_database] connection` when a config file
    /// gives it). Without one, the local database `serve` runs without
    /// DATABASE_URL (in --data-dir).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Data directory of the local database (only without DATABASE_URL).
    #[arg(long, env = "PLACEMENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The policy file to check (`[oslo_policy] policy_file`).
    #[arg(long, env = "PLACEMENT_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    #[command(flatten)]
    /// The config files read.
    pub config: ConfigFiles,
}

/// Options of `placement audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// The database to check. Without it, the local database `serve`
    /// runs without DATABASE_URL (in --data-dir), running or not.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Data directory of the local database (only without DATABASE_URL);
    /// the same default as `serve`'s.
    #[arg(long, env = "PLACEMENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// One JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Options of `placement import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The Placement database: PostgreSQL (SQLAlchemy's
    /// `postgresql+psycopg2://` form is accepted), or MySQL/MariaDB as the
    /// deployment tools write it (`mysql+pymysql://…?charset=utf8`,
    /// `ssl_ca`, `read_default_file`). Only read. Prefer the environment
    /// variable (or a password in ~/.pgpass or a my.cnf) to the flag: a
    /// flag is visible to every local user in the process list.
    #[arg(long, env = "PLACEMENT_IMPORT_FROM", hide_env_values = true)]
    pub from: String,
    /// This service's database. Without it, the local database `serve`
    /// runs without DATABASE_URL (in --data-dir), running or not.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Data directory of the local database (only without DATABASE_URL);
    /// the same default as `serve`'s.
    #[arg(long, env = "PLACEMENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Add to a database that already holds providers or consumers.
    #[arg(long)]
    pub force: bool,
    /// Copy and verify, then roll back: report without writing.
    #[arg(long)]
    pub dry_run: bool,
    /// Project given to consumers the source has allocations but no row for.
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000000")]
    pub incomplete_consumer_project_id: String,
    /// User given to those consumers.
    #[arg(long, default_value = "00000000-0000-0000-0000-000000000000")]
    pub incomplete_consumer_user_id: String,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
    /// oslo.log's default line (`2026-11-27 23:59:01.123 4242 INFO
    /// placement.api.middleware [req-… - - - - -] …`), for tools that
    /// parse Placement's logs.
    Oslo,
}

/// What sits between the service and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DbPooler {
    /// PostgreSQL itself, or a pooler in session mode.
    None,
    /// A pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction`): no prepared statement is kept, every statement runs
    /// inside a transaction, and migrations and the announcement listener
    /// use --database-session-url.
    Transaction,
}

/// How candidate generation walks the anchor trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenerationStrategy {
    /// All results of one tree before the next.
    DepthFirst,
    /// One result of each tree in turn.
    BreadthFirst,
}

/// Where `placement.conf` is read from (`config::placement_conf`, which
/// reads these flags itself before the rest of the command line, since
/// the files give the other flags their defaults).
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigFiles {
    /// Placement's `placement.conf` (oslo.config INI), repeatable: later
    /// files win; flags and environment variables win over any file.
    /// Without one, Placement's: `$OS_PLACEMENT_CONFIG_DIR/placement.conf`,
    /// else the first `placement.conf` in ~/.placement/, ~/,
    /// /etc/placement/, /etc/ (and the first `placement.conf.d/` there).
    #[arg(long, env = "PLACEMENT_CONFIG_FILE", value_delimiter = ',')]
    pub config_file: Vec<PathBuf>,
    /// A folder of `*.conf` files read in name order (oslo.config's
    /// `--config-dir`, e.g. openstack-helm's `placement.conf.d`),
    /// repeatable; read where it stands among the --config-file flags.
    #[arg(long)]
    pub config_dir: Vec<PathBuf>,
}

/// Options of `placement serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, env = "PLACEMENT_BIND", default_value = "127.0.0.1:8778")]
    pub bind: String,
    /// PostgreSQL URL, or libpq's key/value string; several hosts
    /// (`h1:5432,h2:5432`, `target_session_attrs=read-write`) mean the
    /// first that accepts writes, followed across a failover. Without it,
    /// a local PostgreSQL is started from the system install in
    /// --data-dir and stopped on shutdown.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// What is between the service and PostgreSQL: `transaction` for a
    /// pooler in transaction mode (PgBouncer's `pool_mode = transaction`).
    #[arg(long, env = "PLACEMENT_DB_POOLER", value_enum, default_value = "none")]
    pub db_pooler: DbPooler,
    /// A URL with sessions of its own (PostgreSQL directly, or a pooler in
    /// session mode) for what a transaction pooler cannot carry: the
    /// migrations' lock at start-up and one listener for deployment
    /// announcements. Needed with `--db-pooler transaction`; otherwise
    /// DATABASE_URL serves.
    #[arg(long, env = "PLACEMENT_DATABASE_SESSION_URL", hide_env_values = true)]
    pub database_session_url: Option<String>,
    /// Data directory of the local PostgreSQL (only without DATABASE_URL).
    /// Defaults to $XDG_DATA_HOME/placement (or ~/.local/share/placement).
    #[arg(long, env = "PLACEMENT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Maximum database connections of this process.
    #[arg(long, env = "PLACEMENT_DB_MAX_CONNECTIONS", default_value_t = 20)]
    pub db_max_connections: u32,
    /// Seconds a request waits for a database connection before it is
    /// answered 503 (while the database is down, every request gets 503
    /// within this time).
    #[arg(long, env = "PLACEMENT_DB_ACQUIRE_TIMEOUT", default_value_t = 3)]
    pub db_acquire_timeout: u64,
    /// Seconds a client may take to send a request head, counted from when
    /// the connection is opened or its previous response ended (so this is
    /// also the keep-alive idle timeout).
    #[arg(long, env = "PLACEMENT_HTTP_HEADER_TIMEOUT", default_value_t = 10)]
    pub http_header_timeout: u64,
    /// Open client connections at most; past it an idle connection is
    /// closed to make room (the oldest that never had an answer, else the
    /// least recently answered). The fair queue's long polls hold a
    /// quarter of it at most, a sixteenth of that per project.
    #[arg(long, env = "PLACEMENT_HTTP_MAX_CONNECTIONS", default_value_t = 4096)]
    pub http_max_connections: usize,
    /// Seconds between sweeps that set to 0 the batch inventory of
    /// providers whose usage reports stopped (degradeTimeMinutes).
    #[arg(long, env = "PLACEMENT_COLOCATION_SWEEP_INTERVAL", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub colocation_sweep_interval: u64,
    /// `text` (a line per event, for people), `json` (one JSON object per
    /// line; a request's carries its id, route, method, URI, status,
    /// length, microversion, user, project and latency) or `oslo`
    /// (oslo.log's lines, a request's as Placement's request log writes it).
    #[arg(long, env = "PLACEMENT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Seconds between rounds over the fair queue (`POST /queue`), run by
    /// one process at a time (0: only when requests arrive in an empty
    /// queue or allocations are deleted while requests wait).
    #[arg(long, env = "PLACEMENT_ADMISSION_INTERVAL", default_value_t = 1)]
    pub admission_interval: u64,
    /// Seconds the room that preemption advice (or the reservation
    /// against starvation) makes is held for the waiting request (added to
    /// its project's reservation on the provider), so that no one else
    /// takes what the advised owners free; renewed by every round that
    /// finds the request still waiting for room, so it bounds only how
    /// long room stays held for a request that stopped waiting.
    #[arg(long, env = "PLACEMENT_PREEMPTION_HOLD_SECONDS", default_value_t = 300)]
    pub preemption_hold_seconds: u64,
    /// Seconds a queued request may wait for room (`no_capacity`) before
    /// room is reserved for it: the longest waiting such request gets a
    /// hold, as preemption advice's, on the provider closest to fitting
    /// it, so that what frees there goes to it and not to smaller work
    /// arriving behind it (one such hold at a time, for
    /// `--preemption-hold-seconds`, renewed while it waits). 0: never.
    #[arg(
        long,
        env = "PLACEMENT_QUEUE_RESERVE_AFTER_SECONDS",
        default_value_t = 120
    )]
    pub queue_reserve_after_seconds: u64,
    /// Seconds a preempted request that asked to be queued again
    /// (`requeue: true`) waits before its next round: doubled with each
    /// requeue of the same consumer, at most an hour (Kueue's requeuing
    /// backoff).
    #[arg(
        long,
        env = "PLACEMENT_QUEUE_REQUEUE_BACKOFF_SECONDS",
        default_value_t = 10
    )]
    pub queue_requeue_backoff_seconds: u64,
    /// Seconds committed admission rounds, and queued requests once
    /// decided, are kept for audit and replay (default 7 days; 0 keeps
    /// them forever). Older ones are pruned every minute.
    #[arg(long, env = "PLACEMENT_ADMISSION_ROUND_RETENTION", default_value_t = 7 * 86_400)]
    pub admission_round_retention: u64,
    /// Serve under this path as well (`/placement`, where devstack mounts
    /// Placement): the answers' `links` and `Location` carry it.
    #[arg(long, env = "PLACEMENT_PATH_PREFIX")]
    pub path_prefix: Option<String>,
    /// Apply the migrations at start-up (several servers starting at once
    /// take turns). `false` when the deployment runs `placement db sync`
    /// as its own step: the server then refuses a schema that lacks one.
    #[arg(long, env = "PLACEMENT_MIGRATE", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub migrate: bool,
    /// Seconds SIGTERM (or Ctrl-C) waits for requests in flight before exit.
    #[arg(long, env = "PLACEMENT_SHUTDOWN_GRACE", default_value_t = 10)]
    pub shutdown_grace: u64,
    #[command(flatten)]
    /// Settings that change API behaviour.
    pub settings: Settings,
    #[command(flatten)]
    /// Authentication, policy and CORS.
    pub security: security::SecurityArgs,
    #[command(flatten)]
    /// The config files read (parsed before the command line; here so the
    /// flags are accepted and shown).
    pub config: ConfigFiles,
    /// Write the log to this file instead of standard error (oslo.log's
    /// `log_file`; under --log-dir when relative and that is given). The
    /// file is opened again on SIGHUP, for logrotate.
    #[arg(long, env = "PLACEMENT_LOG_FILE")]
    pub log_file: Option<PathBuf>,
    /// The folder of the log file (oslo.log's `log_dir`; the file is
    /// `placement.log` there without --log-file).
    #[arg(long, env = "PLACEMENT_LOG_DIR")]
    pub log_dir: Option<PathBuf>,
}

/// `url` with any password replaced by `***`, for errors and logs: the
/// userinfo's (`postgres://user:***@host/db`) and a `password=` parameter
/// (URL query or key/value form).
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://").map(|i| i + 3) {
        let rest = &out[scheme_end..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                out.replace_range(scheme_end + colon + 1..scheme_end + at, "***");
            }
        }
    }
    let mut redacted = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.find("password=") {
        let start = i + "password=".len();
        let boundary = i == 0 || rest[..i].ends_with(['?', '&', ' ']);
        redacted.push_str(&rest[..start]);
        rest = &rest[start..];
        if boundary {
            let end = rest.find(['&', ' ']).unwrap_or(rest.len());
            redacted.push_str("***");
            rest = &rest[end..];
        }
    }
    redacted.push_str(rest);
    redacted
}

#[cfg(test)]
mod redaction_tests {
    use super::redact_url;

    #[test]
    fn passwords_never_survive() {
        for (url, shown) in [
            ("postgres://u:pw@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://u:p@ss@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
            (
                "postgres://h/db?user=u&password=pw&x=1",
                "postgres://h/db?user=u&password=***&x=1",
            ),
            (
                "host=h user=u password=pw dbname=d",
                "host=h user=u password=*** dbname=d",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }
}

/// Default body limit: a POST /allocations of 10,000 consumers is ~3 MB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// What request bodies may hold in memory together, by default (25 of the
/// largest bodies at once).
pub const DEFAULT_BODY_MEMORY_BYTES: usize = 256 * 1024 * 1024;

/// Default solver step budget (see `benches/candidates.rs`' stall probe).
pub const DEFAULT_MAX_STEPS: u64 = 10_000_000;

/// Default provider checks per admission round: 10,000 requests over
/// 1,000 providers, each scanning the whole pool, with room to spare.
pub const DEFAULT_ADMISSION_STEPS: u64 = 50_000_000;

/// Placement's `[placement]` options that change API behaviour.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Cap on allocation candidates generated per request (-1: no cap).
    #[arg(
        long,
        env = "PLACEMENT_MAX_ALLOCATION_CANDIDATES",
        default_value_t = 1000,
        allow_negative_numbers = true
    )]
    pub max_allocation_candidates: i64,
    /// Sample candidates randomly under `limit` instead of taking the first.
    #[arg(
        long,
        env = "PLACEMENT_RANDOMIZE_ALLOCATION_CANDIDATES",
        default_value_t = false
    )]
    pub randomize_allocation_candidates: bool,
    /// Order in which candidate generation visits provider trees.
    #[arg(
        long,
        env = "PLACEMENT_ALLOCATION_CANDIDATES_GENERATION_STRATEGY",
        value_enum,
        default_value = "depth-first"
    )]
    pub allocation_candidates_generation_strategy: GenerationStrategy,
    /// Work allowed to one allocation-candidates search, in solver steps
    /// (0: unbounded). At the bound the answer is what was found so far, as
    /// with `limit`, and a warning is logged with the request id. The
    /// default keeps the worst request under about a second on 2 cores.
    #[arg(
        long,
        env = "PLACEMENT_ALLOCATION_CANDIDATES_MAX_STEPS",
        default_value_t = DEFAULT_MAX_STEPS
    )]
    pub allocation_candidates_max_steps: u64,
    /// Seconds raw usage samples are kept (each report prunes its
    /// provider's older ones). Window averages never look further back
    /// than cpuEvictTimeWindowSeconds.
    #[arg(
        long,
        env = "PLACEMENT_COLOCATION_SAMPLE_RETENTION",
        default_value_t = 3600,
        value_parser = clap::value_parser!(i64).range(60..=86400)
    )]
    pub colocation_sample_retention: i64,
    /// Resource classes left out of DRF shares (Mesos'
    /// `--fair_sharing_excluded_resource_names`), comma-separated.
    #[arg(
        long,
        env = "PLACEMENT_FAIRNESS_EXCLUDED_RESOURCE_CLASSES",
        value_delimiter = ',',
        num_args = 0..
    )]
    pub fairness_excluded_resource_classes: Vec<String>,
    /// Provider checks one admission round may make before the requests it
    /// has not tried are deferred as `not_reached` (0: unbounded).
    #[arg(
        long,
        env = "PLACEMENT_ADMISSION_MAX_STEPS",
        default_value_t = DEFAULT_ADMISSION_STEPS
    )]
    pub admission_max_steps: u64,
    /// Pending requests one project may have in the fair queue; a
    /// submission past it is refused 409 `placement.queue.project_full`
    /// (a list of submissions whole), so no project can make everyone's queue slow.
    #[arg(
        long,
        env = "PLACEMENT_QUEUE_MAX_PENDING_PER_PROJECT",
        default_value_t = 100_000,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub queue_max_pending_per_project: u32,
    /// Server-side retries of an allocation write that lost a database race.
    #[arg(
        long,
        env = "PLACEMENT_ALLOCATION_CONFLICT_RETRY_COUNT",
        default_value_t = 10
    )]
    pub allocation_conflict_retry_count: u32,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(
        long = "http-max-body-bytes",
        env = "PLACEMENT_HTTP_MAX_BODY_BYTES",
        default_value_t = DEFAULT_MAX_BODY_BYTES
    )]
    pub http_max_body_bytes: usize,
    /// Seconds a client may take to send a whole request body; slower
    /// ones get 408 and the connection is closed.
    #[arg(
        long = "http-body-timeout",
        env = "PLACEMENT_HTTP_BODY_TIMEOUT",
        default_value_t = 30
    )]
    pub http_body_timeout_secs: u64,
    /// Request bodies received at once, over all connections; one more is
    /// answered 503 at once (with `Retry-After`) instead of holding a
    /// connection while it arrives. Bodies are only read for a caller who
    /// passed authentication and the route's policy.
    #[arg(
        long = "http-max-body-uploads",
        env = "PLACEMENT_HTTP_MAX_BODY_UPLOADS",
        default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub http_max_body_uploads: u32,
    /// Bytes all request bodies being received or handled may hold in
    /// memory together (a body reserves its Content-Length up front); one
    /// that does not fit is answered 503 at once.
    #[arg(
        long = "http-body-memory-bytes",
        env = "PLACEMENT_HTTP_BODY_MEMORY_BYTES",
        default_value_t = DEFAULT_BODY_MEMORY_BYTES
    )]
    pub http_body_memory_bytes: usize,
    /// Seconds a request's database work may take: every wait for a
    /// connection and every round trip inside it. Past it the request is
    /// answered 503 (`placement.database.unavailable`, or
    /// `placement.database.outcome_unknown` when a write may have been
    /// sent), however long PostgreSQL stays hung. A long poll's wait for
    /// a decision is not database work and does not count.
    #[arg(
        long = "db-request-timeout",
        env = "PLACEMENT_DB_REQUEST_TIMEOUT",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub db_request_timeout_secs: u64,
    /// Project recorded for allocations written before microversion 1.8.
    #[arg(
        long,
        env = "PLACEMENT_INCOMPLETE_CONSUMER_PROJECT_ID",
        default_value = "00000000-0000-0000-0000-000000000000"
    )]
    pub incomplete_consumer_project_id: String,
    /// User recorded for allocations written before microversion 1.8.
    #[arg(
        long,
        env = "PLACEMENT_INCOMPLETE_CONSUMER_USER_ID",
        default_value = "00000000-0000-0000-0000-000000000000"
    )]
    pub incomplete_consumer_user_id: String,
    /// Serve `GET /metrics` (Prometheus text format, no token);
    /// `--metrics false` answers it 404.
    #[arg(long, env = "PLACEMENT_METRICS", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub metrics: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_allocation_candidates: 1000,
            randomize_allocation_candidates: false,
            allocation_candidates_generation_strategy: GenerationStrategy::DepthFirst,
            allocation_candidates_max_steps: DEFAULT_MAX_STEPS,
            allocation_conflict_retry_count: 10,
            colocation_sample_retention: 3600,
            fairness_excluded_resource_classes: Vec::new(),
            admission_max_steps: DEFAULT_ADMISSION_STEPS,
            queue_max_pending_per_project: 100_000,
            http_max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            http_body_timeout_secs: 30,
            http_max_body_uploads: 256,
            http_body_memory_bytes: DEFAULT_BODY_MEMORY_BYTES,
            db_request_timeout_secs: 10,
            incomplete_consumer_project_id: "00000000-0000-0000-0000-000000000000".into(),
            incomplete_consumer_user_id: "00000000-0000-0000-0000-000000000000".into(),
            metrics: true,
        }
    }
}
