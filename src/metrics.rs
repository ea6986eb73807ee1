//! What the service counts, for Prometheus (`GET /metrics`, text format):
//! requests by matched route, method and status with latency histograms;
//! the database pool; the candidate snapshot's reloads and the change-log
//! rows applied; candidates generated and returned; allocation retries and
//! conflicts; deployments, admission rounds, evictions and usage reports.
//! Labels carry no uuids and name no project (the endpoint needs no
//! token: the fair queue's busiest projects are shown by rank only), so
//! the series stay few and say nothing of tenants. One process-wide set,
//! as Prometheus scrapes one process at a time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;

/// A request's matched route (`/resource_providers/:uuid`, or
/// `unmatched`), method and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route pattern.
    pub route: String,
    /// The HTTP method.
    pub method: String,
    /// The status code.
    pub status: u16,
}

/// A route and method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route pattern.
    pub route: String,
    /// The HTTP method.
    pub method: String,
}

/// A state of the database pool: `open`, `idle`, `max`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolState {
    /// The state's name.
    pub state: String,
}

/// How something ended: `placed`, `refused`, `invalid`, `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    /// The outcome's name.
    pub outcome: String,
}

/// A project of the fair queue by its rank among the few with the most
/// pending requests ("1" the busiest): `/metrics` is served without a
/// token, so it names no tenant; `GET /queue` and `/fairness/shares`
/// (with their policy) say who.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RankLabel {
    /// 1 for the project with the most pending requests.
    pub rank: String,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// Every series.
