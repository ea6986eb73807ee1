//! The policy engine, as oslo.policy enforces Placement's rules: every
//! registered rule with its default check string; the legacy mode, where a
//! rule with a deprecated default accepts `new or deprecated`, or
//! `enforce_new_defaults`, where only the new one counts; scope types
//! checked under `enforce_scope`; and a policy file whose rules replace
//! the defaults. Everything that can be wrong with a policy (a check
//! string that does not parse, an unknown rule, a `rule:` cycle) is found
//! when it is built, so a bad policy stops start-up instead of denying or
//! admitting at request time.

pub mod defaults;
pub mod file;
pub mod parse;
pub mod source;

use parse::Check;
use std::collections::HashMap;
use std::fmt;

/// A token's scope, and the scopes a rule admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Scoped to a project.
    Project,
    /// Scoped to the whole deployment (`system_scope: all`).
    System,
    /// Scoped to a domain.
    Domain,
}

/// How the defaults are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mode {
    /// Only the new defaults count (oslo's `enforce_new_defaults`).
    pub enforce_new_defaults: bool,
    /// A token outside a rule's scope types is refused (`enforce_scope`).
    pub enforce_scope: bool,
}

/// Who is asking, as the token (or noauth2) says.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The user.
    pub user_id: String,
    /// The project a project-scoped token is for.
    pub project_id: Option<String>,
    /// The domain of a domain-scoped token.
    pub domain_id: Option<String>,
    /// Role names, lower case.
    pub roles: Vec<String>,
    /// `all` for a system-scoped token.
    pub system_scope: Option<String>,
}

impl Credentials {
    /// The token's scope: system, domain, else project.
    pub fn scope(&self) -> Scope {
        if self.system_scope.is_some() {
            Scope::System
        } else if self.domain_id.is_some() && self.project_id.is_none() {
            Scope::Domain
        } else {
            Scope::Project
        }
    }

    fn field(&self, kind: &str) -> Option<&str> {
        match kind {
            "user_id" => Some(&self.user_id),
            "project_id" | "tenant" | "tenant_id" => self.project_id.as_deref(),
            "domain_id" => self.domain_id.as_deref(),
            "system_scope" => self.system_scope.as_deref(),
            _ => None,
        }
    }
}

/// What a rule is checked against: `%(key)s` in a check string reads it.
pub type Target = HashMap<&'static str, String>;

/// The result of one enforcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The rule passes.
    Allowed,
    /// The rule's check fails.
    Denied,
    /// The token's scope is not one the rule admits (scope enforced).
    OutOfScope,
}

/// A policy that cannot be used, naming where it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

#[derive(Debug, Clone)]
struct Rule {
    check: Check,
    scope_types: Option<&'static [Scope]>,
}

/// The rules in force.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: HashMap<String, Rule>,
    mode: Mode,
    /// What the policy file does that oslo.policy accepts but that is
    /// probably a mistake (a rule no route checks, a `rule:` naming no
    /// rule), one line each, for the log.
    pub warnings: Vec<String>,
}

/// oslo.policy's `policy_default_rule`: a `rule:` reference to a rule that
/// does not exist means this one, when the file defines it.
const DEFAULT_RULE: &str = "default";

/// How deep `rule:` references are followed before a check is denied
/// (the `default` rule can name an undefined rule, which means `default`).
/// A file whose references chain deeper is refused.
const MAX_RULE_DEPTH: usize = 64;

/// The largest policy file read: Placement's whole policy written out is
/// under 10 KiB.
const MAX_FILE_BYTES: usize = 1024 * 1024;

impl Policy {
    /// Placement's rules and this service's own ([`defaults`]) under
    /// `mode`, with the overrides of a policy file's text (`path` names it
    /// in errors).
    pub fn build(mode: Mode, overrides: Option<(&str, &str)>) -> Result<Self, PolicyError> {
        let mut rules = HashMap::new();
        for d in defaults::PLACEMENT_RULES {
            let check = default_check(d.check, d.deprecated, mode)
                .map_err(|e| PolicyError(format!("default of {}: {e}", d.name)))?;
            rules.insert(
                d.name.to_string(),
                Rule {
                    check,
                    scope_types: d.scope_types,
                },
            );
        }
        for (name, default) in defaults::EXTENSION_RULES {
            let check = parse::parse(default)
                .map_err(|e| PolicyError(format!("default of {name}: {e}")))?;
            rules.entry(name.to_string()).or_insert(Rule {
                check,
                scope_types: Some(&[Scope::Project]),
            });
        }
        let mut policy = Policy {
            rules,
            mode,
            warnings: Vec::new(),
        };
        let mut lines = HashMap::new();
        if let Some((path, text)) = overrides {
            lines = policy.apply_file(path, text)?;
        }
        policy.check_references(|name| match (overrides, lines.get(name)) {
            (Some((path, _)), Some(line)) => format!("policy file {path}: line {line}: "),
            _ => String::new(),
        })?;
        Ok(policy)
    }

