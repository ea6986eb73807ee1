//! `placement serve`'s start and stop: the security settings, the
//! database (a local PostgreSQL when no URL is given), its pools and
//! schema, the tasks every process runs beside the requests, then the
//! listener until a stop; on the way out the tasks end and the pools
//! close before a local PostgreSQL stops.

use crate::config::{DbPooler, ServeArgs};
use crate::localdb::{default_data_dir, LocalDb};
use crate::state::{AppState, Security};
use crate::{app, db};

/// Serves until asked to stop: the security settings, then the database
/// (a local PostgreSQL without a URL), its schema, the background tasks
/// and the listener. An error is one an operator can act on.
pub async fn serve(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    // From here on SIGINT and SIGTERM stop the service cleanly, even
    // during start-up.
    let stop = crate::serve::Stop::listen()?;
    // A bad policy file or a missing Keystone option stops start-up before
    // anything else starts.
    let security = Security::from_args(&args.security)?;
    if let Some(prefix) = &args.path_prefix {
        crate::api::respond::path_prefix::set(prefix)?;
    }
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(&args.bind)
        .await
        .map_err(|e| format!("--bind {}: {e}", args.bind))?
        .collect();
    match args.security.exposure(&args.bind, &addrs)? {
        crate::config::security::Exposure::Fine => {}
        crate::config::security::Exposure::Warn(w) => tracing::warn!("{w}"),
    }
    tracing::info!(
        auth = ?args.security.auth_strategy,
        enforce_new_defaults = args.security.enforce_new_defaults,
        enforce_scope = args.security.enforce_scope,
        policy_file = ?args.security.policy_file,
        cors = security.cors.is_some(),
        "security"
    );
    // A bad database URL is one clear error before anything starts.
    if let Some(url) = &args.database_url {
        db::target::DbTarget::parse(url).map_err(|e| format!("the database URL: {e}"))?;
    }
    let local = match &args.database_url {
        Some(_) => None,
        None => {
            let dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
            tracing::info!(data_dir = %dir.display(), "no DATABASE_URL: starting a local PostgreSQL");
            // initdb and pg_ctl are not interrupted: a stop asked for
            // meanwhile is taken once they are done, and stops what they
            // started.
            let local = tokio::task::spawn_blocking(move || LocalDb::start(&dir)).await??;
            if stop.is_asked() {
                tracing::info!("stopped during start-up: stopping the local PostgreSQL");
                local.stop()?;
                return Ok(());
            }
            Some(local)
        }
    };
    let url = args
        .database_url
        .clone()
        .or_else(|| local.as_ref().map(|l| l.url.clone()))
        .unwrap_or_default();
    let result = run(&args, &url, security, stop).await;
    if let Some(l) = local {
        if let Err(e) = l.stop() {
            tracing::warn!(error = %e, "stopping the local PostgreSQL failed");
        }
    }
    result
}

async fn run(
    args: &ServeArgs,
    url: &str,
    security: Security,
    stop: crate::serve::Stop,
) -> Result<(), Box<dyn std::error::Error>> {
    // A stop asked for before the server listens ends the start-up where
    // it is (a migration in flight rolls back): the caller then stops the
    // local PostgreSQL it started.
    let ready = async {
        let (pool, sessions) = open_pools(args, url).await?;
        check_schema(args, &sessions).await?;
        Ok::<_, Box<dyn std::error::Error>>((pool, sessions))
    };
    let (pool, sessions) = tokio::select! {
        ready = ready => ready?,
        () = stop.clone().asked() => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
    };
    let seated = if args.db_pooler == DbPooler::Transaction {
        db::Pool::behind_transaction_pooler(pool.clone())
    } else {
        db::Pool::new(pool.clone())
    };
    let mut state = AppState::new(seated, args.settings.clone()).with_security(security);
    let max_connections =
        crate::serve::fit_connections(args.http_max_connections.max(1), args.db_max_connections);
    // Long polls of the fair queue hold connections: a quarter of the
    // cap at most, a sixteenth of that for one project.
    let waiters = (max_connections / 4).max(1);
    state.machinery.queue_signals = std::sync::Arc::new(
        crate::fairness::long_polls::QueueSignals::with_budget(waiters, (waiters / 16).max(1)),
    );
    // The first request already takes times from the database's clock.
    if let Err(e) = db::time_offset::measure(&sessions).await {
        tracing::warn!(error = %e, "measuring the clock offset from the database");
    }
    let (request_pool, session_pool) = (pool.clone(), sessions.clone());
    let mut background = spawn_background(args, &state, sessions, pool);
    let listener = tokio::net::TcpListener::bind(&args.bind).await?;
    tracing::info!(bind = %listener.local_addr()?, "placement listening");
    let opts = crate::serve::ServeOptions {
        header_timeout: std::time::Duration::from_secs(args.http_header_timeout),
        max_connections,
        grace: std::time::Duration::from_secs(args.shutdown_grace),
    };
    crate::serve::serve(listener, app(state), opts, stop.asked()).await;
    // The background tasks end, and the pools close, before a local
    // PostgreSQL is stopped: a stop is expected, not a database lost.
    background.abort_all();
    while background.join_next().await.is_some() {}
    request_pool.close().await;
    session_pool.close().await;
    tracing::info!("shut down");
    Ok(())
}

