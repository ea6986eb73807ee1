//! Placement's query grammar of `GET /allocation_candidates` (and its
//! explain), read at the API edge: its schema per microversion and the
//! keys that repeat (the syntax), then the query pairs, checked against
//! them, into request groups with the group-level validation Placement
//! applies per microversion, and into the engine's typed search. The
//! engine never sees a query pair. Pure.

use crate::api::schema::{external_id, per_version, PerVersion, VERSIONS};
use crate::candidates::query_grammar::{
    conflicting_traits, parse_member_of, parse_required, parse_resources, TraitFilter,
};
use crate::candidates::search::{CandidateQuery, GroupPolicy, GroupSpec, Scope, Search};
use crate::error::{codes, Error, Result};
use crate::microversions::Microversion;
use crate::types::PriorityClass;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{LazyLock, OnceLock};

/// The extension parameters of `GET /allocation_candidates`, validated
/// apart from Placement's own so that a Placement client's errors print
/// Placement's schema: `project_id` (whose reservations count as
/// available) and `priority_class` (batch and free queries see only the
/// batch capacity of providers the load filter accepts, §C.3).
pub fn extension_schema() -> &'static Value {
    static BUILT: LazyLock<Value> = LazyLock::new(build_extension_schema);
    &BUILT
}

fn build_extension_schema() -> Value {
    json!({"type": "object", "properties": {
        "project_id": external_id(),
        "priority_class": {"type": "string", "enum": PriorityClass::names()}
    }})
}

/// The query's syntax: Placement's schema of `GET /allocation_candidates`
/// per microversion (a new parameter's type goes here, [`repeats`] when it
/// may repeat, its meaning in [`parse`]).
pub fn schema(mv: Microversion) -> Cow<'static, Value> {
    static BUILT: PerVersion = [const { OnceLock::new() }; VERSIONS];
    per_version(&BUILT, mv, build_schema)
}

fn build_schema(mv: Microversion) -> Value {
    let limit = json!({"type": ["integer", "string"], "pattern": "^[1-9][0-9]*$", "minimum": 1, "minLength": 1});
    let listed = json!({"type": ["string"]});
    if !mv.at_least(1, 25) {
        let mut props = json!({"resources": {"type": "string"}});
        if mv.at_least(1, 16) {
            props["limit"] = limit;
        }
        if mv.at_least(1, 17) {
            props["required"] = listed.clone();
        }
        if mv.at_least(1, 21) {
            props["member_of"] = listed;
        }
        return json!({"type": "object", "properties": props, "required": ["resources"], "additionalProperties": false});
    }
    let suffix = if mv.at_least(1, 33) {
        "[a-zA-Z0-9_-]{1,64}"
    } else {
        "[1-9][0-9]*"
    };
    let mut props =
        json!({"limit": limit, "group_policy": {"type": "string", "enum": ["none", "isolate"]}});
    if mv.at_least(1, 35) {
        props["root_required"] = listed.clone();
    }
    if mv.at_least(1, 36) {
        props["same_subtree"] = listed;
    }
    let mut patterns = serde_json::Map::new();
    let mut keys = vec!["resources", "required", "member_of"];
    if mv.at_least(1, 31) {
        keys.push("in_tree");
    }
    for k in keys {
        patterns.insert(format!("^{k}({suffix})?$"), json!({"type": "string"}));
    }
    json!({"type": "object", "properties": props, "additionalProperties": false, "patternProperties": patterns})
}

/// The keys that may be given several times, each value counting (the
/// request groups' filters, suffixed or not); every other key counts by
/// its last value, and each of its values is validated.
pub fn repeats(key: &str) -> bool {
    key.starts_with("required")
        || key.starts_with("member_of")
        || key == "root_required"
        || key == "same_subtree"
}

/// A query error: the message and Placement's error code (None: undefined_code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// The specific message.
    pub message: String,
    /// `placement.query.*` code, when Placement gives one.
    pub code: Option<&'static str>,
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError {
        message: message.into(),
        code: None,
    }
}

fn coded(message: impl Into<String>, code: &'static str) -> QueryError {
    QueryError {
        message: message.into(),
        code: Some(code),
    }
}

