//! The colocation class rule of the allocation write (§C.3): batch and
//! free consumers use only the batch classes (and DISK_GB), and only they
//! use them. Which consumers are low priority comes from `checks_needed`.

use super::{AllocError, ConsumerWrite};
use crate::types::PriorityClass;
use uuid::Uuid;

/// Refuses classes a consumer's priority class may not allocate (§C.3).
pub(super) fn check_priority_classes(
    writes: &[ConsumerWrite],
    low: &[Uuid],
) -> Result<(), AllocError> {
    for w in writes {
        let priority = if low.contains(&w.consumer) {
            PriorityClass::Batch
        } else {
            PriorityClass::Prod
        };
        let classes = w.allocations.values().flat_map(|m| m.keys());
        if let Some(class) = classes.into_iter().find(|c| !priority.may_allocate(c)) {
            return Err(AllocError::PriorityClass {
                consumer: w.consumer,
                priority: if priority.low() {
                    "low-priority (batch or free)"
                } else {
                    "production (prod or mid)"
                },
                class: class.clone(),
            });
        }
    }
    Ok(())
}
