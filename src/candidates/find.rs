//! The candidate engine's one entry point: a typed search → its names and
//! provider data read (the [`ProviderRead`] seam) → names resolved →
//! the bounded solver (the [`SolvingStep`] seam), which also writes the
//! answer with the caller's writer when given one (`answer.rs`). A large search may start solving on a guess of its read,
//! and keep that answer only if the read confirms it (`solve_ahead.rs`).
//! Nothing here knows how the seams are implemented (`candidates::speed`).
//! Every caller hands [`run`] a typed [`Search`]: `GET
//! /allocation_candidates` and explain parse theirs from Placement's query
//! grammar at the API edge (`api::allocation_candidates::query`),
//! deployments build theirs.

use super::answer::{AnswerWriter, Asked, Rendering};
pub use super::engine::Engine;
use super::engine::{Job, ProviderRead, SolvingStep};
use super::low_priority_filter;
use super::names::{Ids, Names};
use super::search::{CandidateQuery, GroupPolicy, Scope, Search};
use super::snapshot::Snapshot;
use super::solve::{self, Candidate, Group, Limits};
use super::solve_ahead::SolveAhead;
use crate::config::{GenerationStrategy, Settings};
use crate::db::{candidates as db, fairness};
use crate::error::{Error, Result};
use crate::sched::colocation::CpuMem;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The outcome of a search.
pub struct Candidates {
    /// The provider data the search used.
    pub snap: Arc<Snapshot>,
    /// The candidates, in generation order.
    pub candidates: Vec<Candidate>,
    /// The resolved request (None: an unknown `in_tree` matches nothing).
    pub request: Option<solve::Request>,
    /// The search stopped at its step budget.
    pub cut: bool,
    /// How fair sharing and the load filter changed the providers' stock
    /// for this query.
    pub adjusted: Adjustments,
    /// The trees the search looked at.
    pub visited: Visited,
}

/// The trees a search looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visited {
    /// Every tree.
    EveryTree,
    /// These trees, by their roots' provider ids (in id order).
    Trees(Vec<i64>),
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

/// Runs a typed search: its candidates.
pub async fn run(engine: &Engine<'_>, search: &Search) -> Result<Candidates> {
    Ok(search_and_write(engine, search, None).await?.0)
}

/// Runs a typed search and writes its answer with the caller's `writer`,
/// beside the solve: its candidates and the answer.
pub async fn run_writing(
    engine: &Engine<'_>,
    search: &Search,
    writer: &AnswerWriter,
) -> Result<(Candidates, String)> {
    let (found, answer) = search_and_write(engine, search, Some(writer)).await?;
    let answer = answer.ok_or_else(|| Error::internal("the answer's writer did not run"))?;
    Ok((found, answer))
}

/// Runs a typed search, and writes its answer when given a writer.
async fn search_and_write(
    engine: &Engine<'_>,
    search: &Search,
    writer: Option<&AnswerWriter>,
) -> Result<(Candidates, Option<String>)> {
    let parsed = &search.query;
    low_priority_filter::check_classes(
        search.priority,
        parsed
            .groups
            .iter()
            .flat_map(|g| g.resources.iter().map(|(c, _)| c)),
    )?;
    let names = Names::of(parsed);
    let mut limits = limits_of(engine.settings, search);
    let mut ahead = match search.scope {
        Scope::EveryTree => solve_ahead(engine, search, &names, &limits, writer),
        Scope::ChangedSince(_) => None,
    };
    let read = match ahead.as_mut() {
        Some(ahead) => ahead.beside(read(engine, &names, search)).await?,
        None => read(engine, &names, search).await?,
    };
    let (snap, ids, adjusted) = (read.snap, read.ids, read.adjusted);
    let visited = visited_of(&snap, &search.scope);
    if let Visited::Trees(roots) = &visited {
        let at = roots
            .iter()
            .filter_map(|id| snap.index.by_id.get(id).copied());
        limits.only_roots = Some(Arc::new(at.collect()));
    }
    let rendering = rendering_of(writer, search, &ids);
    let mut found = Candidates {
        snap,
        candidates: Vec::new(),
        request: None,
        cut: false,
        adjusted,
        visited,
    };
    let Some(request) = solver_request(&found.snap, parsed, &ids) else {
        // An unknown in_tree matches nothing.
        let answer = rendering.map(|r| r.render(&found.snap, &[]));
        return Ok((found, answer));
    };
    found.request = Some(request.clone());
    let solved_ahead = match ahead {
        Some(ahead) => ahead.answer_for(&found.snap, &ids).await,
        None => None,
    };
    let solved = match solved_ahead {
        Some(solved) => solved?,
        None => {
            let job = Job {
                snap: found.snap.clone(),
                request,
                limits,
                rendering,
            };
            engine.solving.solve(job).await?
        }
    };
    (found.candidates, found.cut) = (solved.candidates, solved.cut);
    crate::metrics::metrics()
        .candidates_generated
        .inc_by(u64::try_from(found.candidates.len()).unwrap_or(0));
    Ok((found, solved.body))
}

