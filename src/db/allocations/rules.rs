//! The rules of an allocation write, declared once, with their refusals.
//! Two paths carry them out: the claim (`placement_claim` in
//! `src/db/definitions.sql`, one statement for new consumers) and the
//! detailed path (`write_checking` in `detailed.rs`, every write, each
//! refusal with Placement's error). A rule is added here first (its
//! [`WriteRule`], its place in [`WRITE_RULES`], its [`AllocError`] with
//! the message and [`AllocError::into_error`]'s status and code), and the
//! compiler and the tests then ask for the rest:
//!
//! - every refusal of the detailed path is an [`AllocError`] that
//!   [`WriteRule::of`] names a rule for (a match without a wildcard: a new
//!   variant does not compile until it does);
//! - every rule says how the claim treats it ([`WriteRule::in_claim`],
//!   exhaustive likewise), and `placement_claim`'s text carries a marker
//!   for each rule it checks or leaves to the detailed path (a test below
//!   reads the file);
//! - `write_checking` checks each declared rule in the declared order (a
//!   test below reads that file too);
//! - `tests/claim_agrees.rs` requires, of its random writes, that each
//!   rule the claim can meet refused at least one of them on the detailed
//!   path, that the two paths agree on every write, and that taking any
//!   one check out of `write_checking` breaks one of them.

use crate::error::{codes, Error};
use uuid::Uuid;

/// One rule of the allocation write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WriteRule {
    /// The consumer generation matches (`null`: no such consumer yet).
    ConsumerGeneration,
    /// Every provider named exists.
    ProviderExists,
    /// Every class named exists.
    ClassExists,
    /// A deployment's bound cores keep their CPU-shares allocation.
    BoundShares,
    /// Batch and free work uses the batch classes only, and only it does.
    PriorityClass,
    /// The provider has inventory of each class.
    InventoryExists,
    /// Each amount respects min_unit, max_unit and step_size.
    Units,
    /// Usage stays within `(total − reserved) × allocation_ratio`.
    Capacity,
    /// Others' unused reservations stay free.
    Reservation,
    /// No project on the writer's path to the root goes over a limit.
    Limit,
}

/// How the claim treats a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InClaim {
    /// It checks the rule in its own statement and writes nothing when a
    /// write breaks it (the detailed path then answers with the error).
    Checks,
    /// It writes nothing when the rule could concern the write at all,
    /// leaving the write to the detailed path.
    LeavesToDetailedPath,
    /// The rule cannot concern what it takes (new consumers only).
    CannotArise,
}

/// Every rule, in the order the detailed path checks them.
pub const WRITE_RULES: [WriteRule; 10] = [
    WriteRule::ConsumerGeneration,
    WriteRule::ProviderExists,
    WriteRule::ClassExists,
    WriteRule::BoundShares,
    WriteRule::PriorityClass,
    WriteRule::InventoryExists,
    WriteRule::Units,
    WriteRule::Capacity,
    WriteRule::Reservation,
    WriteRule::Limit,
];

/// The rules a detailed write checks: every one of [`WRITE_RULES`] in
/// production. The only other set is the declared list less one rule,
/// which `tests/claim_agrees.rs` writes with to show that each of the
/// detailed path's checks is needed (the test fails without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The rule left unchecked, if any.
    without: Option<WriteRule>,
}

impl Checked {
    /// Every declared rule.
    pub const ALL: Checked = Checked { without: None };

    /// Every declared rule but `rule` (a mutation, for the test that each
    /// check is needed).
    pub fn without(rule: WriteRule) -> Checked {
        Checked {
            without: Some(rule),
        }
    }

    /// Whether `rule` is checked.
    pub fn has(self, rule: WriteRule) -> bool {
        self.without != Some(rule)
    }
}

