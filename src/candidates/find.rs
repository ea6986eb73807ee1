//! The candidate engine's one entry point: a query (as `GET
//! /allocation_candidates` pairs) → names resolved against the database →
//! this process's snapshot → the bounded solver, off the async workers (small
//! searches in place, see `cpu`), which renders the answer when asked. A
//! large search may start solving on the cached snapshot while its names
//! and snapshot are read, and keep that answer only if the read confirms
//! both (see `ahead`).
//! `GET /allocation_candidates` calls [`find`]; deployments and explain call
//! [`run`] with a typed [`Search`].

use super::ahead::{Ahead, Solved};
use super::groups::{self, CandidateQuery, GroupPolicy};
use super::low_priority_filter;
use super::query_grammar::Version;
use super::render::{Rendering, Shape};
use super::rest::{Ids, Names, Reads};
use super::snapshot::Snapshot;
use super::snapshot_cache::SnapshotCache;
use super::solve::{self, Candidate, Group, Limits, Stopped};
use crate::config::{GenerationStrategy, Settings};
use crate::db::{candidates as db, fairness};
use crate::error::{Error, Result};
use crate::sched::colocation::CpuMem;
use crate::types::PriorityClass;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// What a search needs from the process.
pub struct Engine<'a> {
    /// The database.
    pub pool: &'a crate::db::Pool,
    /// This process's provider snapshot.
    pub cache: &'a Arc<SnapshotCache>,
    /// This process's searches at rest waiting for a turn.
    pub reads: &'a Reads,
    /// Limits and generation order.
    pub settings: &'a Settings,
    /// One permit per core for CPU-heavy work.
    pub cpu: &'a Semaphore,
}

/// The outcome of a search.
pub struct Candidates {
    /// The provider data the search used.
    pub snap: Arc<Snapshot>,
    /// The candidates, in generation order.
    pub candidates: Vec<Candidate>,
    /// Group suffixes, in the candidates' mapping order.
    pub suffixes: Vec<String>,
    /// Class ids requested by any group.
    pub requested: BTreeSet<i32>,
    /// The resolved request (None: an unknown `in_tree` matches nothing).
    pub request: Option<solve::Request>,
    /// The search stopped at its step budget.
    pub cut: bool,
    /// How fair sharing and the load filter changed the providers' stock
    /// for this query.
    pub adjusted: Adjustments,
    /// The answer's JSON, when the search asked for it rendered.
    pub body: Option<String>,
}

/// What the search withheld from the shared snapshot for this query.
#[derive(Debug, Clone, Default)]
pub struct Adjustments {
    /// Stock held back for other projects' unused reservations:
    /// (provider id, class id) → units.
    pub withheld: HashMap<(i64, i32), i64>,
    /// Providers the load filter gives no low-priority work, and why.
    pub refused: HashMap<i64, low_priority_filter::LoadRefusal>,
}

/// Runs a candidates query. `max_results` caps the results (with the
/// query's own `limit`).
pub async fn find(
    engine: &Engine<'_>,
    pairs: &[(String, String)],
    version: Version,
    max_results: Option<usize>,
    shape: Shape,
) -> Result<Candidates> {
    let search = Search {
        render: Some(shape),
        ..search_of(pairs, version, max_results)?
    };
    run(engine, &search).await
}

/// The typed search of a query's pairs (single-valued parameters by their
/// last value, the one the policy target read).
pub fn search_of(
    pairs: &[(String, String)],
    version: Version,
    max_results: Option<usize>,
) -> Result<Search> {
    let parsed = groups::parse(pairs, version).map_err(|e| match e.code {
        Some(c) => Error::invalid(e.message).code(c),
        None => Error::invalid(e.message),
    })?;
    Ok(Search {
        query: parsed,
        priority: low_priority_filter::priority_of(pairs)?,
        project: pairs
            .iter()
            .rev()
            .find(|(k, _)| k == "project_id")
            .map(|(_, v)| v.clone()),
        version,
        max_results,
        one_per_anchor: false,
        render: None,
    })
}

/// A typed search: what a service (deployments) asks the engine for
/// without going through a query string.
#[derive(Debug, Clone)]
pub struct Search {
    /// The groups and their filters.
    pub query: CandidateQuery,
    /// prod, or a low-priority class held to the batch classes.
    pub priority: PriorityClass,
    /// The project whose reservations it may use.
    pub project: Option<String>,
    /// The microversion whose semantics apply (nesting from 1.29).
    pub version: Version,
    /// A cap on the results, with the query's own `limit`.
    pub max_results: Option<usize>,
    /// Leave each tree at its first candidate (explain's question: which
    /// trees fit, not every way they do).
    pub one_per_anchor: bool,
    /// Render the answer in this shape too (in [`Candidates::body`]),
    /// with the solving: one job where two would each change threads.
    pub render: Option<Shape>,
}

