//! oslo.config's reading of files, for Placement's `placement.conf`:
//! where the files come from and what their text says.
//!
//! Where from: `--config-file` (repeatable) and `--config-dir` (repeatable:
//! its `*.conf` in name order), read in command-line order; without a
//! `--config-file`, `PLACEMENT_CONFIG_FILE`, else Placement's own
//! defaults: `$OS_PLACEMENT_CONFIG_DIR/placement.conf`, else the first
//! `placement.conf` in `~/.placement/`, `~/`, `/etc/placement/`, `/etc/`;
//! without a `--config-dir`, the first `placement.conf.d/` of those folders.
//!
//! What the text says (oslo.config's iniparser and template substitution):
//! `[section]` (lower-cased, `DEFAULT` in any case), `option = value` or
//! `option: value`, one pair of matching quotes around a value stripped,
//! indented lines continuing a value, `#` and `;` comments; `$name` and
//! `${name}` (the option in the same section, else in `[DEFAULT]`),
//! `${section.name}`, and `$$` or `\$` for a dollar sign. Later files win.
//! Which options mean what is `placement_conf`'s.

use std::path::{Path, PathBuf};

/// Where configuration is read from, in the order read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One file; it must exist.
    File(PathBuf),
    /// A folder's `*.conf`, in name order; it must exist.
    Dir(PathBuf),
}

/// The process environment the sources depend on.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `PLACEMENT_CONFIG_FILE` (comma-separated).
    pub config_file: Option<String>,
    /// `OS_PLACEMENT_CONFIG_DIR`: Placement's WSGI application reads
    /// `placement.conf` from there.
    pub os_placement_config_dir: Option<String>,
    /// The home folder, for oslo.config's `~/.placement/` and `~/`.
    pub home: Option<PathBuf>,
    /// Where `/etc` is (a test points it elsewhere).
    pub etc: PathBuf,
}

impl Environment {
    /// This process's.
    pub fn current() -> Environment {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Environment {
            config_file: var("PLACEMENT_CONFIG_FILE"),
            os_placement_config_dir: var("OS_PLACEMENT_CONFIG_DIR"),
            home: var("HOME").map(PathBuf::from),
            etc: PathBuf::from("/etc"),
        }
    }

    /// oslo.config's search folders for project `placement`.
    fn search_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(home) = &self.home {
            dirs.push(home.join(".placement"));
            dirs.push(home.clone());
        }
        dirs.push(self.etc.join("placement"));
        dirs.push(self.etc.clone());
        dirs
    }
}

/// The sources named on the command line (`--config-file X`,
/// `--config-file=X`, `--config-dir X`, `--config-dir=X`, in order), with
/// Placement's defaults where a kind is not named.
pub fn sources_from(args: &[String], env: &Environment) -> Vec<Source> {
    let mut named = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        for (flag, make) in [
            ("--config-file", Source::File as fn(PathBuf) -> Source),
            ("--config-dir", Source::Dir as fn(PathBuf) -> Source),
        ] {
            if a == flag {
                if let Some(v) = it.next() {
                    named.push(make(PathBuf::from(v)));
                }
            } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                named.push(make(PathBuf::from(v)));
            }
        }
    }
    let has_file = named.iter().any(|s| matches!(s, Source::File(_)));
    let has_dir = named.iter().any(|s| matches!(s, Source::Dir(_)));
    let mut out = Vec::new();
    if !has_file {
        if let Some(list) = &env.config_file {
            out.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Source::File(PathBuf::from(s))),
            );
        } else if let Some(dir) = &env.os_placement_config_dir {
            out.push(Source::File(Path::new(dir.trim()).join("placement.conf")));
        } else if let Some(found) = env
            .search_dirs()
            .into_iter()
            .map(|d| d.join("placement.conf"))
            .find(|f| f.is_file())
        {
            out.push(Source::File(found));
        }
    }
    if !has_dir {
        if let Some(found) = env
            .search_dirs()
            .into_iter()
            .map(|d| d.join("placement.conf.d"))
            .find(|d| d.is_dir())
        {
            out.push(Source::Dir(found));
        }
    }
    out.extend(named);
    out
}

/// One `option = value` and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) section: String,
    pub(super) option: String,
    pub(super) value: String,
    pub(super) file: PathBuf,
    pub(super) line: usize,
}

impl Entry {
    pub(super) fn origin(&self) -> String {
        format!(
            "config file {}: line {}: [{}] {}",
            self.file.display(),
            self.line,
            self.section,
            self.option
        )
    }
}

/// Every file's entries; for each option the last one counts.
pub(super) struct Files {
    pub(super) files: Vec<PathBuf>,
    pub(super) entries: Vec<Entry>,
}

