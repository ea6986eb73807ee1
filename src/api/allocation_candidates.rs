//! `GET /allocation_candidates` (1.10+): parse → snapshot → solve → render,
//! the four steps of Placement's engine. [`search`] is also the first step
//! of a deployment.

use super::extract::QueryPairs;
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use crate::candidates::groups::{self, GroupPolicy};
use crate::candidates::render::{render, Shape};
use crate::candidates::snapshot::Snapshot;
use crate::candidates::solve::{self, Candidate, Group, Limits, Stopped};
use crate::db::{candidates as db, classes, traits};
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::extract::State;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Sets its flag when dropped: the request future that owns it is dropped
/// when the client goes away, and the solver, running on a blocking thread,
/// reads the flag and stops.
pub struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The outcome of a candidates search.
pub struct Search {
    /// The provider data the search used.
    pub snap: Arc<Snapshot>,
    /// The candidates, in generation order.
    pub candidates: Vec<Candidate>,
    /// Group suffixes, in the candidates' mapping order.
    pub suffixes: Vec<String>,
    /// Class ids requested by any group.
    pub requested: BTreeSet<i32>,
}

/// Runs a candidates query given as query pairs. `max_results` caps the
/// results (the caller folds in `limit` and `max_allocation_candidates`).
pub async fn search(
    st: &AppState,
    pairs: &[(String, String)],
    mv: Microversion,
    max_results: Option<usize>,
) -> ApiResult<Search> {
    let parsed = groups::parse(pairs, (mv.major, mv.minor)).map_err(|e| match e.code {
        Some(c) => ApiError::bad_request(e.message).code(c),
        None => ApiError::bad_request(e.message),
    })?;
    let mut tx = db::begin_snapshot(&st.pool).await?;
    let class_names: Vec<String> = parsed
        .groups
        .iter()
        .flat_map(|g| g.resources.iter().map(|(c, _)| c.clone()))
        .collect();
    let class_ids: HashMap<String, i32> = {
        let ids = classes::ids(&mut tx, &class_names).await?.map_err(|rc| {
            ApiError::bad_request(format!(
                "Invalid resource class in resources parameter: No such resource class {rc}."
            ))
        })?;
        class_names.iter().cloned().zip(ids).collect()
    };
    let mut trait_names: BTreeSet<String> = parsed.root_required.names();
    for g in &parsed.groups {
        trait_names.extend(g.traits.names());
    }
    let trait_names: Vec<String> = trait_names.into_iter().collect();
    let (found, missing) = traits::resolve(&mut tx, &trait_names).await?;
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!(
            "No such trait(s): {}.",
            missing.join(", ")
        )));
    }
    let trait_id: HashMap<String, i32> = found.into_iter().collect();
    let tid = |names: &BTreeSet<String>| {
        names
            .iter()
            .filter_map(|n| trait_id.get(n).copied())
            .collect::<Vec<_>>()
    };
    let agg_uuids: Vec<uuid::Uuid> = parsed
        .groups
        .iter()
        .flat_map(|g| {
            g.member_of
                .any_of
                .iter()
                .flatten()
                .chain(&g.member_of.forbidden)
                .copied()
        })
        .collect();
    let agg_id = db::aggregate_ids(&mut tx, &agg_uuids).await?;
    let snap = st.candidates.current(&mut tx).await?;
    tx.commit().await?;

    let requested: BTreeSet<i32> = class_ids.values().copied().collect();
    let mut search = Search {
        snap,
        candidates: Vec::new(),
        suffixes: Vec::new(),
        requested,
    };
    let mut groups_out = Vec::new();
    for g in &parsed.groups {
        let in_tree = match g.in_tree {
            None => None,
            Some(u) => match search.snap.by_uuid(&u) {
                Some(i) => Some(i),
                // An unknown in_tree matches nothing.
                None => return Ok(search),
            },
        };
        groups_out.push(Group {
            suffix: g.suffix.clone(),
            resources: g
                .resources
                .iter()
                .map(|(c, n)| (class_ids[c], *n))
                .collect(),
            required: g.traits.required.iter().map(tid).collect(),
            forbidden: tid(&g.traits.forbidden),
            member_of: g
                .member_of
                .any_of
                .iter()
                .map(|set| set.iter().filter_map(|u| agg_id.get(u).copied()).collect())
                .collect(),
            forbidden_aggs: g
                .member_of
                .forbidden
                .iter()
                .filter_map(|u| agg_id.get(u).copied())
                .collect(),
            in_tree,
        });
    }
    let suffix_index = |s: &String| groups_out.iter().position(|g| &g.suffix == s).unwrap_or(0);
    let request = solve::Request {
        same_subtree: parsed
            .same_subtree
            .iter()
            .map(|set| set.iter().map(suffix_index).collect())
            .collect(),
        root_required: parsed.root_required.required.iter().flat_map(tid).collect(),
        root_forbidden: tid(&parsed.root_required.forbidden),
        isolate: parsed.group_policy == Some(GroupPolicy::Isolate),
        groups: groups_out,
    };
    let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
    let limits = Limits {
        max_steps: st.settings.allocation_candidates_max_steps,
        cancel: Some(cancel.0.clone()),
        max_results: match (parsed.limit, max_results) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        },
        breadth_first: st.settings.allocation_candidates_generation_strategy
            == crate::config::GenerationStrategy::BreadthFirst,
        nested_aware: mv.at_least(1, 29),
        shuffle_seed: st
            .settings
            .randomize_allocation_candidates
            .then(rand::random),
    };
    search.suffixes = request.groups.iter().map(|g| g.suffix.clone()).collect();
    let started = std::time::Instant::now();
    let snap = search.snap.clone();
    let solution = st
        .cpu_work(move || solve::solve(&snap, &request, &limits))
        .await?;
    drop(cancel);
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
    search.candidates = solution.candidates;
    Ok(search)
}

/// `GET /allocation_candidates`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate(&schema::candidates_query(mv))?;
    let started = std::time::Instant::now();
    let cap = usize::try_from(st.settings.max_allocation_candidates).ok();
    let found = search(&st, &q.0, mv, cap).await?;
    let searched = started.elapsed();
    let shape = Shape {
        dict_form: mv.at_least(1, 12),
        traits: mv.at_least(1, 17),
        all_classes: mv.at_least(1, 27),
        nested: mv.at_least(1, 29),
        mappings: mv.at_least(1, 34),
    };
    let body = st
        .cpu_work(move || {
            render(
                &found.snap,
                &found.suffixes,
                &found.requested,
                &found.candidates,
                shape,
            )
        })
        .await?;
    let reply = Reply::raw_json(body).cache(mv, None);
    tracing::debug!(
        search_ms = searched.as_secs_f64() * 1e3,
        render_ms = (started.elapsed() - searched).as_secs_f64() * 1e3,
        "allocation candidates"
    );
    Ok(reply)
}