impl WriteRule {
    /// Its name, as `placement_claim`'s markers spell it.
    pub fn name(self) -> &'static str {
        match self {
            WriteRule::ConsumerGeneration => "consumer_generation",
            WriteRule::ProviderExists => "provider_exists",
            WriteRule::ClassExists => "class_exists",
            WriteRule::BoundShares => "bound_shares",
            WriteRule::PriorityClass => "priority_class",
            WriteRule::InventoryExists => "inventory_exists",
            WriteRule::Units => "units",
            WriteRule::Capacity => "capacity",
            WriteRule::Reservation => "reservation",
            WriteRule::Limit => "limit",
        }
    }

    /// How the claim treats it.
    pub fn in_claim(self) -> InClaim {
        match self {
            // A claimed consumer must not exist: the generation `null`.
            WriteRule::ConsumerGeneration
            | WriteRule::ProviderExists
            | WriteRule::ClassExists
            | WriteRule::InventoryExists
            | WriteRule::Units
            | WriteRule::Capacity => InClaim::Checks,
            WriteRule::PriorityClass | WriteRule::Reservation | WriteRule::Limit => {
                InClaim::LeavesToDetailedPath
            }
            // Bound cores belong to existing deployment instances.
            WriteRule::BoundShares => InClaim::CannotArise,
        }
    }

    /// The rule a refusal of the detailed path enforces (None: a database
    /// failure, no refusal).
    pub fn of(e: &AllocError) -> Option<WriteRule> {
        Some(match e {
            AllocError::ConsumerGeneration { .. } => WriteRule::ConsumerGeneration,
            AllocError::NoProvider(_) => WriteRule::ProviderExists,
            AllocError::NoClass(..) => WriteRule::ClassExists,
            AllocError::BoundShares(..) => WriteRule::BoundShares,
            AllocError::PriorityClass { .. } => WriteRule::PriorityClass,
            AllocError::NoInventory(..) => WriteRule::InventoryExists,
            AllocError::Constraints(..) => WriteRule::Units,
            AllocError::Capacity(..) => WriteRule::Capacity,
            AllocError::Reserved(..) => WriteRule::Reservation,
            AllocError::Quota { .. } => WriteRule::Limit,
            AllocError::Db(_) => return None,
        })
    }
}

