//! Policy files as oslo.policy reads them: a JSON object, or a YAML
//! mapping, of rule name to check string. The YAML read here is the part
//! of YAML policy files use (what `oslopolicy-sample-generator` writes):
//! one `name: check` per line, plain, single- or double-quoted, with `#`
//! comments and an optional `---`. Every entry keeps its line number so
//! that an error can name it.

use std::fmt;

/// One `name: check` entry and the line it is on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The rule's name.
    pub name: String,
    /// Its check string, unparsed.
    pub check: String,
    /// Where it is.
    pub line: usize,
}

/// A policy file that cannot be read, with the line at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// 1-based line (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

fn error(line: usize, message: impl Into<String>) -> FileError {
    FileError {
        line,
        message: message.into(),
    }
}

/// The entries of a policy file's text, JSON when it starts with `{`.
pub fn entries(text: &str) -> Result<Vec<Entry>, FileError> {
    let entries = if text.trim_start().starts_with('{') {
        json_entries(text)?
    } else {
        yaml_entries(text)?
    };
    let mut seen = std::collections::HashMap::new();
    for e in &entries {
        if let Some(first) = seen.insert(e.name.as_str(), e.line) {
            return Err(error(
                e.line,
                format!("rule \"{}\" is already set on line {first}", e.name),
            ));
        }
    }
    Ok(entries)
}

fn json_entries(text: &str) -> Result<Vec<Entry>, FileError> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| error(e.line(), e.to_string()))?;
    map.into_iter()
        .map(|(name, value)| {
            let line = line_of_key(text, &name);
            match value {
                serde_json::Value::String(check) => Ok(Entry { name, check, line }),
                _ => Err(error(
                    line,
                    format!("the check string of \"{name}\" is not a string"),
                )),
            }
        })
        .collect()
}

/// The line where `"name"` first appears (JSON keeps no positions).
fn line_of_key(text: &str, name: &str) -> usize {
    let quoted = serde_json::to_string(name).unwrap_or_default();
    text.find(&quoted)
        .map(|at| text[..at].matches('\n').count() + 1)
        .unwrap_or(0)
}

fn yaml_entries(text: &str) -> Result<Vec<Entry>, FileError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---" {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            return Err(error(
                line,
                "indented line: a policy file maps rule names to check strings, one per line",
            ));
        }
        let (name, rest) = scalar(trimmed, line, true)?;
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            return Err(error(line, "expected \"name: check\""));
        };
        let rest = rest.trim();
        let (check, tail) = if rest.is_empty() {
            (String::new(), "")
        } else {
            scalar(rest, line, false)?
        };
        let tail = tail.trim();
        if !(tail.is_empty() || tail.starts_with('#')) {
            return Err(error(
                line,
                format!("unexpected text after the check string: {tail}"),
            ));
        }
        if name.is_empty() {
            return Err(error(line, "empty rule name"));
        }
        out.push(Entry { name, check, line });
    }
    Ok(out)
}

/// One scalar at the start of `s` and what follows it. A plain key ends
/// at `:`; a plain value at ` #` or the end of the line.
fn scalar(s: &str, line: usize, key: bool) -> Result<(String, &str), FileError> {
    match s.chars().next() {
        Some('"') => double_quoted(&s[1..], line),
        Some('\'') => single_quoted(&s[1..], line),
        Some(c) if "[{&*|>%`".contains(c) => Err(error(
            line,
            format!("unsupported YAML ({c}): quote the check string"),
        )),
        _ => {
            let end = if key {
                s.find(": ")
                    .or_else(|| s.ends_with(':').then(|| s.len() - 1))
                    .unwrap_or(s.len())
            } else {
                s.find(" #").unwrap_or(s.len())
            };
            Ok((s[..end].trim().to_string(), &s[end..]))
        }
    }
}

fn double_quoted(s: &str, line: usize) -> Result<(String, &str), FileError> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                Some((_, '/')) => out.push('/'),
                Some((_, 't')) => out.push('\t'),
                Some((_, other)) => {
                    return Err(error(line, format!("unsupported escape \\{other}")))
                }
                None => break,
            },
            _ => out.push(c),
        }
    }
    Err(error(line, "unterminated double-quoted string"))
}

fn single_quoted(s: &str, line: usize) -> Result<(String, &str), FileError> {
    let mut out = String::new();
    let mut rest = s;
    loop {
        let Some(at) = rest.find('\'') else {
            return Err(error(line, "unterminated single-quoted string"));
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        match rest.strip_prefix('\'') {
            Some(after) => {
                out.push('\'');
                rest = after;
            }
            None => return Ok((out, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String, usize)> {
        entries(text)
            .expect("parses")
            .into_iter()
            .map(|e| (e.name, e.check, e.line))
            .collect()
    }

    #[test]
    fn yaml_as_the_sample_generator_writes_it() {
        let text = "---\n# Default rule\n#\"admin_api\": \"role:admin\"\n\n\"admin_api\": \"role:admin or role:ops\"\nplacement:usages: rule:admin_api # who may\n'service_api': 'role:service'\nproject_reader_api: \"\"\n";
        assert_eq!(
            pairs(text),
            vec![
                ("admin_api".into(), "role:admin or role:ops".into(), 5),
                ("placement:usages".into(), "rule:admin_api".into(), 6),
                ("service_api".into(), "role:service".into(), 7),
                ("project_reader_api".into(), "".into(), 8),
            ]
        );
        assert_eq!(pairs("\"a\": '@'\nb: !\n")[1].1, "!");
        assert_eq!(pairs("a: 'it''s'\n")[0].1, "it's");
    }

    #[test]
    fn json_with_line_numbers() {
        let text = "{\n  \"admin_api\": \"role:admin\",\n  \"service_api\": \"@\"\n}\n";
        assert_eq!(
            pairs(text),
            vec![
                ("admin_api".into(), "role:admin".into(), 2),
                ("service_api".into(), "@".into(), 3),
            ]
        );
    }

    #[test]
    fn errors_name_their_line() {
        for (text, line) in [
            ("a: role:x\n  b: role:y\n", 2),
            ("a: role:x\nb role:y\n", 2),
            ("a: \"role:x\n", 1),
            ("a: 'x' trailing\n", 1),
            ("a: [role:x]\n", 1),
            ("a: role:x\na: role:y\n", 2),
            ("{\n \"a\": 1\n}", 2),
            ("{\n \"a\": \"x\",\n}", 3),
        ] {
            let e = entries(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
    }
}
