//! A JSON Schema validator whose errors read exactly as Python jsonschema
//! 4.26 (the release openstack-placement 16.0.0 installs with) words them
//! under its default Draft 2020-12 validator, because Placement's clients
//! and tests match those texts (`'name' is a required property`,
//! `{} should be non-empty`, `Failed validating 'minimum' in
//! schema['properties']['total']: ...`).
//!
//! Supported keywords: type, properties, patternProperties,
//! additionalProperties, required, minProperties, maxProperties, items,
//! minItems, maxItems, uniqueItems, minLength, maxLength, pattern, format
//! (uuid), minimum, maximum, enum, anyOf. Every keyword of the schema is
//! evaluated in the schema's own order, as jsonschema does, and the error
//! reported is the one its `best_match` picks.

use crate::api::schema::pyrepr::{pformat, py_repr, py_str};
use regex::Regex;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// One step of a path into a schema or an instance: a key or an index,
/// printed as Python prints them (`['key']`, `[2]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An object key.
    Key(String),
    /// An array index (or an `anyOf` branch).
    Index(usize),
}

impl Step {
    fn py(&self) -> String {
        match self {
            Step::Key(k) => py_str(k),
            Step::Index(i) => i.to_string(),
        }
    }
}

impl PartialOrd for Step {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Step {
    /// As Python compares the path items of siblings (keys with keys,
    /// indexes with indexes).
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Step::Key(a), Step::Key(b)) => a.cmp(b),
            (Step::Index(a), Step::Index(b)) => a.cmp(b),
            (Step::Index(_), Step::Key(_)) => Ordering::Less,
            (Step::Key(_), Step::Index(_)) => Ordering::Greater,
        }
    }
}

/// One validation failure, ready to print as Placement prints it.
#[derive(Debug, Clone)]
pub struct SchemaError {
    /// jsonschema's one-line message.
    pub message: String,
    /// The failing keyword (`minimum`, `required`, ...).
    pub keyword: String,
    /// From the schema given to the keyword, the keyword included.
    schema_path: Vec<Step>,
    /// From the instance given to the validation.
    instance_path: Vec<Step>,
    /// The (sub)schema holding the keyword.
    sub_schema: Value,
    /// The failing value.
    instance: Value,
    /// For `anyOf`: every branch's errors, their paths relative to it.
    context: Vec<SchemaError>,
}

impl SchemaError {
    /// The text of Python's `str(error)`: the message, the keyword's
    /// schema and the instance, each pretty-printed.
    pub fn render(&self) -> String {
        let index = |container: &str, steps: &[Step]| {
            let mut s = container.to_string();
            for step in steps {
                s.push_str(&format!("[{}]", step.py()));
            }
            s
        };
        let schema_path = index(
            "schema",
            &self.schema_path[..self.schema_path.len().saturating_sub(1)],
        );
        let pretty = |v: &Value| pformat(v).replace('\n', "\n    ");
        format!(
            "{}\n\nFailed validating {} in {}:\n    {}\n\nOn {}:\n    {}",
            self.message,
            py_str(&self.keyword),
            schema_path,
            pretty(&self.sub_schema),
            index("instance", &self.instance_path),
            pretty(&self.instance)
        )
    }

    /// Where in the body the failing value is, as a JSON pointer (`""`
    /// for the body itself, `/requests/0/expire_in`).
    pub fn pointer(&self) -> String {
        self.instance_path
            .iter()
            .map(|step| match step {
                Step::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
                Step::Index(i) => format!("/{i}"),
            })
            .collect()
    }

    /// jsonschema's `relevance`: shallower, then later siblings, then
    /// strong keywords, then an instance of the schema's own type.
    fn relevance(&self) -> (isize, &[Step], bool, bool) {
        let depth = isize::try_from(self.instance_path.len()).unwrap_or(isize::MAX);
        (
            -depth,
            &self.instance_path,
            self.keyword != "anyOf",
            !self.matches_type(),
        )
    }

    fn matches_type(&self) -> bool {
        match self.sub_schema.get("type") {
            Some(Value::String(t)) => type_matches(t, &self.instance),
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, &self.instance)),
            _ => false,
        }
    }
}

/// jsonschema's `best_match`: the most relevant error (the first of equals),
/// then down an `anyOf` into its least relevant branch error unless two tie.
fn best_match(errors: Vec<SchemaError>) -> Option<SchemaError> {
    let mut best: Option<SchemaError> = None;
    for e in errors {
        if best.as_ref().is_none_or(|b| e.relevance() > b.relevance()) {
            best = Some(e);
        }
    }
    let mut best = best?;
    while !best.context.is_empty() {
        let mut context = std::mem::take(&mut best.context);
        context.sort_by(|a, b| a.relevance().cmp(&b.relevance()));
        if context.len() >= 2 && context[0].relevance() == context[1].relevance() {
            best.context = context;
            return Some(best);
        }
        best = context.swap_remove(0);
    }
    Some(best)
}