/// Why an allocation write was refused. Each maps to one Placement error.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// 400: a provider named in the request does not exist (as the
    /// request spelled it).
    #[error("Allocation for resource provider '{0}' that does not exist.")]
    NoProvider(String),
    /// 400: an unknown resource class.
    #[error("No such resource class {1}.")]
    NoClass(Uuid, String),
    /// 409 undefined_code: the provider lacks inventory of the classes.
    #[error(
        "Unable to allocate inventory: Inventory for '{1}' on resource provider '{0}' invalid."
    )]
    NoInventory(Uuid, String),
    /// 409 undefined_code: min_unit/max_unit/step_size violated.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The requested amount would violate inventory constraints.")]
    Constraints(Uuid, String),
    /// 409 undefined_code: not enough capacity.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The requested amount would exceed the capacity.")]
    Capacity(Uuid, String),
    /// 409 concurrent_update: consumer generation mismatch.
    #[error("consumer generation conflict - expected {expected} but got {got}")]
    ConsumerGeneration {
        /// What the server has ("null" for no consumer).
        expected: String,
        /// What the client sent ("None" for null).
        got: String,
    },
    /// 409: the consumer is a deployment instance whose bound cores would no
    /// longer match its CUSTOM_CPU_SHARES allocation.
    #[error("Unable to allocate inventory: consumer {0} has cores bound by a deployment; its CUSTOM_CPU_SHARES allocation must stay {1} on resource provider '{2}' (resize it through /deployments, or delete its allocations).")]
    BoundShares(Uuid, i64, Uuid),
    /// 409 placement.quota.exceeded: a project would go over a limit.
    #[error("Quota exceeded: project {project} would consume {after} {class}, over its limit of {limit} (it consumes {before} now).")]
    Quota {
        /// The limited project (the writer's or an ancestor).
        project: String,
        /// The class.
        class: String,
        /// The limit.
        limit: i64,
        /// Consumption before the write.
        before: i64,
        /// Consumption the write would leave.
        after: i64,
    },
    /// 409 placement.reservation.unavailable: the capacity left is reserved
    /// for other projects.
    #[error("Unable to allocate inventory: Unable to create allocation for '{1}' on resource provider '{0}'. The capacity left is reserved for other projects.")]
    Reserved(Uuid, String),
    /// 400 placement.colocation.class_not_allowed: batch and free
    /// consumers use only the batch classes (and DISK_GB), and only they do.
    #[error("Unable to allocate inventory: consumer {consumer} is {priority} work, which may not allocate {class} (batch and free work uses BATCH_VCPU_MILLI, BATCH_MEMORY_MB and DISK_GB; other work may not use the BATCH_* classes).")]
    PriorityClass {
        /// The consumer.
        consumer: Uuid,
        /// Its priority class's name.
        priority: &'static str,
        /// The class it may not allocate.
        class: String,
    },
    /// Database failure.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl AllocError {
    /// Placement's error for the refusal, mapped here once for every
    /// writer; `put_consumer` picks the wording of `PUT
    /// /allocations/{consumer}` where Placement's differs.
    pub fn into_error(self, put_consumer: Option<Uuid>) -> Error {
        match self {
            AllocError::NoProvider(_) => Error::invalid(self.to_string()),
            AllocError::NoClass(_, ref rc) => match put_consumer {
                Some(c) => Error::invalid(format!(
                    "Unable to allocate inventory for consumer {c}: No such resource class {rc}."
                )),
                None => Error::invalid(format!(
                    "Unable to allocate inventory No such resource class {rc}."
                )),
            },
            AllocError::NoInventory(..)
            | AllocError::Constraints(..)
            | AllocError::Capacity(..)
            | AllocError::BoundShares(..) => Error::conflict(self.to_string()),
            AllocError::Quota { .. } => {
                Error::conflict(self.to_string()).code(codes::QUOTA_EXCEEDED)
            }
            AllocError::Reserved(..) => {
                Error::conflict(self.to_string()).code(codes::RESERVATION_UNAVAILABLE)
            }
            AllocError::ConsumerGeneration { .. } => {
                Error::conflict(self.to_string()).code(codes::CONCURRENT_UPDATE)
            }
            AllocError::PriorityClass { .. } => {
                Error::invalid(self.to_string()).code(codes::COLOCATION_CLASS_NOT_ALLOWED)
            }
            AllocError::Db(db) => Error::from(db),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// `placement_claim`'s current text.
    fn claim_text() -> &'static str {
        let all = crate::db::definitions::TEXT;
        let start = all
            .find("FUNCTION placement_claim(")
            .expect("placement_claim in definitions.sql");
        let end = all[start..].find("END $$;").expect("its end") + start;
        &all[start..end]
    }

    /// The rule names after `marker` in the claim's text.
    fn marked(marker: &str) -> BTreeSet<&'static str> {
        claim_text()
            .match_indices(marker)
            .map(|(at, _)| {
                let rest = &claim_text()[at + marker.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    fn declared(how: InClaim) -> BTreeSet<&'static str> {
        WRITE_RULES
            .iter()
            .filter(|r| r.in_claim() == how)
            .map(|r| r.name())
            .collect()
    }

    #[test]
    fn the_claims_text_marks_each_rule_it_checks_or_leaves() {
        assert_eq!(marked("-- rule: "), declared(InClaim::Checks));
        assert_eq!(
            marked("-- left to the detailed path: "),
            declared(InClaim::LeavesToDetailedPath)
        );
    }

    /// The detailed path checks the rules in the declared order: in the
    /// text of `write_checking`, each rule's first check comes after the
    /// one declared before it.
    #[test]
    fn the_detailed_path_checks_in_the_declared_order() {
        let text = include_str!("detailed.rs");
        let start = text
            .find("pub async fn write_checking(")
            .expect("write_checking");
        let body = &text[start..];
        let body = &body[..body.find("\n}\n").expect("its end")];
        let at: Vec<(usize, &str)> = WRITE_RULES
            .iter()
            .map(|r| {
                let needle = format!("WriteRule::{r:?})");
                let pos = body.find(&needle);
                (
                    pos.unwrap_or_else(|| panic!("{needle} is not checked")),
                    r.name(),
                )
            })
            .collect();
        let mut sorted = at.clone();
        sorted.sort_unstable();
        assert_eq!(at, sorted, "the checks' order against WRITE_RULES");
    }

    #[test]
    fn each_rule_is_declared_once_with_its_own_name() {
        let names: BTreeSet<&str> = WRITE_RULES.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), WRITE_RULES.len());
    }
}