impl Files {
    pub(super) fn read(sources: &[Source]) -> Result<Files, String> {
        let mut files = Vec::new();
        for source in sources {
            match source {
                Source::File(f) => files.push(f.clone()),
                Source::Dir(d) => {
                    let listing = std::fs::read_dir(d)
                        .map_err(|e| format!("config dir {}: {e}", d.display()))?;
                    let mut confs: Vec<PathBuf> = listing
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|x| x == "conf") && p.is_file())
                        .collect();
                    confs.sort();
                    files.extend(confs);
                }
            }
        }
        let mut entries = Vec::new();
        for path in &files {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("config file {}: {e}", path.display()))?;
            entries.extend(parse(&text, path).map_err(|(line, msg)| {
                format!("config file {}: line {line}: {msg}", path.display())
            })?);
        }
        Ok(Files { files, entries })
    }

    pub(super) fn entry(&self, section: &str, option: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.section == section && e.option == option)
    }

    /// The option's value with templates substituted, if a file sets it.
    pub(super) fn value(&self, section: &str, option: &str) -> Result<Option<String>, String> {
        let mut seen = Vec::new();
        self.substituted(section, option, &mut seen)
    }

    fn substituted(
        &self,
        section: &str,
        option: &str,
        seen: &mut Vec<(String, String)>,
    ) -> Result<Option<String>, String> {
        let Some(entry) = self.entry(section, option) else {
            return Ok(None);
        };
        let key = (section.to_string(), option.to_string());
        if seen.contains(&key) {
            return Err(format!(
                "{}: refers to itself through $names",
                entry.origin()
            ));
        }
        seen.push(key);
        let out = substitute(&entry.value, |name, at| {
            let (s, o) = match name.split_once('.') {
                Some((s, o)) => (normalize_section(s), o.to_string()),
                None if self.entry(section, name).is_some() => {
                    (section.to_string(), name.to_string())
                }
                None => ("DEFAULT".to_string(), name.to_string()),
            };
            self.substituted(&s, &o, seen)?.ok_or_else(|| {
                if may_hold_a_secret(option) {
                    // The name after the `$` is part of the secret: the
                    // position says where, the value stays unsaid.
                    format!(
                        "{}: the $ at character {at} starts the name of no option set in the config files (its value is secret, so the name is not shown; write a literal $ as $$)",
                        entry.origin()
                    )
                } else {
                    format!(
                        "{}: ${name} names no option set in the config files (set [{s}] {o})",
                        entry.origin()
                    )
                }
            })
        });
        seen.pop();
        out.map(Some)
    }
}

/// Whether an option's value may hold a secret (a password, a key, a URL
/// with credentials in it): no message quotes any part of it.
fn may_hold_a_secret(option: &str) -> bool {
    let option = option.to_ascii_lowercase();
    [
        "password",
        "secret",
        "key",
        "connection",
        "transport_url",
        "token",
    ]
    .iter()
    .any(|word| option.contains(word))
}

/// oslo.config's group names: `DEFAULT` in any case, others lower-cased.
fn normalize_section(name: &str) -> String {
    if name.eq_ignore_ascii_case("DEFAULT") {
        "DEFAULT".to_string()
    } else {
        name.to_lowercase()
    }
}