pub struct Metrics {
    /// Requests answered.
    pub requests: Family<RequestLabels, Counter>,
    /// Their latency.
    pub latency: HistogramFamily,
    /// Database connections open and idle, and the pool's cap (set at scrape).
    pub pool: Family<PoolState, Gauge>,
    /// Callers waiting for a database connection now.
    pub pool_waiting: Gauge,
    /// Connections the pool may hold: `--db-max-connections`, or fewer
    /// when PostgreSQL has room for fewer (`db::pool_fit`).
    pub pool_budget: Gauge,
    /// The database's clock minus this process's (`clock`).
    pub clock_offset_ms: Gauge,
    /// Full reloads of the candidate snapshot.
    pub snapshot_reloads: Counter,
    /// Providers re-read from the change log into the snapshot.
    pub snapshot_providers_patched: Counter,
    /// Windows of allocations alone added to the snapshot as units.
    pub snapshot_usage_patches: Counter,
    /// Refreshes of the node states on a large deployment's announcement.
    pub node_refreshes: Counter,
    /// Candidates the solver generated.
    pub candidates_generated: Counter,
    /// Allocation requests returned to clients.
    pub candidates_returned: Counter,
    /// Writes run again after a lost race.
    pub write_retries: Counter,
    /// Writes that still lost after their retries (409 concurrent update).
    pub write_conflicts: Counter,
    /// Claims written by one statement shared with other claims.
    pub claims_together: Counter,
    /// Single deployments written by one transaction shared with others.
    pub deployments_together: Counter,
    /// Searches served by a read shared with other searches.
    pub searches_together: Counter,
    /// Searches answered by a solve begun ahead of their turn.
    pub searches_solved_ahead: Counter,
    /// Solves begun ahead of their turn and thrown away (the turn found
    /// the snapshot or the names changed).
    pub solves_ahead_discarded: Counter,
    /// Deployments by outcome.
    pub deployments: Family<Outcome, Counter>,
    /// Admission rounds run.
    pub admission_rounds: Counter,
    /// Pending queued requests, as the round leader last counted them
    /// (other processes keep 0: take the maximum across processes).
    pub queue_pending: Gauge,
    /// Pending queued requests of the projects with the most (a few
    /// series, however many projects there are).
    pub queue_pending_by_project: Family<RankLabel, Gauge>,
    /// The weighted dominant shares of the projects with the largest, as
    /// the last round left them (by rank, as the pending gauge).
    pub queue_share_by_project: Family<RankLabel, Gauge<f64, AtomicU64>>,
    /// Requests the last round that admitted any admitted, of the
    /// projects it admitted the most for (by rank).
    pub queue_admitted_by_project: Family<RankLabel, Gauge>,
    /// Consumers advised for removal now, of the projects most advised
    /// against (by rank).
    pub preemption_advised_by_project: Family<RankLabel, Gauge>,
    /// Consumers the service removed, following advice to projects that
    /// enforce preemption (each also a `GET /preemptions?state=enforced`
    /// event and a log line).
    pub preemptions_enforced: Counter,
    /// Preempted requests queued again (`requeue: true`).
    pub queue_requeued: Counter,
    /// Seconds from submission to admission of queued requests.
    pub queue_wait: Histogram,
    /// 1 while this process leads the fair queue's rounds.
    pub queue_leader: Gauge,
    /// Rounds over the fair queue run by this process.
    pub queue_rounds: Counter,
    /// Their duration, decision and commit.
    pub queue_round_duration: Histogram,
    /// Evictions recorded by node agents.
    pub evictions: Counter,
    /// Usage reports accepted.
    pub usage_reports: Counter,
    registry: Registry,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Projects shown by rank in `placement_queue_pending_by_project`.
pub const QUEUE_TOP_PROJECTS: i64 = RANKED as i64;

/// Projects shown by rank in every per-project family.
const RANKED: usize = 10;

impl RankLabel {
    fn of(rank: u32) -> Self {
        RankLabel {
            rank: rank.to_string(),
        }
    }
}

/// The largest `RANKED` of `counts` (positive ones), largest first.
fn top_counts(counts: impl IntoIterator<Item = i64>) -> Vec<i64> {
    let mut top: Vec<i64> = counts.into_iter().filter(|n| *n > 0).collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    top.truncate(RANKED);
    top
}

/// A per-project family set to `values` by rank (1: the first); the
/// projects no longer among them disappear.
fn set_ranked(family: &Family<RankLabel, Gauge>, values: &[i64]) {
    family.clear();
    for (rank, n) in (1..).zip(values) {
        family.get_or_create(&RankLabel::of(rank)).set(*n);
    }
}

impl Metrics {
    /// Sets the per-project gauge to the busiest projects; those no longer
    /// among them disappear (the total is `placement_queue_pending`).
    pub fn set_pending_by_project(&self, top: &[(String, i64)]) {
        let counts: Vec<i64> = top.iter().map(|(_, n)| *n).collect();
        set_ranked(&self.queue_pending_by_project, &counts);
    }

    /// Sets the per-project share gauge from every project's share.
    pub fn set_share_by_project(&self, shares: impl IntoIterator<Item = f64>) {
        let mut top: Vec<f64> = shares.into_iter().filter(|s| s.is_finite()).collect();
        top.sort_by(|a, b| b.total_cmp(a));
        top.truncate(RANKED);
        self.queue_share_by_project.clear();
        for (rank, share) in (1..).zip(top) {
            self.queue_share_by_project
                .get_or_create(&RankLabel::of(rank))
                .set(share);
        }
    }

    /// Sets the last round's admissions by project from each project's count.
    pub fn set_admitted_by_project(&self, counts: impl IntoIterator<Item = i64>) {
        set_ranked(&self.queue_admitted_by_project, &top_counts(counts));
    }

    /// Sets the advised victims by project from each project's count.
    pub fn set_advised_by_project(&self, counts: impl IntoIterator<Item = i64>) {
        set_ranked(&self.preemption_advised_by_project, &top_counts(counts));
    }