    /// Applies a policy file's rules; each rule's line, for errors.
    fn apply_file(
        &mut self,
        path: &str,
        text: &str,
    ) -> Result<HashMap<String, usize>, PolicyError> {
        let at = |line: usize, msg: String| {
            PolicyError(format!("policy file {path}: line {line}: {msg}"))
        };
        if text.len() > MAX_FILE_BYTES {
            return Err(PolicyError(format!(
                "policy file {path}: {} bytes, over the limit of {MAX_FILE_BYTES}",
                text.len()
            )));
        }
        let entries =
            file::entries(text).map_err(|e| PolicyError(format!("policy file {path}: {e}")))?;
        let mut parsed = Vec::with_capacity(entries.len());
        for e in &entries {
            let check =
                parse::parse(&e.check).map_err(|err| at(e.line, format!("{}: {err}", e.name)))?;
            parsed.push(check);
        }
        // Every name some rule of the file refers to, read once (asking
        // each rule about every other one was quadratic in the file).
        let referred: std::collections::HashSet<String> = parsed
            .iter()
            .flat_map(references)
            .map(str::to_string)
            .collect();
        for (e, check) in entries.iter().zip(parsed) {
            match self.rules.get_mut(&e.name) {
                Some(rule) => rule.check = check,
                None => {
                    // oslo.policy keeps a rule no route is checked against
                    // (`default`, `context_is_admin`, helpers other rules name).
                    if !matches!(e.name.as_str(), DEFAULT_RULE | "context_is_admin")
                        && !referred.contains(&e.name)
                    {
                        self.warnings.push(format!(
                            "policy file {path}: line {}: \"{}\" is no rule of this service and no other rule refers to it",
                            e.line, e.name
                        ));
                    }
                    self.rules.insert(
                        e.name.clone(),
                        Rule {
                            check,
                            scope_types: None,
                        },
                    );
                }
            }
        }
        for e in &entries {
            let Some(rule) = self.rules.get(&e.name) else {
                continue;
            };
            let unknown: Vec<String> = references(&rule.check)
                .into_iter()
                .filter(|r| !self.knows(r))
                .map(str::to_string)
                .collect();
            for unknown in unknown {
                let meaning = if self.knows(DEFAULT_RULE) {
                    "the default rule applies there"
                } else {
                    "it denies"
                };
                self.warnings.push(format!(
                    "policy file {path}: line {}: {} refers to rule \"{unknown}\", which is not defined: {meaning} (as in oslo.policy)",
                    e.line, e.name
                ));
            }
        }
        Ok(entries.into_iter().map(|e| (e.name, e.line)).collect())
    }

