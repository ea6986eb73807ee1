//! The deployment rule of the allocation write: a CPU-bound instance's
//! CUSTOM_CPU_SHARES allocation stays equal to its core binding.

use super::{AllocError, ConsumerWrite};
use crate::db::consumers::ConsumerRow;
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// Refuses writes that would make a deployment instance's CUSTOM_CPU_SHARES
/// allocation differ from its core binding (emptying it is allowed: that
/// frees the cores).
pub(super) async fn check_bound_shares(
    conn: &mut PgConnection,
    writes: &[ConsumerWrite],
    existing: &HashMap<Uuid, ConsumerRow>,
) -> Result<(), AllocError> {
    let ids: Vec<i64> = existing.values().map(|c| c.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let bound: Vec<(i64, Uuid, i64)> = crate::db::query_as(
        "SELECT i.consumer_id, rp.uuid, (SELECT SUM(s) FROM UNNEST(i.core_shares) AS s)::bigint
           FROM instances i JOIN resource_providers rp ON rp.id = i.resource_provider_id
          WHERE i.consumer_id = ANY($1) AND cardinality(i.core_shares) > 0",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    for (cid, rp, shares) in bound {
        let Some(w) = writes
            .iter()
            .find(|w| existing.get(&w.consumer).is_some_and(|c| c.id == cid))
        else {
            continue;
        };
        if w.allocations.is_empty() {
            continue;
        }
        let asked = w
            .allocations
            .get(&rp)
            .and_then(|m| m.get(crate::types::CPU_SHARES))
            .copied()
            .unwrap_or(0);
        if asked != shares {
            return Err(AllocError::BoundShares(w.consumer, shares, rp));
        }
    }
    Ok(())
}