/// Python's `string.Template.safe_substitute` with oslo.config's pattern
/// (`[_a-z][._a-z0-9]*`, any case): `$$` is `$`, `$name` and `${name}`
/// are looked up, and a `$` starting neither is kept. oslo.config reads
/// `\$` as `$$` first.
/// `lookup` gets a name and where its `$` stands in the value (the
/// character, from 1).
fn substitute(
    value: &str,
    mut lookup: impl FnMut(&str, usize) -> Result<String, String>,
) -> Result<String, String> {
    let value = value.replace("\\$", "$$");
    let is_start = |c: char| c == '_' || c.is_ascii_alphabetic();
    let is_rest = |c: char| c == '_' || c == '.' || c.is_ascii_alphanumeric();
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let position = value.len() - rest.len() + at;
        let character = value[..position].chars().count() + 1;
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            let name_len = inner
                .char_indices()
                .find(|&(i, c)| if i == 0 { !is_start(c) } else { !is_rest(c) })
                .map_or(inner.len(), |(i, _)| i);
            if name_len > 0 && inner[name_len..].starts_with('}') {
                out.push_str(&lookup(&inner[..name_len], character)?);
                rest = &inner[name_len + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        } else if after.starts_with(is_start) {
            let name_len = after.find(|c: char| !is_rest(c)).unwrap_or(after.len());
            out.push_str(&lookup(&after[..name_len], character)?);
            rest = &after[name_len..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// oslo.config's iniparser: the file's assignments in order.
fn parse(text: &str, file: &Path) -> Result<Vec<Entry>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    // The assignment being read: (option, lines, line number).
    let mut open: Option<(String, Vec<String>, usize)> = None;
    let mut flush = |open: &mut Option<(String, Vec<String>, usize)>,
                     section: &Option<String>|
     -> Result<(), (usize, String)> {
        if let Some((option, lines, line)) = open.take() {
            let section = section
                .clone()
                .ok_or((line, format!("\"{option}\" is outside any [section]")))?;
            out.push(Entry {
                section,
                option,
                value: lines.join("\n"),
                file: file.to_path_buf(),
                line,
            });
        }
        Ok(())
    };
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim_end();
        if trimmed.is_empty() {
            flush(&mut open, &section)?;
            continue;
        }
        if trimmed.starts_with([' ', '\t']) {
            match open.as_mut() {
                Some((_, lines, _)) => lines.push(trimmed.trim_start().to_string()),
                None => return Err((line, "indented line continues no value".into())),
            }
            continue;
        }
        flush(&mut open, &section)?;
        if trimmed.starts_with('[') {
            let name = trimmed
                .strip_prefix('[')
                .and_then(|n| n.strip_suffix(']'))
                .ok_or((line, format!("section header without ']': {trimmed}")))?;
            if name.is_empty() {
                return Err((line, "empty section name".into()));
            }
            section = Some(normalize_section(name));
        } else if trimmed.starts_with(['#', ';']) {
            continue;
        } else {
            let split = match (trimmed.find(':'), trimmed.find('=')) {
                (None, None) => {
                    return Err((line, format!("expected \"option = value\": {trimmed}")))
                }
                (Some(c), Some(e)) => c.min(e),
                (Some(i), None) | (None, Some(i)) => i,
            };
            let option = trimmed[..split].trim();
            if option.is_empty() {
                return Err((line, "empty option name".into()));
            }
            let mut value = trimmed[split + 1..].trim();
            if value.len() >= 2
                && (value.starts_with('"') || value.starts_with('\''))
                && value.ends_with(&value[..1])
            {
                value = &value[1..value.len() - 1];
            } else if value == "\"" || value == "'" {
                // One quote is its own first and last character to oslo.
                value = "";
            }
            open = Some((option.to_string(), vec![value.to_string()], line));
        }
    }
    flush(&mut open, &section)?;
    Ok(out)
}

/// Files for the config tests: a fresh folder, and a file written in it.
#[cfg(test)]
pub(super) mod scratch {
    use std::path::{Path, PathBuf};

    pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("placement-conf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::scratch::{tmp, write};
    use super::*;

    #[test]
    fn sources_follow_the_command_line_then_placements_defaults() {
        let d = tmp();
        let env = Environment {
            config_file: None,
            os_placement_config_dir: None,
            home: Some(d.join("home")),
            etc: d.join("etc"),
        };
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(sources_from(&args(&["placement", "serve"]), &env), vec![]);
        write(&d, "etc/placement.conf", "");
        write(&d, "etc/placement/placement.conf.d/x.conf", "");
        write(&d, "home/.placement/placement.conf", "");
        assert_eq!(
            sources_from(&args(&["placement", "serve"]), &env),
            vec![
                Source::File(d.join("home/.placement/placement.conf")),
                Source::Dir(d.join("etc/placement/placement.conf.d")),
            ]
        );
        let named = args(&[
            "placement",
            "serve",
            "--config-dir",
            "x.d",
            "--config-file=a.conf",
            "--config-file",
            "b.conf",
        ]);
        assert_eq!(
            sources_from(&named, &env),
            vec![
                Source::Dir("x.d".into()),
                Source::File("a.conf".into()),
                Source::File("b.conf".into()),
            ]
        );
        let env = Environment {
            os_placement_config_dir: Some(d.join("kolla").display().to_string()),
            ..env
        };
        assert_eq!(
            sources_from(&args(&["placement", "serve", "--config-dir=y.d"]), &env),
            vec![
                Source::File(d.join("kolla/placement.conf")),
                Source::Dir("y.d".into())
            ]
        );
        let env = Environment {
            config_file: Some("c.conf, d.conf".into()),
            ..env
        };
        assert_eq!(
            sources_from(&args(&["placement", "serve", "--config-dir=y.d"]), &env),
            vec![
                Source::File("c.conf".into()),
                Source::File("d.conf".into()),
                Source::Dir("y.d".into())
            ]
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}
