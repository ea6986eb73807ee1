//! Quota arithmetic of the Mesos allocator (`docs/quota.md`, the quota
//! tests of `hierarchical_allocator_tests.cpp`): what each role consumes
//! against its quota, the headroom unsatisfied guarantees hold back, and
//! what is left under each limit. Pure.
//!
//! - consumed = the role's reservations (used or not) + its unreserved
//!   allocation;
//! - required headroom = Σ over roles of max(0, guarantee − consumed);
//! - available headroom = total − every allocation − every reservation
//!   (another role's reservation is never headroom);
//! - surplus = available − required, where positive;
//! - remaining limit = max(0, limit − consumed), for roles with limits.

use super::drf::Resources;
use std::collections::BTreeMap;

/// One role's quota and holdings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleQuota {
    /// Held back for the role even while it asks for nothing.
    pub guarantees: Resources,
    /// Hard caps on consumption (None: unlimited).
    pub limits: Option<Resources>,
    /// Reserved for the role, used or not.
    pub reservations: Resources,
    /// Allocated to the role from unreserved resources.
    pub allocated_unreserved: Resources,
}

/// The allocator's view of quota in one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headroom {
    /// What each role consumes against its quota.
    pub consumed: BTreeMap<String, Resources>,
    /// What unsatisfied guarantees hold back.
    pub required: Resources,
    /// What is neither allocated nor reserved.
    pub available: Resources,
    /// Available beyond what guarantees hold back.
    pub surplus: Resources,
    /// What each limited role may still take.
    pub remaining_limit: BTreeMap<String, Resources>,
}

/// `a + b`, per resource.
fn plus(a: &Resources, b: &Resources) -> Resources {
    let mut out = a.clone();
    for (r, q) in b {
        *out.entry(r.clone()).or_default() += q;
    }
    out
}

/// `a − b` per resource of `a`, keeping only what stays positive.
fn positive_minus(a: &Resources, b: &Resources) -> Resources {
    a.iter()
        .map(|(r, q)| (r.clone(), q - b.get(r).copied().unwrap_or(0.0)))
        .filter(|(_, q)| *q > 0.0)
        .collect()
}

/// Quota consumption, headroom and remaining limits over `total`.
pub fn headroom(total: &Resources, roles: &BTreeMap<String, RoleQuota>) -> Headroom {
    let consumed: BTreeMap<String, Resources> = roles
        .iter()
        .map(|(name, q)| (name.clone(), plus(&q.reservations, &q.allocated_unreserved)))
        .collect();
    let mut required = Resources::new();
    let mut taken = Resources::new();
    let mut remaining_limit = BTreeMap::new();
    for (name, q) in roles {
        let used = &consumed[name];
        required = plus(&required, &positive_minus(&q.guarantees, used));
        taken = plus(&taken, used);
        if let Some(limits) = &q.limits {
            let left = limits
                .iter()
                .map(|(r, l)| {
                    (
                        r.clone(),
                        (l - used.get(r).copied().unwrap_or(0.0)).max(0.0),
                    )
                })
                .collect();
            remaining_limit.insert(name.clone(), left);
        }
    }
    let available = positive_minus(total, &taken);
    let surplus = positive_minus(&available, &required);
    Headroom {
        consumed: consumed
            .into_iter()
            .map(|(n, c)| (n, c.into_iter().filter(|(_, q)| *q > 0.0).collect()))
            .collect(),
        required,
        available,
        surplus,
        remaining_limit,
    }
}