fn suffix_ok(s: &str, v: Microversion) -> bool {
    if s.is_empty() {
        return true;
    }
    if v.at_least(1, 33) {
        s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    } else {
        s.as_bytes()[0] != b'0' && s.bytes().all(|b| b.is_ascii_digit())
    }
}

const PREFIXES: [&str; 4] = ["resources", "required", "member_of", "in_tree"];

/// Splits `resources12` into (`resources`, `12`) when the key is a group key.
fn group_key(key: &str, v: Microversion) -> Option<(&'static str, &str)> {
    for p in PREFIXES {
        if let Some(rest) = key.strip_prefix(p) {
            if suffix_ok(rest, v) && (rest.is_empty() || v.at_least(1, 25)) {
                return Some((p, rest));
            }
        }
    }
    None
}

/// Parses the query pairs (already schema-validated) into groups, in
/// Placement's order: the request-wide parameters first (limit,
/// group_policy, root_required, same_subtree's syntax), then the groups,
/// then the checks across them.
pub fn parse(pairs: &[(String, String)], v: Microversion) -> Result<CandidateQuery, QueryError> {
    // Placement reads these two with `getall(...)[0]`: a repeated one
    // counts by its first value (its own gabbits pin this). Every value
    // was validated (`QueryPairs::validate`), so the one used is valid.
    let first = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut q = CandidateQuery {
        limit: first("limit").and_then(|l| l.parse().ok()),
        group_policy: match first("group_policy") {
            Some("isolate") => Some(GroupPolicy::Isolate),
            Some(_) => Some(GroupPolicy::None),
            None => None,
        },
        ..Default::default()
    };
    if v.at_least(1, 35) {
        q.root_required = parse_root_required(&values_of(pairs, "root_required"), v)?;
    }
    if v.at_least(1, 36) {
        for value in values_of(pairs, "same_subtree") {
            q.same_subtree.push(parse_same_subtree(value)?);
        }
    }
    let by_suffix = parse_groups(pairs, v)?;
    validate_groups(&by_suffix, &q, v)?;
    let suffixed = by_suffix.keys().filter(|s| !s.is_empty()).count();
    if suffixed > 1 && q.group_policy.is_none() {
        return Err(bad("The \"group_policy\" parameter is required when specifying more than one \"resources{N}\" parameter."));
    }
    let mut groups: Vec<GroupSpec> = by_suffix.into_values().collect();
    groups.sort_by(|a, b| {
        (!a.suffix.is_empty(), a.suffix.len(), &a.suffix).cmp(&(
            !b.suffix.is_empty(),
            b.suffix.len(),
            &b.suffix,
        ))
    });
    q.groups = groups;
    Ok(q)
}
/// The typed search of a query's pairs (single-valued parameters by their
/// last value, the one the policy target read).
pub fn search_of_query(
    pairs: &[(String, String)],
    version: Microversion,
    max_results: Option<usize>,
) -> Result<Search> {
    let parsed = parse(pairs, version).map_err(|e| match e.code {
        Some(c) => Error::invalid(e.message).code(c),
        None => Error::invalid(e.message),
    })?;
    Ok(Search {
        query: parsed,
        priority: priority_of(pairs)?,
        project: pairs
            .iter()
            .rev()
            .find(|(k, _)| k == "project_id")
            .map(|(_, v)| v.clone()),
        version,
        max_results,
        one_per_anchor: false,
        scope: Scope::EveryTree,
    })
}

/// The query's `priority_class` (prod without one; the schema has
/// already checked the value).
fn priority_of(pairs: &[(String, String)]) -> Result<PriorityClass> {
    match pairs.iter().rev().find(|(k, _)| k == "priority_class") {
        None => Ok(PriorityClass::Prod),
        Some((_, v)) => PriorityClass::named(v)
            .ok_or_else(|| Error::invalid(format!("Invalid priority_class: {v}."))),
    }
}

