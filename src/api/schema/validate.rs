//! A JSON Schema (Draft 4 subset) validator whose messages reproduce Python
//! jsonschema's, because Placement's clients and tests match those texts
//! (`'name' is a required property`, `Failed validating 'minimum' in ...`).
//!
//! Supported keywords: type, properties, required, additionalProperties,
//! patternProperties, minProperties, maxProperties, items, minItems,
//! maxItems, uniqueItems, minLength, maxLength, pattern, format (uuid),
//! minimum, maximum, enum, anyOf. Like jsonschema's `best_match`, the error
//! reported is the shallowest one, first in schema order.

use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One validation failure, ready to print as Placement prints it.
#[derive(Debug, Clone)]
pub struct SchemaError {
    /// jsonschema's one-line message.
    pub message: String,
    /// The failing keyword (`minimum`, `required`, ...).
    pub keyword: String,
    schema_path: Vec<String>,
    instance_path: Vec<String>,
    sub_schema: Value,
    instance: Value,
}

impl SchemaError {
    /// The multi-line text jsonschema prints for the error.
    pub fn render(&self) -> String {
        let mut sp = String::from("schema");
        for p in &self.schema_path[..self.schema_path.len().saturating_sub(1)] {
            sp.push_str(&format!("[{}]", py_repr(&Value::String(p.clone()))));
        }
        let mut ip = String::from("instance");
        for p in &self.instance_path {
            ip.push_str(&format!("[{}]", py_repr(&Value::String(p.clone()))));
        }
        format!(
            "{}\n\nFailed validating '{}' in {}:\n    {}\n\nOn {}:\n    {}",
            self.message,
            self.keyword,
            sp,
            py_repr(&self.sub_schema),
            ip,
            py_repr(&self.instance)
        )
    }
}

/// Validates `instance` against `schema`, returning the best error.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), Box<SchemaError>> {
    let mut errors = Vec::new();
    check(
        schema,
        instance,
        &mut Vec::new(),
        &mut Vec::new(),
        &mut errors,
    );
    match errors.into_iter().min_by_key(|e| e.instance_path.len()) {
        None => Ok(()),
        Some(e) => Err(Box::new(e)),
    }
}

