//! Which providers of an admission round a request may use: its
//! required and forbidden traits and its aggregates (`member_of`), matched
//! by id on the candidate snapshot's providers.

use super::round_request::AdmissionItem;
use crate::candidates::snapshot::{Node, Snapshot};
use crate::db::{candidates as pool_db, traits};
use crate::error::{Error, Result};
use crate::sched::admission::ProviderIx;
use sqlx::PgConnection;
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

/// The cluster's providers with the round's order.
pub struct OrderedProviders<'a> {
    /// The providers.
    pub snap: &'a Snapshot,
    /// Snapshot indexes in the round's order.
    pub order: &'a [usize],
}

/// Which providers a request's traits and aggregates allow.
pub struct Eligibility<'a> {
    pool: OrderedProviders<'a>,
    /// Ids of the traits the requests name (all exist).
    traits: HashMap<String, i32>,
    /// Ids of the aggregates the requests name (unknown ones are left out).
    aggs: HashMap<Uuid, i32>,
}

impl<'a> Eligibility<'a> {
    /// 400 for a trait that does not exist.
    pub async fn new(
        conn: &mut PgConnection,
        items: &[AdmissionItem],
        pool: OrderedProviders<'a>,
    ) -> Result<Self> {
        let wanted = super::trait_names(items.iter().flat_map(|i| &i.required));
        let resolved = traits::resolve(conn, &wanted).await?;
        if !resolved.missing.is_empty() {
            return Err(Error::invalid(format!(
                "No such trait(s): {}.",
                resolved.missing.join(", ")
            )));
        }
        let named: Vec<Uuid> =
            super::sorted_distinct(items.iter().flat_map(|i| i.member_of.iter().copied()));
        let aggs = match named.is_empty() {
            true => HashMap::new(),
            false => pool_db::aggregate_ids(conn, &named).await?,
        };
        Ok(Eligibility {
            pool,
            traits: resolved.found.into_iter().collect(),
            aggs,
        })
    }

    /// Providers (round indexes, ascending) with every required trait, no
    /// forbidden one (`!T`), and, when aggregates are named, in one of
    /// them themselves or through their root.
    pub fn allowed(&self, item: &AdmissionItem) -> Arc<[ProviderIx]> {
        let has = |node: &Node, t: &str| self.traits.get(t).is_some_and(|&id| node.has_trait(id));
        let nodes = &self.pool.snap.nodes;
        (0..self.pool.order.len())
            .filter(|&p| {
                let node = &nodes[self.pool.order[p]];
                let root = &nodes[node.root];
                item.required.iter().all(|t| match t.strip_prefix('!') {
                    Some(forbidden) => !has(node, forbidden),
                    None => has(node, t),
                }) && (item.member_of.is_empty()
                    || item.member_of.iter().any(|a| {
                        self.aggs
                            .get(a)
                            .is_some_and(|&id| node.in_agg(id) || root.in_agg(id))
                    }))
            })
            .collect()
    }
}