/// Runs a typed search.
pub async fn run(engine: &Engine<'_>, search: &Search) -> Result<Candidates> {
    let parsed = &search.query;
    low_priority_filter::check_classes(
        search.priority,
        parsed
            .groups
            .iter()
            .flat_map(|g| g.resources.iter().map(|(c, _)| c)),
    )?;
    let names = Names::of(parsed);
    let limits = limits_of(engine.settings, search);
    let mut ahead = start_ahead(engine, search, &names, &limits);
    let read = match ahead.as_mut() {
        Some(ahead) => ahead.beside(read(engine, &names, search)).await?,
        None => read(engine, &names, search).await?,
    };
    let (snap, ids, adjusted) = (read.snap, read.ids, read.adjusted);
    let rendering = rendering_of(search, &ids);
    let mut found = Candidates {
        snap,
        candidates: Vec::new(),
        suffixes: suffixes_of(parsed),
        requested: requested_of(&ids),
        request: None,
        cut: false,
        adjusted,
        body: None,
    };
    let Some(request) = solver_request(&found.snap, parsed, &ids) else {
        // An unknown in_tree matches nothing.
        found.body = rendering.map(|r| r.render(&found.snap, &[]));
        return Ok(found);
    };
    found.request = Some(request.clone());
    let solved_ahead = match ahead {
        Some(ahead) => ahead.answer_for(&found.snap, &ids).await,
        None => None,
    };
    (found.candidates, found.cut, found.body) = match solved_ahead {
        Some(solved) => solved?,
        None => {
            let snap = found.snap.clone();
            solve_off_the_workers(engine.cpu, snap, request, limits, rendering).await?
        }
    };
    crate::metrics::metrics()
        .candidates_generated
        .inc_by(u64::try_from(found.candidates.len()).unwrap_or(0));
    Ok(found)
}

/// How much a search produces, and in which order.
fn limits_of(settings: &Settings, search: &Search) -> Limits {
    Limits {
        max_results: match (search.query.limit, search.max_results) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        },
        breadth_first: settings.allocation_candidates_generation_strategy
            == GenerationStrategy::BreadthFirst,
        nested_aware: search.version.at_least(1, 29),
        shuffle_seed: settings.randomize_allocation_candidates.then(rand::random),
        max_steps: settings.allocation_candidates_max_steps,
        cancel: None,
        one_per_anchor: search.one_per_anchor,
    }
}

/// How to render the answer, when the search asks for it rendered.
fn rendering_of(search: &Search, ids: &Ids) -> Option<Rendering> {
    search.render.map(|shape| Rendering {
        suffixes: suffixes_of(&search.query),
        requested: requested_of(ids),
        shape,
    })
}

/// Group suffixes, in the candidates' mapping order.
fn suffixes_of(q: &CandidateQuery) -> Vec<String> {
    q.groups.iter().map(|g| g.suffix.clone()).collect()
}

/// Class ids requested by any group.
fn requested_of(ids: &Ids) -> BTreeSet<i32> {
    ids.class.values().copied().collect()
}

/// A solve begun on the settled cache with guessed ids, while the search's
/// turn reads (see `ahead`); None when the cache moved at the last turn,
/// a name is new to this process, a reservation exists, the search is
/// batch work (its read withholds) or small.
fn start_ahead<'a>(
    engine: &Engine<'a>,
    search: &Search,
    names: &Names,
    limits: &Limits,
) -> Option<Ahead<'a>> {
    if search.priority.low() {
        return None;
    }
    let snap = engine.cache.settled()?;
    if super::solving_threads::is_small(limits, &snap) {
        return None;
    }
    let ids = engine.reads.guess(names)?;
    let request = solver_request(&snap, &search.query, &ids)?;
    let rendering = rendering_of(search, &ids);
    let cpu: &'a Semaphore = engine.cpu;
    let job = solve_off_the_workers(cpu, snap.clone(), request, limits.clone(), rendering);
    Some(Ahead::new(snap, ids, job))
}

/// The read before the solve: at rest when it applies, else in a snapshot.
async fn read(engine: &Engine<'_>, names: &Names, search: &Search) -> Result<Read> {
    match read_at_rest(engine, names, search.priority).await? {
        Some(read) => Ok(read),
        None => read_in_snapshot(engine, names, search).await,
    }
}

/// The batch CPU (milli) and memory (MB) a query asks for, over all its
/// groups: what the load filter estimates it at.
fn batch_request(q: &CandidateQuery) -> CpuMem {
    q.groups
        .iter()
        .flat_map(|g| &g.resources)
        .fold(CpuMem::default(), |t, (class, n)| match class.as_str() {
            "BATCH_VCPU_MILLI" => t.plus(CpuMem::new(*n, 0)),
            "BATCH_MEMORY_MB" => t.plus(CpuMem::new(0, *n)),
            _ => t,
        })
}

/// What a search reads from the database before it solves.
struct Read {
    /// The providers, adjusted for reservations and the load filter.
    snap: Arc<Snapshot>,
    ids: Ids,
    adjusted: Adjustments,
}

