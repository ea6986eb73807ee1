//! Python's `repr` and `pprint.pformat(width=72, sort_dicts=False)` of
//! decoded JSON, as jsonschema prints schemas and instances in the
//! messages Placement's clients see.

use serde_json::Value;

/// Python's `repr` of a string: single quotes unless it holds one and no
/// double quote; backslashes and control characters escaped.
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
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a float: the shortest digits that round-trip, in
/// fixed notation for exponents -4..16 and scientific otherwise
/// (`3.40282e+38`, `1e-05`, `2.0`).
pub fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: d.ddd…e±x.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let (int, frac) = if point <= 0 {
            let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
            ("0".to_string(), format!("{zeros}{digits}"))
        } else {
            let p = usize::try_from(point).unwrap_or(0);
            let padded = format!("{digits:0<p$}");
            (padded[..p].to_string(), padded[p..].to_string())
        };
        let frac = frac.trim_end_matches('0');
        let frac = if frac.is_empty() { "0" } else { frac };
        format!("{sign}{int}.{frac}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = rest.trim_end_matches('0');
        let mantissa = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exp.abs())
    }
}

/// Python's `repr` of a decoded JSON value (True, None, 'str', {'k': v}).
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) if n.is_f64() => py_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::Number(n) => n.to_string(),
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

/// The width `pprint.pformat` fits lines into (jsonschema's choice).
const WIDTH: usize = 72;

/// `pprint.pformat(v, width=72, sort_dicts=False)`.
pub fn pformat(v: &Value) -> String {
    let mut out = String::new();
    format(v, &mut out, 0, 0, 0);
    out
}

fn len(s: &str) -> usize {
    s.chars().count()
}

/// pprint's `_format`: the repr when it fits, else the container laid
/// out one item a line.
fn format(v: &Value, out: &mut String, indent: usize, allowance: usize, level: usize) {
    let rep = py_repr(v);
    let fits = WIDTH
        .checked_sub(indent + allowance)
        .is_some_and(|max_width| len(&rep) <= max_width);
    if !fits {
        match v {
            Value::Object(m) => return format_dict(m, out, indent, allowance, level + 1),
            Value::Array(a) => return format_list(a, out, indent, allowance, level + 1),
            Value::String(s) => return format_str(s, out, indent, allowance, level + 1),
            _ => {}
        }
    }
    out.push_str(&rep);
}

fn format_dict(
    m: &serde_json::Map<String, Value>,
    out: &mut String,
    indent: usize,
    allowance: usize,
    level: usize,
) {
    out.push('{');
    let indent = indent + 1;
    let last = m.len().saturating_sub(1);
    for (i, (k, v)) in m.iter().enumerate() {
        let key = py_str(k);
        out.push_str(&key);
        out.push_str(": ");
        let allow = if i == last { allowance + 1 } else { 1 };
        format(v, out, indent + len(&key) + 2, allow, level);
        if i != last {
            out.push_str(",\n");
            out.push_str(&" ".repeat(indent));
        }
    }
    out.push('}');
}

fn format_list(a: &[Value], out: &mut String, indent: usize, allowance: usize, level: usize) {
    out.push('[');
    let indent = indent + 1;
    let last = a.len().saturating_sub(1);
    for (i, v) in a.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
            out.push_str(&" ".repeat(indent));
        }
        let allow = if i == last { allowance + 1 } else { 1 };
        format(v, out, indent, allow, level);
    }
    out.push(']');
}

/// pprint's `_pprint_str`: a long string split on whitespace into adjacent
/// literals, one a line (in parentheses at the top level).
fn format_str(s: &str, out: &mut String, indent: usize, allowance: usize, level: usize) {
    let (indent, allowance) = if level == 1 {
        (indent + 1, allowance + 1)
    } else {
        (indent, allowance)
    };
    let max_width = WIDTH.saturating_sub(indent);
    let lines: Vec<&str> = s.split_inclusive('\n').collect();
    let mut chunks: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let last_line = i + 1 == lines.len();
        let rep = py_str(line);
        let max1 = if last_line {
            max_width.saturating_sub(allowance)
        } else {
            max_width
        };
        if len(&rep) <= max1 {
            chunks.push(rep);
            continue;
        }
        let parts = whitespace_parts(line);
        let mut current = String::new();
        for (j, part) in parts.iter().enumerate() {
            let candidate = format!("{current}{part}");
            let max2 = if j + 1 == parts.len() && last_line {
                max_width.saturating_sub(allowance)
            } else {
                max_width
            };
            if len(&py_str(&candidate)) > max2 {
                if !current.is_empty() {
                    chunks.push(py_str(&current));
                }
                current = part.to_string();
            } else {
                current = candidate;
            }
        }
        if !current.is_empty() {
            chunks.push(py_str(&current));
        }
    }
    if chunks.len() == 1 {
        out.push_str(&py_str(s));
        return;
    }
    if level == 1 {
        out.push('(');
    }
    for (i, c) in chunks.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(c);
    }
    if level == 1 {
        out.push(')');
    }
}

/// `re.findall(r'\S*\s*', line)` without its final empty match.
fn whitespace_parts(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && !bytes[i].1.is_whitespace() {
            i += 1;
        }
        while i < bytes.len() && bytes[i].1.is_whitespace() {
            i += 1;
        }
        let end = bytes.get(i).map_or(line.len(), |(b, _)| *b);
        parts.push(&line[start..end]);
        start = end;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_as_python_prints_them() {
        for (f, shown) in [
            (3.40282e38, "3.40282e+38"),
            (2.0, "2.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789012345.6, "123456789012345.6"),
            (-1.5, "-1.5"),
        ] {
            assert_eq!(py_float(f), shown, "{f}");
        }
    }

    #[test]
    fn short_values_stay_on_one_line() {
        assert_eq!(
            pformat(&json!({"type": "string", "maxLength": 200})),
            "{'type': 'string', 'maxLength': 200}"
        );
    }

    #[test]
    fn long_dicts_break_one_item_a_line() {
        let v = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 200}, "uuid": {"type": "string", "format": "uuid"}}});
        assert_eq!(
            pformat(&v),
            "{'type': 'object',\n 'properties': {'name': {'type': 'string', 'maxLength': 200},\n                'uuid': {'type': 'string', 'format': 'uuid'}}}"
        );
    }

    #[test]
    fn long_strings_split_on_whitespace() {
        let text = "a ".repeat(60);
        assert_eq!(
            pformat(&json!(text)),
            format!("('{}'\n '{}')", "a ".repeat(34), "a ".repeat(26))
        );
        assert_eq!(
            pformat(&json!({"k": text})),
            format!(
                "{{'k': '{}'\n      '{}'}}",
                "a ".repeat(32),
                "a ".repeat(28)
            )
        );
    }
}