    /// No rule reaches itself through `rule:` references (oslo.policy
    /// would recurse without end at the first request), and no chain of
    /// them is longer than enforcement follows ([`MAX_RULE_DEPTH`], past
    /// which a check would be denied without a word). One depth-first
    /// pass over the rules, each rule's longest chain remembered, on a
    /// stack of its own: asked rule by rule, a chain of 5,000 references
    /// took 44 s to check, and recursion a file could make overflow.
    /// `where_is` names a rule's place in the file for the error.
    fn check_references(&self, where_is: impl Fn(&str) -> String) -> Result<(), PolicyError> {
        /// A rule being walked, or walked with the longest chain from it.
        enum Mark {
            Open,
            Longest(usize),
        }
        let known = |name: &str| -> Vec<&str> {
            self.rules.get(name).map_or_else(Vec::new, |r| {
                references(&r.check)
                    .into_iter()
                    .filter(|n| self.knows(n))
                    .collect()
            })
        };
        let chain = |stack: &[(&str, Vec<&str>, usize)], last: &str| {
            let mut names: Vec<&str> = stack.iter().map(|(n, _, _)| *n).collect();
            names.push(last);
            if names.len() > 8 {
                let tail = names.split_off(names.len() - 3);
                names.truncate(4);
                names.push("…");
                names.extend(tail);
            }
            names.join(" -> ")
        };
        let mut marks: HashMap<&str, Mark> = HashMap::new();
        let mut names: Vec<&str> = self.rules.keys().map(String::as_str).collect();
        names.sort_unstable();
        for root in names {
            if marks.contains_key(root) {
                continue;
            }
            marks.insert(root, Mark::Open);
            let mut stack = vec![(root, known(root), 0_usize)];
            while let Some((name, refs, i)) = stack.last_mut() {
                let name = *name;
                if let Some(next) = refs.get(*i).copied() {
                    *i += 1;
                    match marks.get(next) {
                        Some(Mark::Longest(_)) => {}
                        Some(Mark::Open) => {
                            let from = stack.iter().position(|(n, _, _)| *n == next).unwrap_or(0);
                            return Err(PolicyError(format!(
                                "{}policy rules refer to each other in a cycle: {}",
                                where_is(next),
                                chain(&stack[from..], next)
                            )));
                        }
                        None => {
                            marks.insert(next, Mark::Open);
                            stack.push((next, known(next), 0));
                        }
                    }
                    continue;
                }
                let longest = 1 + refs
                    .iter()
                    .filter_map(|r| match marks.get(r) {
                        Some(Mark::Longest(n)) => Some(*n),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                if longest > MAX_RULE_DEPTH + 1 {
                    return Err(PolicyError(format!(
                        "{}{name}: `rule:` references go more than {MAX_RULE_DEPTH} deep ({longest} rules in a chain), past what a check follows",
                        where_is(name)
                    )));
                }
                marks.insert(name, Mark::Longest(longest));
                stack.pop();
            }
        }
        Ok(())
    }

    /// Whether a rule of that name is registered.
    pub fn knows(&self, rule: &str) -> bool {
        self.rules.contains_key(rule)
    }

    /// Whether `creds` pass `rule` for `target`. An unknown rule is denied
    /// (handlers only name registered ones).
    pub fn enforce(&self, rule: &str, creds: &Credentials, target: &Target) -> Decision {
        let decision = match self.rules.get(rule) {
            None => Decision::Denied,
            Some(r) if self.out_of_scope(r, creds) => Decision::OutOfScope,
            Some(r) if self.passes(&r.check, creds, target) => Decision::Allowed,
            Some(_) => Decision::Denied,
        };
        tracing::debug!(rule, ?decision, "policy");
        decision
    }

    fn out_of_scope(&self, rule: &Rule, creds: &Credentials) -> bool {
        self.mode.enforce_scope
            && rule
                .scope_types
                .is_some_and(|s| !s.contains(&creds.scope()))
    }

    fn passes(&self, check: &Check, creds: &Credentials, target: &Target) -> bool {
        self.passes_within(check, creds, target, 0)
    }

    fn passes_within(
        &self,
        check: &Check,
        creds: &Credentials,
        target: &Target,
        depth: usize,
    ) -> bool {
        let passes = |c: &Check| self.passes_within(c, creds, target, depth);
        match check {
            Check::Always => true,
            Check::Never => false,
            // An undefined rule is the file's `default` rule, else denied.
            Check::Rule(name) => {
                depth < MAX_RULE_DEPTH
                    && self
                        .rules
                        .get(name)
                        .or_else(|| self.rules.get(DEFAULT_RULE))
                        .is_some_and(|r| self.passes_within(&r.check, creds, target, depth + 1))
            }
            Check::Role(role) => interpolate(role, target).is_some_and(|role| {
                let role = role.to_lowercase();
                creds.roles.contains(&role)
            }),
            Check::Generic { kind, expected } => generic(kind, expected, creds, target),
            Check::Not(c) => !passes(c),
            Check::All(cs) => cs.iter().all(passes),
            Check::Any(cs) => cs.iter().any(passes),
        }
    }
}

/// A rule's default under `mode`: the new check, or in the legacy mode
/// `new or deprecated` (oslo.policy's reading of a deprecated default).
fn default_check(
    new: &str,
    deprecated: Option<&str>,
    mode: Mode,
) -> Result<Check, parse::ParseError> {
    let check = parse::parse(new)?;
    match deprecated {
        Some(old) if !mode.enforce_new_defaults && old != new => {
            Ok(Check::Any(vec![check, parse::parse(old)?]))
        }
        _ => Ok(check),
    }
}

/// The rule names a check refers to.
fn references(check: &Check) -> Vec<&str> {
    match check {
        Check::Rule(name) => vec![name.as_str()],
        Check::Not(c) => references(c),
        Check::All(cs) | Check::Any(cs) => cs.iter().flat_map(references).collect(),
        _ => Vec::new(),
    }
}

/// `%(key)s` replaced from the target; None when a key is missing.
fn interpolate(text: &str, target: &Target) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("%(") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find(")s")?;
        out.push_str(target.get(&after[..end])?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Some(out)
}

/// `KIND:MATCH`: a quoted KIND is a literal; otherwise the caller's KIND
/// must be present and equal.
fn generic(kind: &str, expected: &str, creds: &Credentials, target: &Target) -> bool {
    let Some(expected) = interpolate(expected, target) else {
        return false;
    };
    let quoted = |q: char| kind.len() >= 2 && kind.starts_with(q) && kind.ends_with(q);
    if quoted('\'') || quoted('"') {
        return kind[1..kind.len() - 1] == expected;
    }
    if kind == "roles" {
        return creds.roles.iter().any(|r| *r == expected.to_lowercase());
    }
    creds.field(kind).is_some_and(|v| v == expected)
}

#[cfg(test)]
mod tests;