    fn new() -> Self {
        let mut m = Metrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            pool: Family::default(),
            pool_waiting: Gauge::default(),
            pool_budget: Gauge::default(),
            clock_offset_ms: Gauge::default(),
            snapshot_reloads: Counter::default(),
            snapshot_providers_patched: Counter::default(),
            snapshot_usage_patches: Counter::default(),
            node_refreshes: Counter::default(),
            candidates_generated: Counter::default(),
            candidates_returned: Counter::default(),
            write_retries: Counter::default(),
            write_conflicts: Counter::default(),
            claims_together: Counter::default(),
            deployments_together: Counter::default(),
            searches_together: Counter::default(),
            searches_solved_ahead: Counter::default(),
            solves_ahead_discarded: Counter::default(),
            deployments: Family::default(),
            admission_rounds: Counter::default(),
            queue_pending: Gauge::default(),
            queue_pending_by_project: Family::default(),
            queue_share_by_project: Family::default(),
            queue_admitted_by_project: Family::default(),
            preemption_advised_by_project: Family::default(),
            preemptions_enforced: Counter::default(),
            queue_requeued: Counter::default(),
            // 1 ms to about 35 minutes.
            queue_wait: Histogram::new(exponential_buckets(0.001, 2.0, 22)),
            queue_leader: Gauge::default(),
            queue_rounds: Counter::default(),
            queue_round_duration: latency_histogram(),
            evictions: Counter::default(),
            usage_reports: Counter::default(),
            registry: Registry::with_prefix("placement"),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "http_requests",
            "Requests answered, by matched route, method and status",
            self.requests.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "Request latency by matched route and method",
            self.latency.clone(),
        );
        r.register(
            "db_pool_connections",
            "Database connections: open, idle, max",
            self.pool.clone(),
        );
        r.register(
            "db_pool_waiting",
            "Callers waiting for a database connection",
            self.pool_waiting.clone(),
        );
        r.register(
            "db_pool_budget",
            "Connections the pool may hold: --db-max-connections, or fewer when PostgreSQL has room for fewer",
            self.pool_budget.clone(),
        );
        r.register(
            "clock_offset_milliseconds",
            "The database's clock minus this process's; times are taken from the database's clock",
            self.clock_offset_ms.clone(),
        );
        r.register(
            "write_retries",
            "Writes run again after a lost race",
            self.write_retries.clone(),
        );
        r.register(
            "write_conflicts",
            "Writes that lost every retry (409 concurrent update)",
            self.write_conflicts.clone(),
        );
        r.register(
            "claims_together",
            "Claims written by one statement shared with other claims",
            self.claims_together.clone(),
        );
        r.register(
            "deployments_together",
            "Single deployments written by one transaction shared with others",
            self.deployments_together.clone(),
        );
        self.register_search();
        self.register_work();
    }

    /// The series of the candidate engine: its snapshot, and its searches
    /// and their reads.
    fn register_search(&mut self) {
        let r = &mut self.registry;
        r.register(
            "snapshot_reloads",
            "Full reloads of the candidate snapshot",
            self.snapshot_reloads.clone(),
        );
        r.register(
            "snapshot_providers_patched",
            "Providers re-read into the candidate snapshot from the change log",
            self.snapshot_providers_patched.clone(),
        );
        r.register(
            "snapshot_usage_patches",
            "Windows in which only allocations changed, added to the candidate snapshot as the units the change log records",
            self.snapshot_usage_patches.clone(),
        );
        r.register(
            "node_refreshes",
            "Refreshes of the snapshot and deployment node states when another deployment announced it changed many nodes",
            self.node_refreshes.clone(),
        );
        r.register(
            "candidates_generated",
            "Allocation candidates the solver generated",
            self.candidates_generated.clone(),
        );
        r.register(
            "candidates_returned",
            "Allocation requests returned to clients",
            self.candidates_returned.clone(),
        );
        r.register(
            "searches_together",
            "Candidate searches served by one read shared with other searches",
            self.searches_together.clone(),
        );
        r.register(
            "searches_solved_ahead",
            "Candidate searches answered by a solve begun on the cached snapshot while their read ran",
            self.searches_solved_ahead.clone(),
        );
        r.register(
            "solves_ahead_discarded",
            "Candidate solves begun ahead of their read and thrown away: the read found the snapshot or the names changed",
            self.solves_ahead_discarded.clone(),
        );
    }