/// The read at rest: no transaction. The names come from one statement,
/// shared with the searches waiting beside it (see `rest`), and the cached
/// providers from a snapshot that sees all that statement saw (brought
/// forward by one more statement when it is behind). None when it does
/// not apply (a project holds a reservation, batch work, only a full load
/// would bring the cache forward, or the shared turn failed for another
/// reason than a lost database, which is a 503); unknown names are the
/// same 400s either way.
async fn read_at_rest(
    engine: &Engine<'_>,
    names: &Names,
    priority: PriorityClass,
) -> Result<Option<Read>> {
    if priority.low() {
        return Ok(None);
    }
    let Some(read) = engine
        .reads
        .read(engine.pool, engine.cache, names.clone())
        .await?
    else {
        // The shared turn failed: the full read says why.
        return Ok(None);
    };
    let ids = names.resolve(&read.look)?;
    Ok(read.snap.clone().map(|snap| Read {
        snap,
        ids,
        adjusted: Adjustments::default(),
    }))
}

/// The full read, in one repeatable-read transaction: names, the snapshot
/// brought up to date, other projects' unused reservations withheld, and
/// for batch work the load filter.
async fn read_in_snapshot(engine: &Engine<'_>, names: &Names, search: &Search) -> Result<Read> {
    let mut tx = db::begin_snapshot(engine.pool).await?;
    let look = db::look(&mut tx, &names.classes, &names.traits, &names.aggregates).await?;
    let ids = names.resolve(&look)?;
    let snap = engine.cache.current_at(&mut tx, look.seen).await?;
    let withheld = if look.reservations {
        fairness::unused_reservations(&mut tx, None, search.project.as_deref()).await?
    } else {
        HashMap::new()
    };
    let snap = if withheld.is_empty() {
        snap
    } else {
        Arc::new(snap.withholding(&withheld))
    };
    let (snap, refused) = if search.priority.low() {
        let (restricted, refused) =
            low_priority_filter::restrict(&mut tx, &snap, batch_request(&search.query)).await?;
        (Arc::new(restricted), refused)
    } else {
        (snap, HashMap::new())
    };
    tx.commit().await?;
    Ok(Read {
        snap,
        ids,
        adjusted: Adjustments { withheld, refused },
    })
}

/// The parsed query over snapshot ids; None when an `in_tree` names no
/// provider (the answer is then empty).
fn solver_request(snap: &Snapshot, q: &CandidateQuery, ids: &Ids) -> Option<solve::Request> {
    let mut groups = Vec::with_capacity(q.groups.len());
    for g in &q.groups {
        let in_tree = match g.in_tree {
            None => None,
            Some(u) => Some(snap.by_uuid(&u)?),
        };
        groups.push(Group {
            suffix: g.suffix.clone(),
            resources: g
                .resources
                .iter()
                .map(|(c, n)| (ids.class[c], *n))
                .collect(),
            required: g
                .traits
                .required
                .iter()
                .map(|set| ids.traits(set))
                .collect(),
            forbidden: ids.traits(&g.traits.forbidden),
            member_of: g.member_of.any_of.iter().map(|set| ids.aggs(set)).collect(),
            forbidden_aggs: ids.aggs(&g.member_of.forbidden),
            in_tree,
        });
    }
    let suffix_index = |s: &String| groups.iter().position(|g| &g.suffix == s).unwrap_or(0);
    Some(solve::Request {
        same_subtree: q
            .same_subtree
            .iter()
            .map(|set| set.iter().map(suffix_index).collect())
            .collect(),
        root_required: q
            .root_required
            .required
            .iter()
            .flat_map(|s| ids.traits(s))
            .collect(),
        root_forbidden: ids.traits(&q.root_required.forbidden),
        isolate: q.group_policy == Some(GroupPolicy::Isolate),
        groups,
    })
}

/// Solves (and renders, when asked) in place when the search is small,
/// else on the blocking pool, where a client that goes away stops it (see
/// `cpu`).
async fn solve_off_the_workers(
    cpu: &Semaphore,
    snap: Arc<Snapshot>,
    request: solve::Request,
    limits: Limits,
    rendering: Option<Rendering>,
) -> Result<Solved> {
    let started = std::time::Instant::now();
    let job = super::solving_threads::Job {
        snap,
        request,
        limits,
        rendering,
    };
    let (solution, body) =
        super::solving_threads::solve(cpu, job, super::solving_threads::SMALL_STEPS).await?;
    let solve_ms = started.elapsed().as_secs_f64() * 1e3;
    match solution.stopped {
        Some(Stopped::Budget) => tracing::warn!(
            solve_ms,
            steps = solution.steps,
            candidates = solution.candidates.len(),
            "allocation candidates cut at the step budget (allocation_candidates_max_steps)"
        ),
        Some(Stopped::Cancelled) => tracing::info!(solve_ms, "allocation candidates cancelled"),
        None => tracing::debug!(
            solve_ms,
            steps = solution.steps,
            candidates = solution.candidates.len(),
            "solved"
        ),
    }
    let cut = solution.stopped == Some(Stopped::Budget);
    Ok((solution.candidates, cut, body))
}
