//! The names a search uses (resource classes, traits, aggregates) and
//! their resolution to ids: the rule that answers Placement's 400s "No
//! such resource class" and "No such trait(s)", and that an unknown
//! aggregate matches nothing. However the names were read (a statement of
//! the search's own or one shared with others, see `candidates::speed`),
//! this is where they are judged.

use super::search::CandidateQuery;
use crate::db::candidates as db;
use crate::error::{Error, Result};
use std::collections::{BTreeSet, HashMap};

/// The class, trait and aggregate names a query uses.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// In the query's order (the first unknown one is the 400's).
    pub classes: Vec<String>,
    /// Sorted.
    pub traits: Vec<String>,
    /// In the query's order.
    pub aggregates: Vec<uuid::Uuid>,
}

/// Names of a query resolved to ids.
#[derive(Debug, PartialEq)]
pub struct Ids {
    /// Class name → id.
    pub class: HashMap<String, i32>,
    /// Trait name → id.
    pub trait_: HashMap<String, i32>,
    /// Aggregate uuid → id (an unknown one is left out: it matches nothing).
    pub agg: HashMap<uuid::Uuid, i32>,
}

impl Ids {
    /// The ids of the known traits of `names`.
    pub fn traits(&self, names: &BTreeSet<String>) -> Vec<i32> {
        names
            .iter()
            .filter_map(|n| self.trait_.get(n).copied())
            .collect()
    }

    /// The ids of the known aggregates of `uuids`.
    pub fn aggs<'a>(&self, uuids: impl IntoIterator<Item = &'a uuid::Uuid>) -> Vec<i32> {
        uuids
            .into_iter()
            .filter_map(|u| self.agg.get(u).copied())
            .collect()
    }
}

impl Names {
    /// These classes and traits, no aggregate (for tests).
    #[cfg(test)]
    pub(crate) fn of_classes_and_traits(classes: &[&str], traits: &[&str]) -> Names {
        Names {
            classes: classes.iter().map(|c| c.to_string()).collect(),
            traits: traits.iter().map(|t| t.to_string()).collect(),
            aggregates: Vec::new(),
        }
    }

    /// The names `q` uses.
    pub fn of(q: &CandidateQuery) -> Names {
        let mut traits: BTreeSet<String> = q.root_required.names();
        for g in &q.groups {
            traits.extend(g.traits.names());
        }
        Names {
            classes: q
                .groups
                .iter()
                .flat_map(|g| g.resources.iter().map(|(c, _)| c.clone()))
                .collect(),
            traits: traits.into_iter().collect(),
            aggregates: q
                .groups
                .iter()
                .flat_map(|g| {
                    let m = &g.member_of;
                    m.any_of.iter().flatten().chain(&m.forbidden).copied()
                })
                .collect(),
        }
    }

    /// Every name of `all`, each once.
    pub fn union(all: &[Names]) -> Names {
        let classes: BTreeSet<&String> = all.iter().flat_map(|n| &n.classes).collect();
        let traits: BTreeSet<&String> = all.iter().flat_map(|n| &n.traits).collect();
        let aggregates: BTreeSet<&uuid::Uuid> = all.iter().flat_map(|n| &n.aggregates).collect();
        Names {
            classes: classes.into_iter().cloned().collect(),
            traits: traits.into_iter().cloned().collect(),
            aggregates: aggregates.into_iter().copied().collect(),
        }
    }

    /// These names as ids, from a read that asked for them (and perhaps
    /// others: only these are kept). Unknown classes and traits are 400s;
    /// unknown aggregates simply match nothing.
    pub fn resolve(&self, named: &db::NamesRead) -> Result<Ids> {
        if let Some(rc) = self
            .classes
            .iter()
            .find(|c| !named.classes.contains_key(*c))
        {
            return Err(Error::invalid(format!(
                "Invalid resource class in resources parameter: No such resource class {rc}."
            )));
        }
        let missing: Vec<&str> = self
            .traits
            .iter()
            .filter(|t| !named.traits.contains_key(*t))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "No such trait(s): {}.",
                missing.join(", ")
            )));
        }
        let pick = |map: &HashMap<String, i32>, names: &[String]| -> HashMap<String, i32> {
            names
                .iter()
                .filter_map(|n| map.get(n).map(|&id| (n.clone(), id)))
                .collect()
        };
        Ok(Ids {
            class: pick(&named.classes, &self.classes),
            trait_: pick(&named.traits, &self.traits),
            agg: self
                .aggregates
                .iter()
                .filter_map(|u| named.aggregates.get(u).map(|&id| (*u, id)))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(classes: &[&str], traits: &[&str]) -> Names {
        Names::of_classes_and_traits(classes, traits)
    }

    /// A search sharing a turn resolves only its own names: the turn's
    /// other names neither reach its ids (they would count as requested
    /// classes) nor hide its own unknown ones.
    #[test]
    fn a_search_resolves_only_its_own_names_from_a_shared_read() {
        let all = [
            names(&["VCPU"], &["HW_CPU_X86_AVX2"]),
            names(&["DISK_GB"], &[]),
        ];
        let union = Names::union(&all);
        assert_eq!(union.classes, ["DISK_GB", "VCPU"]);
        let named = db::NamesRead {
            seen: db::Seen {
                snapshot: "1:1:".into(),
                server: String::new(),
            },
            classes: HashMap::from([("VCPU".into(), 0), ("DISK_GB".into(), 2)]),
            traits: HashMap::from([("HW_CPU_X86_AVX2".into(), 7)]),
            aggregates: HashMap::new(),
            reservations: false,
        };
        let ids = all[1].resolve(&named).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ids.class, HashMap::from([("DISK_GB".into(), 2)]));
        assert!(ids.trait_.is_empty());
        let unknown = names(&["VCPU", "CUSTOM_NOPE"], &[]).resolve(&named);
        assert!(
            unknown.is_err_and(|e| e.to_string().contains("No such resource class CUSTOM_NOPE"))
        );
    }
}
