//! The `placement` command: placement.conf and the command line read,
//! logging set up, then the command run (`serve` in `startup`).

use placement::config::{
    placement_conf, AuditArgs, Cli, Command, DbCommand, ImportArgs, LogFormat, UpgradeCommand,
};
use placement::db;
use placement::localdb::{default_data_dir, LocalUse};
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: answers of hundreds of kilobytes are
/// built on the blocking pool and freed on the async workers, and glibc's
/// per-thread arenas gave that memory back and faulted it in again, which
/// cost up to a third of a 1,000-candidate answer's CPU (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    // placement.conf first: it can turn on debug logging and gives the
    // flags their defaults.
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let sources = placement_conf::sources_from(&argv, &placement_conf::Environment::current());
    let loaded = match placement_conf::load(&sources) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("placement: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cli, set_aside) = match parse_with_defaults(&loaded) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("placement: {e}");
            return ExitCode::FAILURE;
        }
    };
    let log_file = match init_logging(loaded.debug, &cli.command) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("placement: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A fatal error is also written where the log goes, not only to
    // stderr: under systemd or kolla the log file is what operators read.
    let logs_to_file = log_file.is_some();
    // SIGHUP never stops the server (its default action would): it
    // reopens the log file, and the policy watcher reads its file again.
    tokio::spawn(on_hangup(log_file));
    for f in &loaded.files {
        tracing::info!(file = %f.display(), "config file read");
    }
    for w in loaded.warnings.iter().chain(&set_aside) {
        tracing::warn!("{w}");
    }
    match cli.command {
        Command::Openapi => {
            let doc = placement::api::docs::openapi();
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Command::Import(args) => match import(args).await {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("placement import: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Audit(args) => audit(args).await,
        Command::Db(DbCommand::Sync(args)) => db_sync(args).await,
        Command::Upgrade(UpgradeCommand::Check(args)) => upgrade_check(args).await,
        Command::Agent(args) => agent(args).await,
        Command::Serve(args) => match placement::startup::serve(*args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                if logs_to_file {
                    tracing::error!("cannot serve: {e}");
                }
                eprintln!("placement: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// The database a one-shot command works on: `--database-url` (or
/// `DATABASE_URL`), else the local database `serve` uses without one.
enum CommandDb {
    Given(String),
    Local(LocalUse),
}

impl CommandDb {
    async fn open(url: Option<&str>, data_dir: Option<&std::path::Path>) -> Result<Self, String> {
        match url {
            Some(u) => placement_conf::database_url(u)
                .map(CommandDb::Given)
                .map_err(|e| e.to_string()),
            None => {
                let dir = data_dir.map_or_else(default_data_dir, std::path::Path::to_path_buf);
                tokio::task::spawn_blocking(move || LocalUse::open(&dir))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(CommandDb::Local)
                    .map_err(|e| e.to_string())
            }
        }
    }

    fn url(&self) -> &str {
        match self {
            CommandDb::Given(u) => u,
            CommandDb::Local(l) => l.url(),
        }
    }

    /// Stops a local database this command started.
    async fn finish(self) {
        if let CommandDb::Local(l) = self {
            let stopped = tokio::task::spawn_blocking(move || l.finish())
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if let Err(e) = stopped {
                eprintln!("placement: stopping the local PostgreSQL failed: {e}");
            }
        }
    }
}

/// `placement agent`: the token from PLACEMENT_TOKEN only (a flag is
/// visible to every local user), or Keystone's from --config-file's
/// `[placement]`; 1 with the reason on any error.
async fn agent(args: placement::config::AgentArgs) -> ExitCode {
    let token = std::env::var("PLACEMENT_TOKEN").unwrap_or_default();
    match placement::agent::run(args, token).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("placement agent: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `placement db sync`: 0 when the schema is current.
async fn db_sync(args: placement::config::DbSyncArgs) -> ExitCode {
    let db = match CommandDb::open(args.database_url.as_deref(), args.data_dir.as_deref()).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("placement db sync: {e}");
            return ExitCode::FAILURE;
        }
    };
    let synced = placement::upgrade::sync(db.url()).await;
    db.finish().await;
    match synced {
        Ok(n) => {
            println!("{n} migrations applied; the schema is current");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("placement db sync: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `placement upgrade check`: placement-status's codes (0, 1 a warning,
/// 2 a failure, 255 when the checks cannot run).
async fn upgrade_check(args: placement::config::UpgradeCheckArgs) -> ExitCode {
    let placement_on_mysql = args
        .database_url
        .as_deref()
        .filter(|u| placement::db::import::source_mysql::is_mysql_url(u));
    if let Some(url) = placement_on_mysql {
        let input = placement::upgrade::CheckInput {
            url,
            policy_file: args.policy_file.as_deref(),
        };
        return report_upgrade_check(placement::upgrade::check(&input).await);
    }
    let db = match CommandDb::open(args.database_url.as_deref(), args.data_dir.as_deref()).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("placement upgrade check: {e}");
            return ExitCode::from(255);
        }
    };
    let input = placement::upgrade::CheckInput {
        url: db.url(),
        policy_file: args.policy_file.as_deref(),
    };
    let checked = placement::upgrade::check(&input).await;
    db.finish().await;
    report_upgrade_check(checked)
}

/// The table on stdout and placement-status's exit code, or 255.
fn report_upgrade_check(checked: Result<Vec<placement::upgrade::Check>, String>) -> ExitCode {
    match checked {
        Ok(checks) => {
            println!("{}", placement::upgrade::render(&checks));
            ExitCode::from(placement::upgrade::exit_code(&checks))
        }
        Err(e) => {
            eprintln!("placement upgrade check: {e}");
            ExitCode::from(255)
        }
    }
}

/// Exit 0 when clean, 1 with findings, 2 when the audit cannot run.
async fn audit(args: AuditArgs) -> ExitCode {
    let db = match CommandDb::open(args.database_url.as_deref(), args.data_dir.as_deref()).await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("placement audit: {e}");
            return ExitCode::from(2);
        }
    };
    let url = db.url().to_string();
    let outcome = placement::audit::run(&url, &describe_database(&url)).await;
    db.finish().await;
    match outcome {
        Ok(findings) => {
            let report = if args.json {
                placement::audit::json(&findings)
            } else {
                placement::audit::human(&findings)
            };
            println!("{report}");
            if findings.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("placement audit: {e}");
            ExitCode::from(2)
        }
    }
}

async fn import(args: ImportArgs) -> Result<placement::import::Report, String> {
    // MySQL and MariaDB sources are read as the deployment tools write
    // their URL; PostgreSQL ones as SQLAlchemy's or libpq's.
    let from = if placement::db::import::source_mysql::is_mysql_url(&args.from) {
        args.from.clone()
    } else {
        placement_conf::database_url(&args.from).map_err(|e| e.to_string())?
    };
    let db = CommandDb::open(args.database_url.as_deref(), args.data_dir.as_deref()).await?;
    let options = placement::import::ImportOptions {
        from,
        to: db.url().to_string(),
        force: args.force,
        dry_run: args.dry_run,
        incomplete_owner: (
            args.incomplete_consumer_project_id,
            args.incomplete_consumer_user_id,
        ),
    };
    let outcome = placement::import::run(&options)
        .await
        .map_err(|e| e.to_string());
    db.finish().await;
    outcome
}

/// Logs to standard error, or to `serve`'s log file (returned, to be
/// reopened on SIGHUP); `RUST_LOG` wins over `[DEFAULT] debug`.
fn init_logging(
    debug: bool,
    command: &Command,
) -> Result<Option<placement::log_output::LogFile>, String> {
    use placement::log_output::{file_path, LogFile, OsloLine};
    let level = if debug {
        "debug,sqlx=warn,hyper=info"
    } else {
        "info,sqlx=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let (format, path) = match command {
        Command::Serve(a) => (
            a.log_format,
            file_path(a.log_file.as_deref(), a.log_dir.as_deref()),
        ),
        _ => (LogFormat::Text, None),
    };
    let file = path.as_deref().map(LogFile::open).transpose()?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    macro_rules! finish {
        ($builder:expr) => {
            match format {
                // The request span's fields (request id, route,
                // microversion, status) ride on every line logged inside it.
                LogFormat::Json => $builder
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .init(),
                LogFormat::Oslo => $builder.with_ansi(false).event_format(OsloLine).init(),
                LogFormat::Text => $builder.with_ansi(false).init(),
            }
        };
    }
    match &file {
        Some(f) => finish!(builder.with_writer(f.clone())),
        // Colour codes only for a person at a terminal, never in log files.
        None if format == LogFormat::Text
            && std::io::IsTerminal::is_terminal(&std::io::stderr()) =>
        {
            builder.with_writer(std::io::stderr).init()
        }
        None => finish!(builder.with_writer(std::io::stderr)),
    }
    Ok(file)
}

/// logrotate moves the file away and sends SIGHUP: write to a new one.
async fn on_hangup(file: Option<placement::log_output::LogFile>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        tracing::warn!("SIGHUP cannot be caught: the log file is never reopened");
        return;
    };
    while hangups.recv().await.is_some() {
        match file.as_ref().map(|f| (f, f.reopen())) {
            None => tracing::info!("SIGHUP"),
            Some((f, Ok(()))) => {
                tracing::info!(file = %f.path().display(), "SIGHUP: log file reopened")
            }
            Some((_, Err(e))) => tracing::error!("SIGHUP: {e}; still writing to the file held"),
        }
    }
}

/// The command line, with the config files' values as the defaults of
/// every command's flag of that name (so flags and environment variables
/// win), and what was set aside: a file's value that cannot serve (a MySQL
/// connection) is an error for a command that takes it unless the flag or
/// its variable gives one, then a warning.
fn parse_with_defaults(loaded: &placement_conf::Loaded) -> Result<(Cli, Vec<String>), String> {
    use clap::{CommandFactory, FromArgMatches};
    let cmd = with_file_defaults(Cli::command(), &loaded.defaults);
    let matches = cmd.clone().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The subcommand run, its definition and its matches.
    let (mut leaf_cmd, mut leaf) = (&cmd, &matches);
    while let Some((name, sub)) = leaf.subcommand() {
        let Some(found) = leaf_cmd.find_subcommand(name) else {
            break;
        };
        (leaf_cmd, leaf) = (found, sub);
    }
    let given = |flag: &str| {
        leaf.ids().any(|id| id.as_str() == flag)
            && leaf
                .value_source(flag)
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
    };
    let takes = |flag: &str| leaf_cmd.get_arguments().any(|a| a.get_id() == flag);
    let mut set_aside = Vec::new();
    for (flag, why) in &loaded.unusable {
        if !takes(flag) {
            continue;
        }
        if !given(flag) {
            return Err(why.clone());
        }
        set_aside.push(format!(
            "{why} (set aside: the flag or its environment variable gives the value)"
        ));
    }
    if let Command::Serve(args) = &mut cli.command {
        args.security.auth_strategy_chosen = given("auth_strategy") || loaded.auth_strategy_chosen;
    }
    Ok((cli, set_aside))
}

/// `cmd` and its subcommands, each flag a file sets defaulting to the
/// file's value.
fn with_file_defaults(cmd: clap::Command, defaults: &[(&'static str, String)]) -> clap::Command {
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let cmd = subcommands.iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, |s| with_file_defaults(s, defaults))
    });
    defaults.iter().fold(cmd, |cmd, (flag, value)| {
        if !cmd.get_arguments().any(|a| a.get_id() == *flag) {
            return cmd;
        }
        // Parsed once at start-up: leaking the few strings is the price of
        // clap's 'static defaults.
        let value: &'static str = Box::leak(value.clone().into_boxed_str());
        cmd.mut_arg(*flag, |a| {
            let a = a.default_value(value);
            // A switch (`--randomize-allocation-candidates`) shows no
            // default, and clap refuses hiding one it has not.
            if a.get_action().takes_values() {
                a.hide_default_value(true)
            } else {
                a
            }
        })
    })
}

/// Where the database is, for errors: its hosts and database, never the
/// password.
fn describe_database(url: &str) -> String {
    match db::target::DbTarget::parse(url) {
        Ok(t) => t.describe(),
        Err(_) => format!(
            "the database {} (its URL does not parse)",
            placement::config::redact_url(url)
        ),
    }
}