    /// The series of the scheduling work: deployments, rounds, the queue,
    /// colocation.
    fn register_work(&mut self) {
        let r = &mut self.registry;
        r.register(
            "deployments",
            "Deployments by outcome",
            self.deployments.clone(),
        );
        r.register(
            "admission_rounds",
            "Admission rounds run",
            self.admission_rounds.clone(),
        );
        r.register(
            "queue_pending",
            "Pending queued requests (the round leader's count)",
            self.queue_pending.clone(),
        );
        r.register(
            "queue_pending_by_project",
            "Pending queued requests of the ten projects with the most, by rank (1: the most); no project is named",
            self.queue_pending_by_project.clone(),
        );
        r.register(
            "queue_share_by_project",
            "Weighted dominant shares of the ten projects with the largest after the last round, by rank; no project is named",
            self.queue_share_by_project.clone(),
        );
        r.register(
            "queue_admitted_by_project",
            "Requests the last round that admitted any admitted, of the ten projects it admitted the most for, by rank; no project is named",
            self.queue_admitted_by_project.clone(),
        );
        r.register(
            "preemption_advised_by_project",
            "Consumers advised for removal, of the ten projects most advised against, by rank; no project is named",
            self.preemption_advised_by_project.clone(),
        );
        r.register(
            "preemptions_enforced",
            "Consumers the service removed, following preemption advice to projects that enforce it",
            self.preemptions_enforced.clone(),
        );
        r.register(
            "queue_requeued",
            "Preempted requests queued again after their backoff (requeue: true)",
            self.queue_requeued.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Seconds from submission to admission of queued requests",
            self.queue_wait.clone(),
        );
        r.register(
            "queue_leader",
            "1 while this process leads the fair queue's rounds",
            self.queue_leader.clone(),
        );
        r.register(
            "queue_rounds",
            "Rounds over the fair queue run by this process",
            self.queue_rounds.clone(),
        );
        r.register(
            "queue_round_duration_seconds",
            "Duration of rounds over the fair queue, decision and commit",
            self.queue_round_duration.clone(),
        );
        r.register(
            "evictions",
            "Evictions recorded by node agents",
            self.evictions.clone(),
        );
        r.register(
            "usage_reports",
            "Usage reports accepted",
            self.usage_reports.clone(),
        );
    }

    /// Counts one answered request. The labels come from fixed sets, so no
    /// caller can add series: the route is a pattern of the route table
    /// (`unmatched` otherwise) and the method a standard one (`other`
    /// otherwise, such as an extension method of any length).
    pub fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        const METHODS: [&str; 9] = [
            "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
        ];
        let method = METHODS
            .into_iter()
            .find(|m| *m == method)
            .unwrap_or("other");
        // `/resource_providers/{uuid}` is shown `/resource_providers/:uuid`:
        // braces in label values trip up simple exposition parsers.
        let route = if route.is_empty() {
            "unmatched".to_string()
        } else {
            route.replace('{', ":").replace('}', "")
        };
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                method: method.to_string(),
            })
            .observe(seconds);
    }

    /// Counts a deployment's outcome.
    pub fn deployment(&self, outcome: &str) {
        self.deployments
            .get_or_create(&Outcome {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Sets the pool gauges.
    pub fn pool_state(&self, open: u32, idle: usize, max: u32) {
        for (state, n) in [
            ("open", i64::from(open)),
            ("idle", i64::try_from(idle).unwrap_or(i64::MAX)),
            ("max", i64::from(max)),
        ] {
            self.pool
                .get_or_create(&PoolState {
                    state: state.to_string(),
                })
                .set(n);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}