/// Every value of `key`, in order.
fn values_of<'a>(pairs: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    pairs
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The request groups by suffix ("" for the unnumbered group), each from
/// its `resources`, `required`, `member_of` and `in_tree` keys.
fn parse_groups(
    pairs: &[(String, String)],
    v: Microversion,
) -> Result<BTreeMap<String, GroupSpec>, QueryError> {
    let mut by_suffix: BTreeMap<String, GroupSpec> = BTreeMap::new();
    let mut seen_keys: Vec<&str> = Vec::new();
    for (key, _) in pairs {
        if seen_keys.contains(&key.as_str()) {
            continue;
        }
        seen_keys.push(key);
        let Some((prefix, suffix)) = group_key(key, v) else {
            continue;
        };
        let values = values_of(pairs, key);
        let last = values.last().copied().unwrap_or_default();
        let g = by_suffix
            .entry(suffix.to_string())
            .or_insert_with(|| GroupSpec {
                suffix: suffix.to_string(),
                ..Default::default()
            });
        match prefix {
            "resources" => g.resources = parse_resources(last).map_err(bad)?,
            "required" => g.traits = parse_required(&values, v).map_err(bad)?,
            "member_of" => g.member_of = parse_member_of(&values, v, suffix).map_err(bad)?,
            _ => {
                g.in_tree = Some(crate::types::parse_uuid_like(last).ok_or_else(|| {
                    bad(format!("Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: {last}"))
                })?)
            }
        }
    }
    Ok(by_suffix)
}

/// `root_required` (1.35+): once only, no trait both required and forbidden.
fn parse_root_required(values: &[&str], v: Microversion) -> Result<TraitFilter, QueryError> {
    if values.len() > 1 {
        return Err(coded(
            "Query parameter 'root_required' may be specified only once.",
            codes::QUERY_DUPLICATE_KEY,
        ));
    }
    let Some(r) = values.first() else {
        return Ok(TraitFilter::default());
    };
    let filter = parse_required(&[r], v).map_err(bad)?;
    let both: Vec<String> = filter
        .required
        .iter()
        .flatten()
        .filter(|t| filter.forbidden.contains(*t))
        .cloned()
        .collect();
    if !both.is_empty() {
        return Err(coded(
            format!(
                "Conflicting required and forbidden traits found in root_required: {}",
                both.join(", ")
            ),
            codes::QUERY_BAD_VALUE,
        ));
    }
    Ok(filter)
}

/// One `same_subtree` value (1.36+): suffixes, none of them empty.
fn parse_same_subtree(value: &str) -> Result<Vec<String>, QueryError> {
    let set: Vec<String> = value.split(',').map(|s| s.trim().to_string()).collect();
    if set.iter().any(String::is_empty) {
        return Err(coded(
            "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
            codes::QUERY_BAD_VALUE,
        ));
    }
    Ok(set)
}

/// A list as Python prints it (Placement's messages do): ['_1', '_2'].
fn py_list(items: Vec<&String>) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Every suffix `same_subtree` names is a group of the request.
fn same_subtree_suffixes_exist(
    same_subtree: &[Vec<String>],
    by_suffix: &BTreeMap<String, GroupSpec>,
) -> Result<(), QueryError> {
    let unknown: Vec<&String> = same_subtree
        .iter()
        .flatten()
        .filter(|s| !by_suffix.contains_key(s.as_str()))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let known = py_list(by_suffix.keys().collect());
    Err(coded(
        format!(
            "Real suffixes should be specified in `same_subtree`: {} not found in {known}.",
            py_list(unknown)
        ),
        codes::QUERY_BAD_VALUE,
    ))
}