/// Validates `instance` against `schema`, returning the best error.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), Box<SchemaError>> {
    let mut walk = Walk::default();
    walk.check(schema, instance);
    match best_match(walk.errors) {
        None => Ok(()),
        Some(e) => Err(Box::new(e)),
    }
}

/// Writes the numbers a schema types `integer` as integers (`1.0` → `1`):
/// valid under Draft 2020-12, and what Placement stores, so the typed
/// request sees an integer. Call it on a validated instance.
pub fn integers_as_integers(schema: &Value, instance: &mut Value) {
    let Some(keywords) = schema.as_object() else {
        return;
    };
    let integer = match keywords.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
        _ => false,
    };
    if integer {
        if let Some(i) = instance
            .as_f64()
            .filter(|f| f.fract() == 0.0)
            .and_then(whole)
        {
            *instance = Value::from(i);
        }
    }
    for branch in keywords
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        integers_as_integers(branch, instance);
    }
    match instance {
        Value::Object(map) => {
            let props = keywords.get("properties").and_then(Value::as_object);
            let patterns = keywords.get("patternProperties").and_then(Value::as_object);
            let additional = keywords
                .get("additionalProperties")
                .filter(|a| a.is_object());
            for (k, v) in map.iter_mut() {
                let declared = props.and_then(|p| p.get(k));
                let matched = patterns.and_then(|p| {
                    p.iter()
                        .find(|(re, _)| regex(re).is_some_and(|r| r.is_match(k)))
                        .map(|(_, sub)| sub)
                });
                for sub in [declared, matched].into_iter().flatten() {
                    integers_as_integers(sub, v);
                }
                if let (None, None, Some(sub)) = (declared, matched, additional) {
                    integers_as_integers(sub, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = keywords.get("items") {
                for v in items {
                    integers_as_integers(sub, v);
                }
            }
        }
        _ => {}
    }
}

/// A whole f64 as i64 when it is one exactly.
fn whole(f: f64) -> Option<i64> {
    let text = format!("{f:.0}");
    text.parse::<i64>().ok()
}

/// The compiled pattern, shared: a cloned `Regex` starts an empty match
/// cache of its own, which every request then rebuilt.
fn regex(pattern: &str) -> Option<Arc<Regex>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut guard = cache.lock().ok()?;
    if let Some(r) = guard.get(pattern) {
        return Some(r.clone());
    }
    let r = Arc::new(Regex::new(pattern).ok()?);
    guard.insert(pattern.to_string(), r.clone());
    Some(r)
}

/// Draft 2020-12's types: 1.0 is an integer, booleans are not numbers.
fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => is_integer(v),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// An integer in Draft 2020-12's sense: any number without a fraction.
pub fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) if n.is_f64() => n.as_f64().is_some_and(|f| f.fract() == 0.0),
        Value::Number(_) => true,
        _ => false,
    }
}

/// The walk through a schema and an instance: where it is in each, and
/// the errors so far.
#[derive(Default)]
struct Walk {
    schema_path: Vec<Step>,
    instance_path: Vec<Step>,
    errors: Vec<SchemaError>,
}

impl Walk {
    fn fail(&mut self, keyword: &str, message: String, schema: &Value, instance: &Value) {
        let mut schema_path = self.schema_path.clone();
        schema_path.push(Step::Key(keyword.to_string()));
        self.errors.push(SchemaError {
            message,
            keyword: keyword.to_string(),
            schema_path,
            instance_path: self.instance_path.clone(),
            sub_schema: schema.clone(),
            instance: instance.clone(),
            context: Vec::new(),
        });
    }

    /// Checks `instance` against `sub` one level down: `schema_steps` into
    /// the schema, `instance_step` (if any) into the instance.
    fn descend(
        &mut self,
        sub: &Value,
        instance: &Value,
        schema_steps: &[Step],
        instance_step: Option<Step>,
    ) {
        let (sl, il) = (self.schema_path.len(), self.instance_path.len());
        self.schema_path.extend_from_slice(schema_steps);
        self.instance_path.extend(instance_step);
        self.check(sub, instance);
        self.schema_path.truncate(sl);
        self.instance_path.truncate(il);
    }

