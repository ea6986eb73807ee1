//! The rules of an allocation write, declared once. Two paths carry them
//! out: the claim (`placement_claim` in `src/db/definitions.sql`, one
//! statement for new consumers) and the detailed path ([`super::write`], `detailed.rs`,
//! every write, each refusal with Placement's error). A rule is added here
//! first, and the compiler and the tests then ask for the rest:
//!
//! - every refusal of the detailed path is an [`AllocError`] that
//!   [`WriteRule::of`] names a rule for (a match without a wildcard: a new
//!   variant does not compile until it does);
//! - every rule says how the claim treats it ([`WriteRule::in_claim`],
//!   exhaustive likewise), and `placement_claim`'s text carries a marker
//!   for each rule it checks or leaves to the detailed path (a test below
//!   reads the file);
//! - `tests/claim_agrees.rs` requires, of its random writes, that each
//!   rule the claim can meet refused at least one of them on the detailed
//!   path, and that the two paths agree on every write.

use super::AllocError;

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