/// The request pool and the sessions' pool (the same one without a
/// transaction pooler).
async fn open_pools(
    args: &ServeArgs,
    url: &str,
) -> Result<(sqlx::PgPool, sqlx::PgPool), Box<dyn std::error::Error>> {
    let target = db::target::DbTarget::parse(url).map_err(|e| format!("the database URL: {e}"))?;
    let settings = db::primary::PoolSettings {
        max_connections: args.db_max_connections,
        acquire_timeout: std::time::Duration::from_secs(args.db_acquire_timeout),
        ping_idle: args.db_pooler == DbPooler::None,
    };
    let (pool, sessions) = match args.db_pooler {
        DbPooler::None => {
            let pool = db::primary::open(target, settings, |o| o).await?;
            (pool.clone(), pool)
        }
        DbPooler::Transaction => {
            let session_url = args.database_session_url.as_deref().ok_or(
                "--db-pooler transaction needs --database-session-url (PLACEMENT_DATABASE_SESSION_URL): PostgreSQL directly or a session-mode pool, for the migrations' lock and the announcement listener",
            )?;
            let session_target = db::target::DbTarget::parse(session_url)
                .map_err(|e| format!("the database session URL: {e}"))?;
            let sessions = db::primary::open(
                session_target,
                db::primary::PoolSettings {
                    max_connections: 2,
                    ping_idle: true,
                    ..settings
                },
                |o| o,
            )
            .await?;
            // No named statement outlives a transaction there, and the
            // pooler accepts only the startup parameters it tracks.
            db::statements::keep_named_statements(false);
            let pool = db::primary::open(target, settings, |o| {
                o.statement_cache_capacity(0).extra_float_digits(None)
            })
            .await?;
            (pool, sessions)
        }
    };
    Ok((pool, sessions))
}

/// Migrates the schema (`--migrate`), or refuses one `placement db sync`
/// has not brought to this build's.
async fn check_schema(
    args: &ServeArgs,
    sessions: &sqlx::PgPool,
) -> Result<(), Box<dyn std::error::Error>> {
    if args.migrate {
        db::prepare(sessions).await.map_err(|e| db::explain(&e))?;
    } else {
        // `placement db sync` is the deployment's own step: refuse a schema
        // it has not brought to this build's.
        let mut conn = sessions.acquire().await?;
        let (pending, unknown) = db::migrations::compare(&mut conn).await?;
        if let Some(p) = pending.first() {
            return Err(format!(
                "--migrate false: the database lacks {} migrations (the first: {} {}); run `placement db sync`",
                pending.len(),
                p.version,
                p.description
            )
            .into());
        }
        if let Some(v) = unknown.first() {
            tracing::warn!("the database has migration {v}, which this build does not know: a newer release migrated it");
        } else if !db::definitions::current(&mut conn).await? {
            return Err("--migrate false: the database runs other definitions of the write path's functions than this build's; run `placement db sync`".into());
        }
    }
    Ok(())
}

/// The tasks every process runs beside the requests: the announcement
/// listener, the fair queue's listener and leader, housekeeping and the
/// stale-batch sweep.
fn spawn_background(
    args: &ServeArgs,
    state: &AppState,
    sessions: sqlx::PgPool,
    pool: sqlx::PgPool,
) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    if state.security.policy.path().is_some() {
        tasks.spawn(watch_policy(state.security.clone()));
    }
    // The database's clock, on the sessions' pool (a transaction pooler
    // would split the statement's round trips between servers).
    tasks.spawn(db::time_offset::follow(sessions.clone()));
    tasks.spawn(crate::deploy::refresh::run(
        crate::deploy::refresh::Caches {
            sessions: sessions.clone(),
            pool: state.pool.clone(),
            snapshots: state.machinery.provider_snapshots(),
            nodes: state.machinery.nodes.clone(),
        },
    ));
    tasks.spawn(crate::fairness::queue_leader::run(
        crate::fairness::queue_leader::Leader {
            pool: state.pool.clone(),
            snapshots: state.machinery.provider_snapshots(),
            sessions: sessions.clone(),
            settings: crate::fairness::admission::RoundSettings {
                record_idle: false,
                ..crate::fairness::admission::RoundSettings::of(&state.settings)
            },
            interval: std::time::Duration::from_secs(args.admission_interval),
            holds: crate::fairness::queue_round::Holds {
                seconds: args.preemption_hold_seconds,
                reserve_after_seconds: args.queue_reserve_after_seconds,
                requeue_backoff_seconds: args.queue_requeue_backoff_seconds,
            },
            signals: state.machinery.queue_signals.clone(),
        },
    ));
    tasks.spawn(crate::maintenance::housekeeping(
        pool.clone(),
        args.admission_round_retention,
    ));
    tasks.spawn(crate::maintenance::degrade_stale_batch(
        pool,
        std::time::Duration::from_secs(args.colocation_sweep_interval),
    ));
    tasks
}

/// How often the policy file is looked at (oslo.policy looks at every
/// enforcement; a few seconds is as good for an operator's edit).
const POLICY_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// Builds the policy again when its file changes, looked at every few
/// seconds and on SIGHUP. A refusal is logged once per text.
async fn watch_policy(security: std::sync::Arc<Security>) {
    use crate::policy::source::Refresh;
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut last_refusal = String::new();
    loop {
        let hangup = async {
            match hangups.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(POLICY_LOOK_EVERY) => {}
            _ = hangup => {}
        }
        // Reading and building the rules runs off the runtime's threads:
        // a large file's build must never hold up the requests.
        let source = security.clone();
        let refreshed = tokio::task::spawn_blocking(move || source.policy.refresh()).await;
        let Ok(refreshed) = refreshed else {
            tracing::error!(
                "the policy file's rebuild failed; the rules in force stay as they were"
            );
            continue;
        };
        match refreshed {
            Refresh::Unchanged => {}
            Refresh::Reloaded => {
                last_refusal.clear();
                tracing::info!(file = ?security.policy.path(), "policy file changed: its rules are in force");
            }
            Refresh::Refused(e) if e != last_refusal => {
                tracing::error!("{e}; the rules in force stay as they were");
                last_refusal = e;
            }
            Refresh::Refused(_) => {}
        }
    }
}