fn regex(pattern: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut guard = cache.lock().ok()?;
    if let Some(r) = guard.get(pattern) {
        return Some(r.clone());
    }
    let r = Regex::new(pattern).ok()?;
    guard.insert(pattern.to_string(), r.clone());
    Some(r)
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        // Draft 4: 1.0 is a number, not an integer; booleans are neither.
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn push(
    errors: &mut Vec<SchemaError>,
    keyword: &str,
    message: String,
    spath: &[String],
    ipath: &[String],
    schema: &Value,
    instance: &Value,
) {
    let mut schema_path = spath.to_vec();
    schema_path.push(keyword.to_string());
    errors.push(SchemaError {
        message,
        keyword: keyword.to_string(),
        schema_path,
        instance_path: ipath.to_vec(),
        sub_schema: schema.clone(),
        instance: instance.clone(),
    });
}

// Long on purpose: one arm per JSON-Schema keyword, in the order Python's
// jsonschema reports them; split up, the table that fixes Placement's exact
// messages would be scattered.
fn check(
    schema: &Value,
    inst: &Value,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
    errors: &mut Vec<SchemaError>,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    for (kw, arg) in obj {
        match kw.as_str() {
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !types.iter().any(|t| type_matches(t, inst)) {
                    let names: Vec<String> = types.iter().map(|t| format!("'{t}'")).collect();
                    let msg = format!("{} is not of type {}", py_repr(inst), names.join(", "));
                    push(errors, kw, msg, spath, ipath, schema, inst);
                    // Other keywords would only add noise on a wrong type.
                    return;
                }
            }
            "enum" => {
                if let Some(options) = arg.as_array() {
                    if !options.contains(inst) {
                        let msg = format!("{} is not one of {}", py_repr(inst), py_repr(arg));
                        push(errors, kw, msg, spath, ipath, schema, inst);
                    }
                }
            }
            "anyOf" => {
                if let Some(options) = arg.as_array() {
                    let ok = options.iter().any(|s| validate(s, inst).is_ok());
                    // Like jsonschema's best_match: report the failure of the
                    // branch whose type fits the instance, if there is one.
                    let fitting = options.iter().find(|s| {
                        s.get("type")
                            .and_then(Value::as_str)
                            .is_some_and(|t| type_matches(t, inst))
                    });
                    if let (false, Some(branch)) = (ok, fitting) {
                        spath.push(kw.clone());
                        check(branch, inst, spath, ipath, errors);
                        spath.pop();
                    } else if !ok {
                        let msg = format!(
                            "{} is not valid under any of the given schemas",
                            py_repr(inst)
                        );
                        push(errors, kw, msg, spath, ipath, schema, inst);
                    }
                }
            }
            _ => {}
        }
        match inst {
            Value::Object(map) => check_object(kw, arg, schema, map, inst, spath, ipath, errors),
            Value::Array(items) => check_array(kw, arg, schema, items, inst, spath, ipath, errors),
            Value::String(s) => check_string(kw, arg, schema, s, inst, spath, ipath, errors),
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                let bound = arg.as_f64();
                match (kw.as_str(), bound) {
                    ("minimum", Some(m)) if x < m => push(
                        errors,
                        kw,
                        format!(
                            "{} is less than the minimum of {}",
                            py_repr(inst),
                            py_repr(arg)
                        ),
                        spath,
                        ipath,
                        schema,
                        inst,
                    ),
                    ("maximum", Some(m)) if x > m => push(
                        errors,
                        kw,
                        format!(
                            "{} is greater than the maximum of {}",
                            py_repr(inst),
                            py_repr(arg)
                        ),
                        spath,
                        ipath,
                        schema,
                        inst,
                    ),
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
// Long on purpose, like `check`: the object keywords in jsonschema's order.
fn check_object(
    kw: &str,
    arg: &Value,
    schema: &Value,
    map: &serde_json::Map<String, Value>,
    inst: &Value,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
    errors: &mut Vec<SchemaError>,
) {
    match kw {
        "properties" => {
            if let Some(props) = arg.as_object() {
                for (name, sub) in props {
                    if let Some(v) = map.get(name) {
                        spath.extend(["properties".to_string(), name.clone()]);
                        ipath.push(name.clone());
                        check(sub, v, spath, ipath, errors);
                        ipath.pop();
                        spath.truncate(spath.len() - 2);
                    }
                }
            }
        }
        "patternProperties" => {
            if let Some(pats) = arg.as_object() {
                for (pat, sub) in pats {
                    let Some(re) = regex(pat) else { continue };
                    for (k, v) in map {
                        if re.is_match(k) {
                            spath.extend(["patternProperties".to_string(), pat.clone()]);
                            ipath.push(k.clone());
                            check(sub, v, spath, ipath, errors);
                            ipath.pop();
                            spath.truncate(spath.len() - 2);
                        }
                    }
                }
            }
        }
        "additionalProperties" => {
            let props = schema.get("properties").and_then(Value::as_object);
            let pats: Vec<&String> = schema
                .get("patternProperties")
                .and_then(Value::as_object)
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            let extras: Vec<&String> = map
                .keys()
                .filter(|k| !props.is_some_and(|p| p.contains_key(*k)))
                .filter(|k| !pats.iter().any(|p| regex(p).is_some_and(|r| r.is_match(k))))
                .collect();
            if extras.is_empty() {
                return;
            }
            match arg {
                Value::Bool(false) => {
                    let msg = if !pats.is_empty() {
                        let mut sorted: Vec<&String> = extras.clone();
                        sorted.sort();
                        let mut patterns: Vec<&String> = pats.clone();
                        patterns.sort();
                        format!(
                            "{} {} not match any of the regexes: {}",
                            sorted
                                .iter()
                                .map(|e| py_str(e))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if sorted.len() == 1 { "does" } else { "do" },
                            patterns
                                .iter()
                                .map(|p| py_str(p))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    } else {
                        format!(
                            "Additional properties are not allowed ({} {} unexpected)",
                            extras
                                .iter()
                                .map(|e| py_str(e))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if extras.len() == 1 { "was" } else { "were" }
                        )
                    };
                    push(errors, kw, msg, spath, ipath, schema, inst);
                }
                Value::Object(_) => {
                    for k in extras {
                        spath.push("additionalProperties".to_string());
                        ipath.push(k.clone());
                        check(arg, &map[k], spath, ipath, errors);
                        ipath.pop();
                        spath.pop();
                    }
                }
                _ => {}
            }
        }
        "required" => {
            for name in arg
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(name) {
                    let msg = format!("{} is a required property", py_str(name));
                    push(errors, kw, msg, spath, ipath, schema, inst);
                }
            }
        }
        "minProperties" if arg.as_u64().is_some_and(|m| (map.len() as u64) < m) => {
            let msg = format!("{} does not have enough properties", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        "maxProperties" if arg.as_u64().is_some_and(|m| (map.len() as u64) > m) => {
            let msg = format!("{} has too many properties", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn check_array(
    kw: &str,
    arg: &Value,
    schema: &Value,
    items: &[Value],
    inst: &Value,
    spath: &mut Vec<String>,
    ipath: &mut Vec<String>,
    errors: &mut Vec<SchemaError>,
) {
    match kw {
        "items" => {
            for (i, v) in items.iter().enumerate() {
                spath.push("items".to_string());
                ipath.push(i.to_string());
                check(arg, v, spath, ipath, errors);
                ipath.pop();
                spath.pop();
            }
        }
        "minItems" if arg.as_u64().is_some_and(|m| (items.len() as u64) < m) => {
            let msg = format!("{} is too short", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        "maxItems" if arg.as_u64().is_some_and(|m| (items.len() as u64) > m) => {
            let msg = format!("{} is too long", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        "uniqueItems" if arg.as_bool() == Some(true) => {
            let dup = items
                .iter()
                .enumerate()
                .any(|(i, a)| items[i + 1..].iter().any(|b| a == b));
            if dup {
                let msg = format!("{} has non-unique elements", py_repr(inst));
                push(errors, kw, msg, spath, ipath, schema, inst);
            }
        }
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn check_string(
    kw: &str,
    arg: &Value,
    schema: &Value,
    s: &str,
    inst: &Value,
    spath: &mut [String],
    ipath: &mut [String],
    errors: &mut Vec<SchemaError>,
) {
    let chars = s.chars().count() as u64;
    match kw {
        "minLength" if arg.as_u64().is_some_and(|m| chars < m) => {
            let msg = format!("{} is too short", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        "maxLength" if arg.as_u64().is_some_and(|m| chars > m) => {
            let msg = format!("{} is too long", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        "pattern" => {
            if let Some(p) = arg.as_str() {
                // Python's re.search: unanchored unless the pattern anchors.
                if regex(p).is_some_and(|r| !r.is_match(s)) {
                    let msg = format!("{} does not match {}", py_repr(inst), py_str(p));
                    push(errors, kw, msg, spath, ipath, schema, inst);
                }
            }
        }
        "format" if arg.as_str() == Some("uuid") && crate::types::parse_uuid_like(s).is_none() => {
            let msg = format!("{} is not a 'uuid'", py_repr(inst));
            push(errors, kw, msg, spath, ipath, schema, inst);
        }
        _ => {}
    }
}

/// Python's `repr` of a string.
pub fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a decoded JSON value (True, None, 'str', {'k': v}).
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f.abs() < 1e16 {
                    format!("{f:.1}")
                } else {
                    format!("{f}")
                }
            } else {
                n.to_string()
            }
        }
        Value::String(s) => py_str(s),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", py_str(k), py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_match_python() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 5},
                "total": {"type": "integer", "minimum": 1}
            },
            "required": ["name"],
            "additionalProperties": false
        });
        let err = |v: Value| validate(&schema, &v).unwrap_err().message;
        assert_eq!(err(json!({})), "'name' is a required property");
        assert_eq!(
            err(json!({"name": "a", "x": 1})),
            "Additional properties are not allowed ('x' was unexpected)"
        );
        assert_eq!(err(json!({"name": "abcdefg"})), "'abcdefg' is too long");
        assert_eq!(
            err(json!({"name": "a", "total": 0})),
            "0 is less than the minimum of 1"
        );
        assert_eq!(
            err(json!({"name": "a", "total": 1.0})),
            "1.0 is not of type 'integer'"
        );
        assert_eq!(err(json!({"name": 3})), "3 is not of type 'string'");
        let e = validate(&schema, &json!({"name": "a", "total": 0})).unwrap_err();
        assert!(e
            .render()
            .contains("Failed validating 'minimum' in schema['properties']['total']"));
        assert!(validate(&schema, &json!({"name": "a", "total": 3})).is_ok());
    }

    #[test]
    fn pattern_properties_message() {
        let schema = json!({"type": "object", "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer"}}, "additionalProperties": false});
        let e = validate(&schema, &json!({"bad": 1})).unwrap_err();
        assert_eq!(
            e.message,
            "'bad' does not match any of the regexes: '^[A-Z0-9_]+$'"
        );
    }
}
