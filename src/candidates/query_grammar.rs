//! Parsing of the query parameters shared by `GET /resource_providers` and
//! `GET /allocation_candidates`: `resources`, `required` and `member_of`,
//! with Placement's error texts per microversion. Pure: no database.

use crate::microversions::Microversion;
use std::collections::BTreeSet;

fn at_least(v: Microversion, minor: u16) -> bool {
    v.at_least(1, minor)
}

/// Required and forbidden traits of one request group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraitFilter {
    /// Each set must be matched by at least one of its traits (a plain
    /// required trait is a set of one).
    pub required: Vec<BTreeSet<String>>,
    /// None of these may be present.
    pub forbidden: BTreeSet<String>,
}

impl TraitFilter {
    /// True when there is nothing to filter on.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.forbidden.is_empty()
    }

    /// Every trait name mentioned, for existence checks.
    pub fn names(&self) -> BTreeSet<String> {
        let mut all: BTreeSet<String> = self.required.iter().flatten().cloned().collect();
        all.extend(self.forbidden.iter().cloned());
        all
    }
}

pub use crate::types::AggFilter;

/// Parses `RC:N,RC:N` into ordered (class, amount) pairs.
pub fn parse_resources(qs: &str) -> Result<Vec<(String, i64)>, String> {
    if qs.trim().is_empty() {
        return Err("Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.".into());
    }
    let mut out: Vec<(String, i64)> = Vec::new();
    for item in qs.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        let [rc, amount] = parts[..] else {
            return Err(format!("Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: {item}."));
        };
        let n: i64 = amount.trim().parse().map_err(|_| {
            format!("Requested resource {rc} expected positive integer amount. Got: {amount}.")
        })?;
        if n < 1 {
            return Err(format!(
                "Requested resource {rc} requires amount >= 1. Got: {n}."
            ));
        }
        // A repeated class takes the last amount, as a Python dict would.
        if let Some(slot) = out.iter_mut().find(|(c, _)| c == rc) {
            slot.1 = n;
        } else {
            out.push((rc.to_string(), n));
        }
    }
    Ok(out)
}

/// Parses every value of a `required` (or `requiredS`) parameter.
/// Before 1.39 only the last value counts and `in:` is refused.
pub fn parse_required(values: &[&str], v: Microversion) -> Result<TraitFilter, String> {
    let allow_forbidden = at_least(v, 22);
    let used: &[&str] = if at_least(v, 39) {
        values
    } else {
        values.last().map(std::slice::from_ref).unwrap_or(&[])
    };
    let form = if allow_forbidden {
        "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
    } else {
        "HW_CPU_X86_VMX,CUSTOM_MAGIC"
    };
    let mut filter = TraitFilter::default();
    for &value in used {
        if let Some(list) = value.strip_prefix("in:") {
            if !at_least(v, 39) {
                return Err(format!(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: {value}"
                ));
            }
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            if names.iter().any(|n| n.is_empty()) {
                return Err(format!("Invalid query string parameters: Expected 'required' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {value}"));
            }
            if names.iter().any(|n| n.starts_with('!')) {
                return Err(format!("Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: {value}"));
            }
            filter
                .required
                .push(names.into_iter().map(String::from).collect());
            continue;
        }
        for name in value.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(if allow_forbidden {
                    format!("Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got an empty trait in: {value}")
                } else {
                    format!("Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got: {value}")
                });
            }
            if let Some(stripped) = name.strip_prefix('!') {
                if !allow_forbidden {
                    return Err(format!("Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got: {value}"));
                }
                // The reference strips every leading '!', so '!!T' forbids T.
                let bare = stripped.trim_start_matches('!');
                if bare.is_empty() {
                    return Err(format!("Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got an empty trait in: {value}"));
                }
                filter.forbidden.insert(bare.to_string());
            } else {
                filter.required.push(BTreeSet::from([name.to_string()]));
            }
        }
    }
    filter.required.sort();
    filter.required.dedup();
    Ok(filter)
}

/// The traits of `filter` that are both required (as a whole any-of set) and forbidden.
pub fn conflicting_traits(filter: &TraitFilter) -> Vec<String> {
    filter
        .required
        .iter()
        .filter(|set| set.iter().all(|t| filter.forbidden.contains(t)))
        .flat_map(|set| set.iter().cloned())
        .collect()
}