/// A solve of `search` begun on the read's guess, when there is one and
/// the search is large enough to pay for it; never for batch work (its
/// read withholds what the guess does not).
fn solve_ahead<'a>(
    engine: &Engine<'a>,
    search: &Search,
    names: &Names,
    limits: &Limits,
    writer: Option<&AnswerWriter>,
) -> Option<SolveAhead<'a>> {
    if search.priority.low() {
        return None;
    }
    let (snap, ids) = engine.read.guess(names)?;
    let job = Job {
        request: solver_request(&snap, &search.query, &ids)?,
        snap: snap.clone(),
        limits: limits.clone(),
        rendering: rendering_of(writer, search, &ids),
    };
    let solving: &'a dyn SolvingStep = engine.solving;
    solving
        .pays_ahead(&job)
        .then(|| SolveAhead::new(snap, ids, solving.solve(job)))
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
        only_roots: None,
    }
}

/// The trees a search in `scope` looks at on `snap`: the roots of the
/// providers changed since the scope's mark, in id order.
fn visited_of(snap: &Snapshot, scope: &Scope) -> Visited {
    let Scope::ChangedSince(mark) = scope else {
        return Visited::EveryTree;
    };
    let Some(changed) = snap.changed_since(mark) else {
        return Visited::EveryTree;
    };
    let mut roots: Vec<i64> = changed
        .iter()
        .filter_map(|id| snap.index.by_id.get(id))
        .map(|&i| snap.nodes[snap.nodes[i].root].id)
        .collect();
    roots.sort_unstable();
    roots.dedup();
    Visited::Trees(roots)
}

/// How to write the answer, when the caller gave a writer.
fn rendering_of(writer: Option<&AnswerWriter>, search: &Search, ids: &Ids) -> Option<Rendering> {
    writer.cloned().map(|writer| Rendering {
        asked: Asked {
            suffixes: suffixes_of(&search.query),
            requested: requested_of(ids),
        },
        writer,
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

/// The read before the solve: shared when it applies (a production
/// search, no reservation), else in a transaction of the search's own.
/// Unknown names are the same 400s either way.
async fn read(engine: &Engine<'_>, names: &Names, search: &Search) -> Result<Read> {
    if !search.priority.low() {
        let reads: &dyn ProviderRead = engine.read;
        if let Some(shared) = reads.shared(engine.pool, names).await? {
            let ids = names.resolve(&shared.named)?;
            if let Some(snap) = shared.snap.clone() {
                let adjusted = Adjustments::default();
                return Ok(Read {
                    snap,
                    ids,
                    adjusted,
                });
            }
        }
    }
    read_in_snapshot(engine, names, search).await
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
    pub snap: Arc<Snapshot>,
    /// The ids of the search's names.
    pub ids: Ids,
    /// What the adjustments withheld.
    pub adjusted: Adjustments,
}

/// The full read, in one repeatable-read transaction: names, the snapshot
/// brought up to date, other projects' unused reservations withheld, and
/// for batch work the load filter.
async fn read_in_snapshot(engine: &Engine<'_>, names: &Names, search: &Search) -> Result<Read> {
    let mut tx = db::begin_snapshot(engine.pool).await?;
    let named = db::read_names(&mut tx, &names.classes, &names.traits, &names.aggregates).await?;
    let ids = names.resolve(&named)?;
    let snap = engine.read.snapshots().at(&mut tx, named.seen).await?;
    let withheld = if named.reservations {
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