    /// Every keyword of `schema`, in its order.
    fn check(&mut self, schema: &Value, inst: &Value) {
        let Some(keywords) = schema.as_object() else {
            return;
        };
        for (kw, arg) in keywords {
            match (kw.as_str(), inst) {
                ("type", _) => self.type_(arg, schema, inst),
                ("enum", _) => self.enum_(arg, schema, inst),
                ("anyOf", _) => self.any_of(arg, schema, inst),
                ("properties", Value::Object(m)) => self.properties(arg, m),
                ("patternProperties", Value::Object(m)) => self.pattern_properties(arg, m),
                ("additionalProperties", Value::Object(m)) => {
                    self.additional_properties(arg, schema, m, inst)
                }
                ("required", Value::Object(m)) => self.required(arg, schema, m, inst),
                ("minProperties" | "maxProperties", Value::Object(m)) => {
                    self.size(kw, arg, m.len(), "properties", schema, inst)
                }
                ("items", Value::Array(items)) => {
                    for (i, v) in items.iter().enumerate() {
                        self.descend(arg, v, &[Step::Key("items".into())], Some(Step::Index(i)));
                    }
                }
                ("minItems" | "maxItems", Value::Array(items)) => {
                    self.size(kw, arg, items.len(), "items", schema, inst)
                }
                ("uniqueItems", Value::Array(items)) => self.unique(arg, items, schema, inst),
                ("minLength" | "maxLength", Value::String(s)) => {
                    self.size(kw, arg, s.chars().count(), "string", schema, inst)
                }
                ("pattern", Value::String(s)) => self.pattern(arg, s, schema, inst),
                ("format", Value::String(s)) => self.format(arg, s, schema, inst),
                ("minimum" | "maximum", Value::Number(_)) => self.bound(kw, arg, schema, inst),
                _ => {}
            }
        }
    }

    fn type_(&mut self, arg: &Value, schema: &Value, inst: &Value) {
        let types: Vec<&str> = match arg {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => return,
        };
        if !types.iter().any(|t| type_matches(t, inst)) {
            let names: Vec<String> = types.iter().map(|t| py_str(t)).collect();
            let msg = format!("{} is not of type {}", py_repr(inst), names.join(", "));
            self.fail("type", msg, schema, inst);
        }
    }

    fn enum_(&mut self, arg: &Value, schema: &Value, inst: &Value) {
        if arg
            .as_array()
            .is_some_and(|options| !options.contains(inst))
        {
            let msg = format!("{} is not one of {}", py_repr(inst), py_repr(arg));
            self.fail("enum", msg, schema, inst);
        }
    }

    /// Each branch is checked on its own, its errors kept (relative to the
    /// branch) as the `anyOf` error's context.
    fn any_of(&mut self, arg: &Value, schema: &Value, inst: &Value) {
        let Some(branches) = arg.as_array() else {
            return;
        };
        let mut context = Vec::new();
        for (i, branch) in branches.iter().enumerate() {
            let mut sub = Walk {
                schema_path: vec![Step::Index(i)],
                ..Walk::default()
            };
            sub.check(branch, inst);
            if sub.errors.is_empty() {
                return;
            }
            context.extend(sub.errors);
        }
        let msg = format!(
            "{} is not valid under any of the given schemas",
            py_repr(inst)
        );
        self.fail("anyOf", msg, schema, inst);
        if let Some(e) = self.errors.last_mut() {
            e.context = context;
        }
    }

    fn properties(&mut self, arg: &Value, map: &Map<String, Value>) {
        for (name, sub) in arg.as_object().into_iter().flatten() {
            if let Some(v) = map.get(name) {
                let steps = [Step::Key("properties".into()), Step::Key(name.clone())];
                self.descend(sub, v, &steps, Some(Step::Key(name.clone())));
            }
        }
    }

    fn pattern_properties(&mut self, arg: &Value, map: &Map<String, Value>) {
        for (pattern, sub) in arg.as_object().into_iter().flatten() {
            let Some(re) = regex(pattern) else { continue };
            for (k, v) in map.iter().filter(|(k, _)| re.is_match(k)) {
                let steps = [
                    Step::Key("patternProperties".into()),
                    Step::Key(pattern.clone()),
                ];
                self.descend(sub, v, &steps, Some(Step::Key(k.clone())));
            }
        }
    }