/// Parses every value of a `member_of` (or `member_ofS`) parameter.
pub fn parse_member_of(
    values: &[&str],
    v: Microversion,
    suffix: &str,
) -> Result<AggFilter, String> {
    if !at_least(v, 24) && values.len() > 1 {
        return Err(format!(
            "Multiple member_of{suffix} parameters are not supported"
        ));
    }
    let mut filter = AggFilter::default();
    for &raw in values {
        let (forbidden, value) = match raw.strip_prefix('!') {
            Some(rest) => {
                if !at_least(v, 32) {
                    return Err(
                        "Forbidden member_of parameters are not supported in the specified microversion"
                            .into(),
                    );
                }
                (true, rest)
            }
            None => (false, raw),
        };
        if value.contains(',') && !value.starts_with("in:") {
            return Err(format!("Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: {raw}"));
        }
        let list = value.strip_prefix("in:").unwrap_or(value);
        let mut set = BTreeSet::new();
        for item in list.split(',') {
            let u = crate::types::parse_uuid_like(item).ok_or_else(|| {
                format!("Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: {item}")
            })?;
            set.insert(u);
        }
        if forbidden {
            filter.forbidden.extend(set);
        } else {
            filter.any_of.push(set);
        }
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources() {
        assert_eq!(
            parse_resources("VCPU:2,MEMORY_MB:1024").unwrap(),
            vec![("VCPU".into(), 2), ("MEMORY_MB".into(), 1024)]
        );
        assert!(parse_resources("")
            .unwrap_err()
            .contains("Got: empty string."));
        assert!(parse_resources("VCPU").unwrap_err().contains("Got: VCPU."));
        assert!(parse_resources("VCPU:x")
            .unwrap_err()
            .contains("expected positive integer amount"));
        assert!(parse_resources("VCPU:0")
            .unwrap_err()
            .contains("requires amount >= 1. Got: 0."));
    }

    #[test]
    fn required_versions() {
        let f = parse_required(&["A,!B"], Microversion::new(1, 22)).unwrap();
        assert_eq!(f.required, vec![BTreeSet::from(["A".to_string()])]);
        assert!(f.forbidden.contains("B"));
        assert!(parse_required(&["!B"], Microversion::new(1, 21)).is_err());
        // Placement's words, lead-in included (issue 68).
        assert_eq!(
            parse_required(&["in:A,B"], Microversion::new(1, 38)).unwrap_err(),
            "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: in:A,B"
        );
        assert_eq!(
            parse_required(&["in:A,!B"], crate::microversions::LATEST).unwrap_err(),
            "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: in:A,!B"
        );
        let f = parse_required(&["A", "B"], Microversion::new(1, 38)).unwrap();
        assert_eq!(f.required.len(), 1);
        let f = parse_required(&["in:A,B", "C"], crate::microversions::LATEST).unwrap();
        assert_eq!(f.required.len(), 2);
        assert!(parse_required(&["A,,B"], Microversion::new(1, 22))
            .unwrap_err()
            .contains("empty trait"));
        let f = parse_required(&["!!!A"], Microversion::new(1, 22)).unwrap();
        assert!(f.forbidden.contains("A"));
    }

    #[test]
    fn member_of_versions() {
        let a = "a0b15655-273a-4b3d-9792-2e579b7d5ad9";
        let b = "b0b15655-273a-4b3d-9792-2e579b7d5ad9";
        assert!(parse_member_of(&[a, b], Microversion::new(1, 23), "").is_err());
        assert_eq!(
            parse_member_of(&[a, b], Microversion::new(1, 24), "")
                .unwrap()
                .any_of
                .len(),
            2
        );
        assert!(parse_member_of(&[&format!("!{a}")], Microversion::new(1, 31), "").is_err());
        assert_eq!(
            parse_member_of(&[&format!("!in:{a},{b}")], Microversion::new(1, 32), "")
                .unwrap()
                .forbidden
                .len(),
            2
        );
        assert!(
            parse_member_of(&[&format!("{a},{b}")], Microversion::new(1, 32), "")
                .unwrap_err()
                .contains("prefixed")
        );
        assert!(parse_member_of(&["x"], Microversion::new(1, 32), "")
            .unwrap_err()
            .contains("valid UUID"));
    }
}
