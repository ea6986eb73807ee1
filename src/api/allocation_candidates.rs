//! `GET /allocation_candidates` (1.10+): parse → load the snapshot → solve
//! → render, the four steps of Placement's engine.

use super::extract::QueryPairs;
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use crate::candidates::groups::{self, GroupPolicy};
use crate::candidates::render::{render, Shape};
use crate::candidates::solve::{self, Group, Limits};
use crate::db::{candidates as db, classes, traits};
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::extract::State;
use serde_json::json;
use std::collections::{BTreeSet, HashMap};

fn empty(mv: Microversion) -> Reply {
    Reply::ok(&json!({"allocation_requests": [], "provider_summaries": {}})).cache(mv, None)
}

/// `GET /allocation_candidates`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate(&schema::candidates_query(mv))?;
    let parsed = groups::parse(&q.0, (mv.major, mv.minor)).map_err(|e| match e.code {
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

    let requested: Vec<i32> = class_ids.values().copied().collect();
    let snap = st.candidates.current(&mut tx).await?;
    tx.commit().await?;

    let mut groups_out = Vec::new();
    for g in &parsed.groups {
        let in_tree = match g.in_tree {
            None => None,
            Some(u) => match snap.by_uuid.get(&u) {
                Some(&i) => Some(i),
                None => return Ok(empty(mv)),
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
    let cap = usize::try_from(st.settings.max_allocation_candidates).ok();
    let limits = Limits {
        max_results: match (parsed.limit, cap) {
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
    let cands = solve::solve(&snap, &request, &limits);
    let suffixes: Vec<String> = request.groups.iter().map(|g| g.suffix.clone()).collect();
    let shape = Shape {
        dict_form: mv.at_least(1, 12),
        traits: mv.at_least(1, 17),
        all_classes: mv.at_least(1, 27),
        nested: mv.at_least(1, 29),
        mappings: mv.at_least(1, 34),
    };
    let body = render(
        &snap,
        &suffixes,
        &requested.iter().copied().collect(),
        &cands,
        shape,
    );
    Ok(Reply::ok(&body).cache(mv, None))
}
