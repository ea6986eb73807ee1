//! A consumer's priority class (`prod|mid|batch|free`) and integer
//! priority, in Koordinator's ranges, set beside Placement's consumer.

use crate::db::colocation::{self as db, PriorityRow};
use crate::error::{codes, Error, Result};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;
use uuid::Uuid;

pub use crate::types::PriorityClass;

/// `PUT /consumers/{consumer_uuid}/priority`, after its schema check.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityPut {
    /// The class.
    pub priority_class: PriorityClass,
    /// The integer priority, inside the class's range.
    #[serde(default)]
    pub priority: Option<i32>,
    /// Opt-in to the generic usage evictor (Koordinator's label).
    #[serde(default)]
    pub eviction_enabled: bool,
}

/// A consumer's priority.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityView {
    /// The consumer.
    pub consumer_uuid: Uuid,
    /// The class (prod unless set).
    pub priority_class: PriorityClass,
    /// The integer priority, if set.
    pub priority: Option<i32>,
    /// Opt-in to the generic usage evictor.
    pub eviction_enabled: bool,
}

/// Sets a consumer's priority: 400 for a priority outside its class.
pub async fn put(conn: &mut PgConnection, consumer: Uuid, b: PriorityPut) -> Result<PriorityView> {
    if let Some(p) = b.priority {
        b.priority_class.admits(p).map_err(Error::invalid)?;
    }
    let held = db::held_classes(conn, consumer).await?;
    if let Some(class) = held.iter().find(|c| !b.priority_class.may_allocate(c)) {
        return Err(Error::invalid(format!(
            "Consumer {consumer} holds {class}, which {} work may not allocate: batch and free work uses BATCH_VCPU_MILLI, BATCH_MEMORY_MB and DISK_GB, other work no BATCH_* class. Delete or move its allocations first.",
            b.priority_class.name()
        ))
        .code(codes::COLOCATION_CLASS_NOT_ALLOWED));
    }
    let row = PriorityRow {
        priority_class: b.priority_class.code(),
        priority: b.priority,
        eviction_enabled: b.eviction_enabled,
    };
    db::set_priority(conn, consumer, &row).await?;
    show(conn, consumer).await
}

/// A consumer's priority (prod by default).
pub async fn show(conn: &mut PgConnection, consumer: Uuid) -> Result<PriorityView> {
    let row = db::priority(conn, consumer).await?;
    Ok(match row {
        Some(r) => PriorityView {
            consumer_uuid: consumer,
            priority_class: PriorityClass::ALL
                .iter()
                .copied()
                .find(|c| c.code() == r.priority_class)
                .unwrap_or(PriorityClass::Prod),
            priority: r.priority,
            eviction_enabled: r.eviction_enabled,
        },
        None => PriorityView {
            consumer_uuid: consumer,
            priority_class: PriorityClass::Prod,
            priority: None,
            eviction_enabled: false,
        },
    })
}
