//! Policy files as oslo.policy reads them: JSON, else YAML (a maintained
//! YAML reader: folded and continued values, anchors and aliases, a
//! byte-order mark, a JSON object with a trailing comma), one mapping of
//! rule name to check string. Every entry keeps its line number so that
//! an error can name it. Refused where PyYAML would take a value oslo.policy
//! then reads as "everyone": an unquoted `!` (a YAML tag), and any tagged
//! value; and a rule set twice, which PyYAML lets the last one win.

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
    // oslo.policy tries JSON, then YAML (which reads a JSON object with a
    // trailing comma, for one); an error names the YAML reading's line,
    // or the JSON one's when the text is meant as JSON and YAML agrees
    // it is not.
    let entries = match json_entries(text) {
        Ok(entries) => entries,
        Err(json) => match yaml_entries(text) {
            Ok(entries) => entries,
            Err(yaml) if text.trim_start().starts_with('{') && json.line > 0 => {
                return Err(FileError {
                    line: json.line,
                    message: format!("{} (as YAML: {})", json.message, yaml),
                })
            }
            Err(yaml) => return Err(yaml),
        },
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

/// The YAML reading: the file's one document, a mapping of rule name to
/// check string, as PyYAML's `safe_load` gives it to oslo.policy.
fn yaml_entries(text: &str) -> Result<Vec<Entry>, FileError> {
    use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
    let docs = MarkedYaml::load_from_str(text)
        .map_err(|e| error(e.marker().line(), e.info().to_string()))?;
    let doc = match docs.as_slice() {
        [] => return Ok(Vec::new()),
        [doc] => doc,
        [_, second, ..] => {
            return Err(error(
                second.span.start.line(),
                "a second YAML document: a policy file is one mapping",
            ))
        }
    };
    let mapping = match &doc.data {
        YamlData::Mapping(m) => m,
        YamlData::Value(Scalar::Null) => return Ok(Vec::new()),
        _ => {
            return Err(error(
                doc.span.start.line(),
                "a policy file is a mapping of rule names to check strings",
            ))
        }
    };
    let mut out = Vec::with_capacity(mapping.len());
    for (key, value) in mapping.iter() {
        let line = key.span.start.line();
        let name = match &key.data {
            YamlData::Value(Scalar::String(s)) => s.to_string(),
            _ => return Err(error(line, "a rule name is not a string")),
        };
        let check = match &value.data {
            YamlData::Value(Scalar::String(s)) => s.to_string(),
            // `name:` with nothing after it is None to oslo.policy, which
            // reads it as "" (everyone), as it does an empty string.
            YamlData::Value(Scalar::Null) => String::new(),
            YamlData::Tagged(tag, inner) => {
                let bare = matches!(&inner.data, YamlData::Value(Scalar::Null))
                    || matches!(&inner.data, YamlData::Value(Scalar::String(s)) if s.is_empty());
                // The non-specific tag `!` (saphyr spells it handle "",
                // suffix "!").
                let non_specific = format!("{}{}", tag.handle, tag.suffix) == "!";
                let message = if non_specific && bare {
                    // PyYAML reads `name: !` as an empty string, which
                    // oslo.policy takes as "everyone": meant as "nobody".
                    format!("the check string of \"{name}\" is an unquoted !, which YAML reads as a tag with an empty value (everyone, to oslo.policy): write \"!\" in quotes for nobody")
                } else {
                    format!(
                        "the check string of \"{name}\" carries a YAML tag ({}{}): quote it",
                        tag.handle, tag.suffix
                    )
                };
                return Err(error(value.span.start.line(), message));
            }
            _ => {
                return Err(error(
                    value.span.start.line(),
                    format!("the check string of \"{name}\" is not a string"),
                ))
            }
        };
        if name.is_empty() {
            return Err(error(line, "empty rule name"));
        }
        out.push(Entry { name, check, line });
    }
    Ok(out)
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
        assert_eq!(pairs("\"a\": '@'\nb: \"!\"\n")[1].1, "!");
        // What PyYAML reads alike: folded, continued, aliased, after a BOM.
        assert_eq!(
            pairs("a: >-\n  role:x\n  or role:y\n")[0].1,
            "role:x or role:y"
        );
        assert_eq!(pairs("a: role:x\n  or role:y\n")[0].1, "role:x or role:y");
        assert_eq!(
            pairs("a: &r role:x\nb: *r\n")[1],
            ("b".into(), "role:x".into(), 2)
        );
        assert_eq!(pairs("\u{feff}a: role:x\n")[0].1, "role:x");
        assert_eq!(pairs("{\"a\": \"role:x\",}\n")[0].1, "role:x");
        assert_eq!(pairs("a:\n")[0].1, "");
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
            ("a: role:x\nb role:y\n", 3),
            ("a: \"role:x\n", 1),
            ("a: 'x' trailing\n", 1),
            ("a: [role:x]\n", 1),
            ("a: role:x\na: role:y\n", 2),
            ("{\n \"a\": 1\n}", 2),
            ("x: role:y\na: !\n", 2),
            ("a: !!str\nb: !custom role:x\n", 2),
            ("a: @\n", 1),
            ("- a\n- b\n", 1),
        ] {
            let e = entries(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
    }
}
