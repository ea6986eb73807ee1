//! The HTTP server around the router: connection hygiene that a service on
//! an open network needs and `axum::serve` does not give.
//!
//! - A request head must arrive within `header_timeout`, counted from when
//!   the connection opened or its previous response ended, so half-sent
//!   heads and idle keep-alive connections are both closed (hyper's timer).
//!   Bodies are bounded in size and time by the request pipeline.
//! - At most `max_connections` are open. Past that, or when the process
//!   runs out of file descriptors, a connection with no request in flight
//!   is closed to make room: the oldest that never had an answer, else
//!   the least recently answered, so idle sockets can never starve a
//!   working client and a steady keep-alive client keeps its connection.
//!   What may hold a connection busy is bounded elsewhere: bodies are
//!   read only for callers the route admits, a bounded number at once
//!   (`api::middleware::BodyLimits`), and the fair queue's long polls
//!   have a budget of their own.
//! - On shutdown the listener closes, idle connections close, requests in
//!   flight get `grace` to finish, and whatever is left is dropped (which
//!   also cancels candidate searches through their cancel flags).

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tower::ServiceExt;

/// Connection limits and timeouts.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Time for a request head, from connection start or the last response.
    pub header_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Time requests in flight get to finish after shutdown begins.
    pub grace: Duration,
}

/// What a connection has done, as its requests record it.
#[derive(Default)]
struct Activity {
    /// Requests being handled (head read, answer not yet made).
    in_flight: AtomicUsize,
    /// Requests answered.
    served: AtomicU64,
    /// When the last answer was made, in milliseconds since the server
    /// started.
    last_answer_ms: AtomicU64,
}

/// One open connection as the accept loop sees it.
struct Tracked {
    activity: Arc<Activity>,
    abort: AbortHandle,
}

/// Every open connection, oldest first (ids only grow).
#[derive(Default)]
struct Registry {
    open: Mutex<BTreeMap<u64, Tracked>>,
}

impl Registry {
    fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn insert(&self, id: u64, t: Tracked) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, t);
    }

    fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Closes an idle connection (no request in flight) to make room:
    /// first the oldest of those that never had a request answered (a
    /// flood's sockets, half-sent heads), then the one whose last answer
    /// is oldest, so a steady keep-alive client (Nova's) keeps its
    /// connection for as long as anything else can go.
    fn evict_idle(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = || {
            open.iter()
                .filter(|(_, t)| t.activity.in_flight.load(Ordering::Acquire) == 0)
        };
        let victim = idle()
            .find(|(_, t)| t.activity.served.load(Ordering::Acquire) == 0)
            .or_else(|| {
                idle().min_by_key(|(_, t)| t.activity.last_answer_ms.load(Ordering::Acquire))
            })
            .map(|(&id, _)| id);
        match victim.and_then(|id| open.remove(&id)) {
            Some(t) => {
                t.abort.abort();
                true
            }
            None => false,
        }
    }
}

/// Counts a request in flight on its connection for as long as it lives,
/// and records its answer.
struct InFlight {
    activity: Arc<Activity>,
    epoch: std::time::Instant,
}

impl InFlight {
    fn start(activity: &Arc<Activity>, epoch: std::time::Instant) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            activity: activity.clone(),
            epoch,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.last_answer_ms.store(now, Ordering::Release);
        self.activity.served.fetch_add(1, Ordering::AcqRel);
        self.activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Removes a connection from the registry however its task ends
/// (completion, error, or abort by eviction).
struct Deregister(Arc<Registry>, u64);

impl Drop for Deregister {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// A stop asked for by SIGINT or SIGTERM. Listened for from the first
/// moment of `placement serve`, so a signal during start-up is a clean
/// stop too (the default action would kill the process and leave the
/// local PostgreSQL it started running).
#[derive(Debug, Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Takes SIGINT and SIGTERM over from now on.
    pub fn listen() -> std::io::Result<Stop> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let (asked, stop) = watch::channel(false);
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
            let _ = asked.send(true);
        });
        Ok(Stop(stop))
    }

    /// Resolves once a stop is asked for.
    pub async fn asked(mut self) {
        // The sender lives as long as the signal task; if it is gone no
        // stop can come.
        if self.0.wait_for(|asked| *asked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether a stop was asked for already.
    pub fn is_asked(&self) -> bool {
        *self.0.borrow()
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    let epoch = std::time::Instant::now();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        while tasks.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or another transient failure): make
                // room and pause rather than spin.
                tracing::warn!(error = %e, "accept failed");
                registry.evict_idle();
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if registry.len() >= opts.max_connections && !registry.evict_idle() {
            tracing::warn!(
                max = opts.max_connections,
                "connection limit reached with every connection busy; refusing one"
            );
            continue;
        }
        next_id += 1;
        let activity = Arc::new(Activity::default());
        let conn = connection(
            stream,
            app.clone(),
            opts,
            (activity.clone(), epoch),
            stop_rx.clone(),
        );
        let guard = Deregister(registry.clone(), next_id);
        let abort = tasks.spawn(async move {
            let _guard = guard;
            conn.await;
        });
        registry.insert(next_id, Tracked { activity, abort });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let open = registry.len();
    tracing::info!(
        open,
        grace_s = opts.grace.as_secs(),
        "shutting down: draining connections"
    );
    if tokio::time::timeout(opts.grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            left = registry.len(),
            "grace period over; closing what is left"
        );
        tasks.abort_all();
    }
}

/// One connection: HTTP/1.1 with the head timeout, each request counted in
/// flight, and a graceful close when shutdown begins.
async fn connection(
    stream: TcpStream,
    app: Router,
    opts: ServeOptions,
    (activity, epoch): (Arc<Activity>, std::time::Instant),
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    // The client's address, for the request's log line.
    let peer = stream.peer_addr().ok();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let counted = InFlight::start(&activity, epoch);
        let app = app.clone();
        let mut req = req.map(Body::new);
        if let Some(peer) = peer {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        async move {
            let _counted = counted;
            app.oneshot(req).await
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Descriptors kept for everything but client connections: the database
/// pool's sockets are counted apart; this is for log files, the listener,
/// Keystone's and the listener sessions' sockets, and the runtime.
const SPARE_DESCRIPTORS: u64 = 64;

/// Raises this process's soft limit of open files to its hard limit, and
/// returns how many client connections fit beside `pool` database
/// connections (at most `wanted`), saying so in the log. Under systemd's
/// default soft limit of 1,024, 2,000 idle connections left the pool no
/// descriptor ("Too many open files"); now the cap keeps room for it.
pub fn fit_connections(wanted: usize, pool: u32) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft_before = limit.current;
    let soft = match (limit.current, limit.maximum) {
        (Some(current), Some(hard)) if current < hard => {
            let raised = Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => Some(hard),
                Err(_) => Some(current),
            }
        }
        (current, _) => current,
    };
    // None: no limit at all.
    let Some(soft) = soft else { return wanted };
    let room = soft
        .saturating_sub(u64::from(pool))
        .saturating_sub(SPARE_DESCRIPTORS);
    let fits = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    let cap = wanted.min(fits);
    if cap < wanted {
        tracing::warn!(
            open_files = soft,
            pool,
            wanted,
            cap,
            "--http-max-connections lowered to what the open-files limit leaves beside the database pool (raise LimitNOFILE to keep it)"
        );
    } else {
        tracing::info!(
            open_files = soft,
            open_files_before = ?soft_before,
            pool,
            connections = cap,
            "descriptors: client connections and the database pool fit the open-files limit"
        );
    }
    cap
}