fn validate_groups(
    by_suffix: &BTreeMap<String, GroupSpec>,
    q: &CandidateQuery,
    v: Microversion,
) -> Result<(), QueryError> {
    if v.at_least(1, 36) {
        if !by_suffix.values().any(|g| !g.resources.is_empty()) {
            return Err(coded(
                "There must be at least one resources or resources[$S] parameter.",
                codes::QUERY_MISSING_VALUE,
            ));
        }
        let named: Vec<&String> = q.same_subtree.iter().flatten().collect();
        let bad_groups: Vec<&String> = by_suffix
            .iter()
            .filter(|(s, g)| g.resources.is_empty() && (s.is_empty() || !named.contains(s)))
            .map(|(s, _)| s)
            .collect();
        if !bad_groups.is_empty() {
            return Err(coded(
                format!(
                    "Resourceless suffixed group request should be specified in `same_subtree` query param: bad group(s) - {}.",
                    py_list(bad_groups)
                ),
                codes::QUERY_BAD_VALUE,
            ));
        }
        same_subtree_suffixes_exist(&q.same_subtree, by_suffix)?;
    } else {
        // Placement names a group whose required traits (not its
        // forbidden ones) have no resources beside them.
        let orphans: Vec<String> = by_suffix
            .iter()
            .filter(|(_, g)| g.resources.is_empty() && !g.traits.required.is_empty())
            .map(|(s, _)| format!("required{s}"))
            .collect();
        if !orphans.is_empty() {
            return Err(bad(format!(
                "All traits parameters must be associated with resources.  Found the following orphaned traits keys: {}",
                orphans.join(", ")
            )));
        }
        let orphans: Vec<String> = by_suffix
            .iter()
            .filter(|(_, g)| g.resources.is_empty() && !g.member_of.is_empty())
            .map(|(s, _)| format!("member_of{s}"))
            .collect();
        if !orphans.is_empty() {
            return Err(bad(format!(
                "All member_of parameters must be associated with resources. Found the following orphaned member_of keys: {}",
                orphans.join(", ")
            )));
        }
        if by_suffix.values().any(|g| g.resources.is_empty()) {
            return Err(bad("All request groups must specify resources."));
        }
        if by_suffix.is_empty() {
            return Err(bad(
                "At least one request group (`resources` or `resources{$S}`) is required.",
            ));
        }
    }
    if v.at_least(1, 22) {
        let conflicts: Vec<String> = by_suffix
            .iter()
            .filter_map(|(s, g)| {
                let c = conflicting_traits(&g.traits);
                (!c.is_empty()).then(|| format!("required{s}: ({})", c.join(", ")))
            })
            .collect();
        if !conflicts.is_empty() {
            return Err(bad(format!(
                "Conflicting required and forbidden traits found in the following traits keys: {}",
                conflicts.join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(q: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    #[test]
    fn groups_and_policy() {
        let q = parse(&p("resources=VCPU:1&resources1=VF:1&resources2=VF:1&group_policy=isolate&limit=5&limit=9"), Microversion::new(1, 25)).unwrap();
        assert_eq!(q.groups.len(), 3);
        assert_eq!(q.groups[0].suffix, "");
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.group_policy, Some(GroupPolicy::Isolate));
        assert!(parse(
            &p("resources1=VF:1&resources2=VF:1"),
            Microversion::new(1, 25)
        )
        .unwrap_err()
        .message
        .contains("group_policy"));
        assert!(parse(
            &p("resources=VCPU:1&required1=FOO"),
            Microversion::new(1, 25)
        )
        .unwrap_err()
        .message
        .contains("orphaned traits keys: required1"));
        // Forbidden traits alone make no orphan, as in Placement: only
        // `required1` is named (issue 68).
        let e = parse(
            &p("required=!BAR&required1=FOO&resources2=VCPU:1"),
            Microversion::new(1, 25),
        )
        .unwrap_err()
        .message;
        assert!(e.ends_with("orphaned traits keys: required1"), "{e}");
    }

    #[test]
    fn same_subtree_rules() {
        let e = parse(
            &p("resources1=VF:1&required2=FOO&group_policy=none"),
            Microversion::new(1, 36),
        )
        .unwrap_err();
        assert_eq!(e.code, Some("placement.query.bad_value"));
        let q = parse(
            &p("resources1=VF:1&required2=FOO&same_subtree=1,2&group_policy=none"),
            Microversion::new(1, 36),
        )
        .unwrap();
        assert_eq!(q.same_subtree, vec![vec!["1".to_string(), "2".to_string()]]);
        let e = parse(&p("required2=FOO&same_subtree=2"), Microversion::new(1, 36)).unwrap_err();
        assert_eq!(e.code, Some("placement.query.missing_value"));
    }
}
