//! Memory-first (unbound) mode (eru.md §6.2, §8): capacity from memory; CPU is a soft quota.

use super::error::{SchedError, SchedResult};
use super::types::{NodeResourceInfo, ResourceRequest, UNLIMITED};

/// Division that yields 0 instead of NaN/inf on a zero denominator (Go `AdvancedDivide`).
pub fn ratio(num: f64, den: f64) -> f64 {
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// How many unbound instances of a normalised request fit on the node.
///
/// The only CPU check is against the node's *number of cores*: free pieces and bound cores
/// are ignored, as in Eru. A request without memory is [`UNLIMITED`].
pub fn memory_first_capacity(node: &NodeResourceInfo, req: &ResourceRequest) -> i64 {
    if req.cpu_request > node.core_count() as f64 {
        return 0;
    }
    if req.memory_request == 0 {
        return UNLIMITED;
    }
    let free = node.capacity.memory.saturating_sub(node.usage.memory);
    (free / req.memory_request).max(0)
}

/// Check that `count` unbound instances fit (Eru `doAllocByMemory`), with why when not.
pub fn check_memory_first(
    node: &NodeResourceInfo,
    req: &ResourceRequest,
    count: i64,
) -> SchedResult<()> {
    let cores = node.core_count() as f64;
    if req.cpu_request > cores {
        return Err(SchedError::NodeInsufficient {
            resource: "cpu",
            need: req.cpu_request,
            available: cores,
        });
    }
    if req.memory_request > 0 {
        let free = node.capacity.memory.saturating_sub(node.usage.memory);
        let fits = (free / req.memory_request).max(0);
        if fits < count {
            return Err(SchedError::NodeInsufficient {
                resource: "memory",
                need: count as f64,
                available: fits as f64,
            });
        }
    }
    Ok(())
}
