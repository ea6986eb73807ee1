//! The claim: allocations for consumers that do not exist yet (a scheduler
//! claiming its candidate, a queue round admitting requests), written by
//! one call of `placement_claim`, whose one current text is in
//! `src/db/definitions.sql` (the migrations keep its history).
//!
//! The function locks the providers, then checks in one statement what the
//! detailed path checks and writes only when every check passes: the
//! providers, classes, owners and consumer type exist, no consumer exists,
//! no quota, reservation or low priority applies, and every amount fits
//! its inventory's units and capacity. When one does not pass it writes
//! nothing, and the detailed path runs, to refuse with Placement's exact
//! error (or to do what the claim leaves to it: create owners, check
//! quotas). Outside a transaction the call is one round trip; the detailed
//! path is about eleven.
//!
//! Capacity is read by a statement whose snapshot is taken after the
//! providers are locked: every writer of their allocations holds those
//! locks, so what it reads is what is there.
//!
//! It records its rows (the change log, the per-project totals) through
//! their one writer, `placement_usage_changed`, from values it already
//! has (the consumers' projects); the insert trigger, which would call the
//! same writer, skips statements run inside it (see the migration
//! `*_claim_function_writes_its_log.sql`).
//!
//! Which rules the claim checks itself and which it leaves to the detailed
//! path is `tests/claim_agrees.rs`'s to prove: random writes through both,
//! on real PostgreSQL, give the same verdict and the same stored rows.

use super::{AllocError, ConsumerIds, ConsumerWrite, GenerationCheck};
use crate::types::PriorityClass;
use sqlx::PgConnection;
use uuid::Uuid;

/// A write the claim statement can take: every consumer [`claimable`],
/// each once. Columns as the statement binds them.
#[derive(Default)]
pub(super) struct Claim {
    consumers: Vec<Uuid>,
    projects: Vec<String>,
    users: Vec<String>,
    types: Vec<Option<String>>,
    row_consumers: Vec<Uuid>,
    row_providers: Vec<Uuid>,
    row_classes: Vec<String>,
    row_used: Vec<i32>,
}

impl Claim {
    /// The claim of `writes`, or None when the write needs the detailed
    /// path anyway.
    pub(super) fn of(writes: &[ConsumerWrite]) -> Option<Self> {
        let mut claim = Claim::default();
        for w in writes {
            if !claimable(w) || claim.consumers.contains(&w.consumer) {
                return None;
            }
            claim.consumers.push(w.consumer);
            claim.projects.push(w.project_id.clone());
            claim.users.push(w.user_id.clone());
            claim.types.push(w.consumer_type.clone());
            for (rp, classes) in &w.allocations {
                for (class, &n) in classes {
                    claim.row_consumers.push(w.consumer);
                    claim.row_providers.push(*rp);
                    claim.row_classes.push(class.clone());
                    claim.row_used.push(i32::try_from(n).ok()?);
                }
            }
        }
        Some(claim)
    }

    /// Writes the claim when every check passes: the ids of the consumers
    /// it created, or None when it wrote nothing.
    pub(super) async fn write(
        &self,
        conn: &mut PgConnection,
    ) -> Result<Option<ConsumerIds>, AllocError> {
        let rows: Vec<(Uuid, i64)> = crate::db::query_as(
            "SELECT claimed_uuid, claimed_id FROM placement_claim($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&self.consumers)
        .bind(&self.projects)
        .bind(&self.users)
        .bind(&self.types)
        .bind(&self.row_consumers)
        .bind(&self.row_providers)
        .bind(&self.row_classes)
        .bind(&self.row_used)
        .fetch_all(conn)
        .await
        .map_err(consumer_raced)?;
        Ok((!rows.is_empty()).then(|| rows.into_iter().collect()))
    }
}

/// Whether the claim can take `w`, as far as the write itself says: a
/// consumer new (or unchecked before 1.28) with allocations, of
/// production classes, each in units an allocation row holds.
pub(super) fn claimable(w: &ConsumerWrite) -> bool {
    !w.allocations.is_empty()
        && w.unparsed_provider.is_none()
        && !matches!(w.generation, GenerationCheck::Is(_))
        && w.allocations
            .values()
            .flatten()
            .all(|(class, &n)| PriorityClass::Prod.may_allocate(class) && i32::try_from(n).is_ok())
}

/// A consumer created by another writer since the statement looked is the
/// detailed path's generation conflict (it creates with `ON CONFLICT DO
/// NOTHING` and answers the same when a row is missing).
fn consumer_raced(e: sqlx::Error) -> AllocError {
    match e.as_database_error().and_then(|d| d.constraint()) {
        Some("consumers_uuid_key") => AllocError::ConsumerGeneration {
            expected: "0".into(),
            got: "None".into(),
        },
        _ => AllocError::Db(e),
    }
}