    fn additional_properties(
        &mut self,
        arg: &Value,
        schema: &Value,
        map: &Map<String, Value>,
        inst: &Value,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let patterns: Vec<&String> = schema
            .get("patternProperties")
            .and_then(Value::as_object)
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        let mut extras: Vec<&String> = map
            .keys()
            .filter(|k| !props.is_some_and(|p| p.contains_key(*k)))
            .filter(|k| {
                !patterns
                    .iter()
                    .any(|p| regex(p).is_some_and(|r| r.is_match(k)))
            })
            .collect();
        if extras.is_empty() {
            return;
        }
        extras.sort();
        let listed = |items: &[&String]| -> String {
            items
                .iter()
                .map(|e| py_str(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let msg = match arg {
            Value::Object(_) => {
                for k in extras {
                    self.descend(
                        arg,
                        &map[k],
                        &[Step::Key("additionalProperties".into())],
                        Some(Step::Key(k.clone())),
                    );
                }
                return;
            }
            Value::Bool(false) if !patterns.is_empty() => {
                let mut sorted = patterns.clone();
                sorted.sort();
                let verb = if extras.len() == 1 { "does" } else { "do" };
                format!(
                    "{} {verb} not match any of the regexes: {}",
                    listed(&extras),
                    listed(&sorted)
                )
            }
            Value::Bool(false) => {
                let verb = if extras.len() == 1 { "was" } else { "were" };
                format!(
                    "Additional properties are not allowed ({} {verb} unexpected)",
                    listed(&extras)
                )
            }
            _ => return,
        };
        self.fail("additionalProperties", msg, schema, inst);
    }

    fn required(&mut self, arg: &Value, schema: &Value, map: &Map<String, Value>, inst: &Value) {
        let names = arg
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        for name in names.filter(|n| !map.contains_key(*n)) {
            let msg = format!("{} is a required property", py_str(name));
            self.fail("required", msg, schema, inst);
        }
    }

    /// minLength/maxLength, minItems/maxItems, minProperties/maxProperties,
    /// with jsonschema 4.26's wording (`should be non-empty` for a minimum
    /// of 1, `is expected to be empty` for a maximum of 0).
    fn size(
        &mut self,
        kw: &str,
        arg: &Value,
        size: usize,
        what: &str,
        schema: &Value,
        inst: &Value,
    ) {
        let Some(bound) = arg.as_u64().and_then(|b| usize::try_from(b).ok()) else {
            return;
        };
        let minimum = kw.starts_with("min");
        let failed = if minimum { size < bound } else { size > bound };
        if !failed {
            return;
        }
        let wording = match (minimum, bound, what) {
            (true, 1, _) => "should be non-empty",
            (false, 0, _) => "is expected to be empty",
            (true, _, "properties") => "does not have enough properties",
            (false, _, "properties") => "has too many properties",
            (true, _, _) => "is too short",
            (false, _, _) => "is too long",
        };
        self.fail(kw, format!("{} {wording}", py_repr(inst)), schema, inst);
    }

    /// Linear in the items (a set of their canonical texts, objects'
    /// keys sorted, so equal values print alike): pairwise comparison
    /// took 13.9 s for 60,000 uuids.
    fn unique(&mut self, arg: &Value, items: &[Value], schema: &Value, inst: &Value) {
        if arg.as_bool() != Some(true) {
            return;
        }
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let duplicated = !items.iter().all(|v| seen.insert(canonical(v)));
        if duplicated {
            let msg = format!("{} has non-unique elements", py_repr(inst));
            self.fail("uniqueItems", msg, schema, inst);
        }
    }

    /// Python's `re.search`: unanchored unless the pattern anchors.
    fn pattern(&mut self, arg: &Value, s: &str, schema: &Value, inst: &Value) {
        if let Some(p) = arg.as_str() {
            if regex(p).is_some_and(|r| !r.is_match(s)) {
                let msg = format!("{} does not match {}", py_repr(inst), py_str(p));
                self.fail("pattern", msg, schema, inst);
            }
        }
    }

    /// Placement's own format checker knows `uuid` (dashes optional). It
    /// also refuses non-strings, but every such schema types its value, and
    /// the type error, first in the schema, is the one reported.
    fn format(&mut self, arg: &Value, s: &str, schema: &Value, inst: &Value) {
        if arg.as_str() == Some("uuid") && crate::types::parse_uuid_like(s).is_none() {
            let msg = format!("{} is not a 'uuid'", py_repr(inst));
            self.fail("format", msg, schema, inst);
        }
    }

    fn bound(&mut self, kw: &str, arg: &Value, schema: &Value, inst: &Value) {
        let (Some(x), Some(bound)) = (inst.as_f64(), arg.as_f64()) else {
            return;
        };
        let (failed, wording) = match kw {
            "minimum" => (x < bound, "is less than the minimum of"),
            _ => (x > bound, "is greater than the maximum of"),
        };
        if failed {
            let msg = format!("{} {wording} {}", py_repr(inst), py_repr(arg));
            self.fail(kw, msg, schema, inst);
        }
    }
}

#[cfg(test)]
mod tests;

/// A value's text with every object's keys in order: equal JSON values
/// (as `==` compares them, keys in any order) give equal texts.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by_key(|(k, _)| *k);
            let fields: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}
