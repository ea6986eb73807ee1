//! A deployment of a few instances placed over the head of its ranking
//! (see [`super::ranking`]): the search looks only at the trees changed
//! since the ranking's mark, and the plan, lock and write are the ones a
//! deployment over every node goes through ([`super::place_on`]).

use super::deployment_request::Deployment;
use super::node_cache::NodeCache;
use super::ranking::Ranking;
use super::{candidate_nodes, count_retries, node_search, place_on, stamped, Deployed, Outcome};
use crate::candidates::find::{self, Engine};
use crate::candidates::search::Scope;
use crate::error::{with_retries, Result};

/// Places `d` over the head of its ranking; None when the ranking cannot
/// serve it (the caller plans over every node, which also says why a
/// refusal is one).
pub(super) async fn deploy(
    engine: &Engine<'_>,
    cache: &NodeCache,
    ranking: &tokio::sync::Mutex<Ranking>,
    retries: u32,
    d: &Deployment,
) -> Result<Option<Deployed>> {
    let mut attempts = 0u64;
    let result = with_retries(retries, || {
        attempts += 1;
        attempt(engine, cache, ranking, d)
    })
    .await;
    count_retries(attempts);
    Ok(match result? {
        Outcome::Done(done) => Some(done),
        Outcome::Refused(..) | Outcome::Unserved => None,
    })
}

/// Brings `ranking` forward for `d`'s query: the search looks only at the
/// trees changed since the ranking's mark, and the ranking takes their
/// new states. False when no ranking can serve `d`: capacity withheld for
/// reservations depends on the project, and a sharing provider changes
/// other trees' answers.
pub(super) async fn bring_forward(
    engine: &Engine<'_>,
    cache: &NodeCache,
    ranking: &tokio::sync::Mutex<Ranking>,
    d: &Deployment,
) -> Result<bool> {
    let mark = ranking.lock().await.mark();
    let scope = mark.map_or(Scope::EveryTree, Scope::ChangedSince);
    let found = find::run(engine, &node_search(d, scope)).await?;
    if !found.adjusted.withheld.is_empty() || !found.snap.sharing_nodes.is_empty() {
        return Ok(false);
    }
    let wanted = stamped(&found, &candidate_nodes(&found));
    let states = cache.current(engine.pool, &wanted).await?;
    ranking.lock().await.update(&found, &states, &d.shape);
    Ok(true)
}

/// One attempt over a ranking's head: the ranking brought forward, then
/// the plan over the nodes that begin the strategy's order.
async fn attempt(
    engine: &Engine<'_>,
    cache: &NodeCache,
    ranking: &tokio::sync::Mutex<Ranking>,
    d: &Deployment,
) -> Result<Outcome> {
    if !bring_forward(engine, cache, ranking, d).await? {
        return Ok(Outcome::Unserved);
    }
    let Some(head) = ranking.lock().await.head(d, 0) else {
        return Ok(Outcome::Unserved);
    };
    place_on(engine.pool, d, &head.nodes, head.outside(&d.shape)).await
}
