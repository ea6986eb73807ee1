//! Placement's own `placement.conf` (oslo.config's INI format), read with
//! the sections and options Placement uses and mapped onto this server's
//! flags. What a file sets becomes the flag's default, so flags and their
//! environment variables still win; later files win over earlier ones.
//! An option this server does not know is a warning, never fatal; a line
//! that does not parse or a value of the wrong type stops start-up with
//! the file and line.

use std::path::{Path, PathBuf};

/// How an option's value is checked and written for its flag.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Bool,
    Int,
    Unsigned,
    List,
    Choice(&'static [&'static str]),
    /// `[placement_database] connection`: SQLAlchemy URL → PostgreSQL URL.
    DatabaseUrl,
    /// `[keystone_authtoken] auth_url`: the identity root → its v3 endpoint.
    IdentityUrl,
    /// A file path, relative to the config file's folder.
    Path,
}

/// `(section, option, flag id, kind)`: every option this server reads.
const OPTIONS: &[(&str, &str, &str, Kind)] = &[
    (
        "placement_database",
        "connection",
        "database_url",
        Kind::DatabaseUrl,
    ),
    (
        "placement",
        "max_allocation_candidates",
        "max_allocation_candidates",
        Kind::Int,
    ),
    (
        "placement",
        "randomize_allocation_candidates",
        "randomize_allocation_candidates",
        Kind::Bool,
    ),
    (
        "placement",
        "allocation_candidates_generation_strategy",
        "allocation_candidates_generation_strategy",
        Kind::Choice(&["depth-first", "breadth-first"]),
    ),
    (
        "placement",
        "allocation_conflict_retry_count",
        "allocation_conflict_retry_count",
        Kind::Unsigned,
    ),
    (
        "placement",
        "incomplete_consumer_project_id",
        "incomplete_consumer_project_id",
        Kind::Text,
    ),
    (
        "placement",
        "incomplete_consumer_user_id",
        "incomplete_consumer_user_id",
        Kind::Text,
    ),
    (
        "api",
        "auth_strategy",
        "auth_strategy",
        Kind::Choice(&["keystone", "noauth2"]),
    ),
    (
        "keystone_authtoken",
        "auth_url",
        "keystone_url",
        Kind::IdentityUrl,
    ),
    (
        "keystone_authtoken",
        "username",
        "keystone_username",
        Kind::Text,
    ),
    (
        "keystone_authtoken",
        "password",
        "keystone_password",
        Kind::Text,
    ),
    (
        "keystone_authtoken",
        "project_name",
        "keystone_project",
        Kind::Text,
    ),
    (
        "keystone_authtoken",
        "user_domain_name",
        "keystone_user_domain",
        Kind::Text,
    ),
    (
        "keystone_authtoken",
        "project_domain_name",
        "keystone_project_domain",
        Kind::Text,
    ),
    (
        "keystone_authtoken",
        "token_cache_time",
        "keystone_token_cache_seconds",
        Kind::Unsigned,
    ),
    (
        "keystone_authtoken",
        "http_connect_timeout",
        "keystone_timeout",
        Kind::Unsigned,
    ),
    ("oslo_policy", "policy_file", "policy_file", Kind::Path),
    (
        "oslo_policy",
        "enforce_new_defaults",
        "enforce_new_defaults",
        Kind::Bool,
    ),
    ("oslo_policy", "enforce_scope", "enforce_scope", Kind::Bool),
    ("cors", "allowed_origin", "cors_allowed_origin", Kind::List),
    ("cors", "allow_headers", "cors_allow_headers", Kind::List),
    ("cors", "expose_headers", "cors_expose_headers", Kind::List),
    ("cors", "max_age", "cors_max_age", Kind::Unsigned),
];

/// Options Placement deployments commonly set that have no meaning here
/// (keystonemiddleware's plumbing, oslo's logging): not warned about.
const IGNORED: &[(&str, &str)] = &[
    ("keystone_authtoken", "www_authenticate_uri"),
    ("keystone_authtoken", "auth_uri"),
    ("keystone_authtoken", "auth_type"),
    ("keystone_authtoken", "memcached_servers"),
    ("keystone_authtoken", "region_name"),
    ("keystone_authtoken", "interface"),
    ("keystone_authtoken", "service_token_roles_required"),
    ("cors", "allow_credentials"),
    ("cors", "allow_methods"),
    ("placement_database", "sync_on_startup"),
    ("DEFAULT", "log_dir"),
    ("DEFAULT", "log_file"),
    ("DEFAULT", "use_stderr"),
];

/// What the files say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// Flag id → value, for the flags' defaults.
    pub defaults: Vec<(&'static str, String)>,
    /// `[DEFAULT] debug`.
    pub debug: bool,
    /// One line per option not used, to log once logging is up.
    pub warnings: Vec<String>,
    /// A file chose `[api] auth_strategy` itself (without one, a file
    /// means Keystone, as in Placement).
    pub auth_strategy_chosen: bool,
}

/// The `--config-file` paths on the command line (`--config-file X`,
/// `--config-file=X`, repeatable), else in `PLACEMENT_CONFIG_FILE`
/// (comma-separated).
pub fn paths_from(args: &[String], env: Option<String>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--config-file" {
            if let Some(v) = it.next() {
                out.push(PathBuf::from(v));
            }
        } else if let Some(v) = a.strip_prefix("--config-file=") {
            out.push(PathBuf::from(v));
        }
    }
    if out.is_empty() {
        if let Some(v) = env {
            out.extend(
                v.split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| PathBuf::from(s.trim())),
            );
        }
    }
    out
}

/// Reads the files in order; later ones win.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, String> {
    let mut loaded = Loaded::default();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("config file {}: {e}", path.display()))?;
        read_into(&mut loaded, path, &text)?;
    }
    loaded.auth_strategy_chosen = loaded.defaults.iter().any(|(f, _)| *f == "auth_strategy");
    if !paths.is_empty() && !loaded.auth_strategy_chosen {
        // Placement's own default: noauth2 "is designed for testing only".
        loaded
            .defaults
            .push(("auth_strategy", "keystone".to_string()));
    }
    Ok(loaded)
}

/// One file's entries into `loaded`.
pub fn read_into(loaded: &mut Loaded, path: &Path, text: &str) -> Result<(), String> {
    let at =
        |line: usize, msg: String| format!("config file {}: line {line}: {msg}", path.display());
    for entry in entries(text).map_err(|(line, msg)| at(line, msg))? {
        let known = OPTIONS
            .iter()
            .find(|(s, o, _, _)| *s == entry.section && *o == entry.option);
        match known {
            Some((_, _, flag, kind)) => {
                let value = convert(*kind, &entry.value, path).map_err(|msg| {
                    at(
                        entry.line,
                        format!("[{}] {}: {msg}", entry.section, entry.option),
                    )
                })?;
                loaded.defaults.retain(|(f, _)| f != flag);
                loaded.defaults.push((flag, value));
            }
            None if entry.section == "DEFAULT" && entry.option == "debug" => {
                loaded.debug = parse_bool(&entry.value).ok_or_else(|| {
                    at(
                        entry.line,
                        format!("[DEFAULT] debug: \"{}\" is not a boolean", entry.value),
                    )
                })?;
            }
            None if IGNORED.contains(&(entry.section.as_str(), entry.option.as_str())) => {}
            None => loaded.warnings.push(format!(
                "config file {}: line {}: [{}] {} is not used by this server",
                path.display(),
                entry.line,
                entry.section,
                entry.option
            )),
        }
    }
    Ok(())
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn convert(kind: Kind, value: &str, file: &Path) -> Result<String, String> {
    let v = value.trim();
    match kind {
        Kind::Text => Ok(v.to_string()),
        Kind::Bool => parse_bool(v)
            .map(|b| b.to_string())
            .ok_or_else(|| format!("\"{v}\" is not a boolean")),
        Kind::Int => v
            .parse::<i64>()
            .map(|n| n.to_string())
            .map_err(|_| format!("\"{v}\" is not an integer")),
        Kind::Unsigned => v
            .parse::<u64>()
            .map(|n| n.to_string())
            .map_err(|_| format!("\"{v}\" is not a non-negative integer")),
        Kind::List => Ok(v
            .split([',', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(",")),
        Kind::Choice(choices) => choices
            .iter()
            .find(|c| **c == v)
            .map(|c| c.to_string())
            .ok_or_else(|| format!("\"{v}\" is not one of {}", choices.join(", "))),
        Kind::DatabaseUrl => database_url(v),
        Kind::IdentityUrl => {
            let root = v.trim_end_matches('/');
            Ok(if root.ends_with("/v3") {
                root.to_string()
            } else {
                format!("{root}/v3")
            })
        }
        Kind::Path => {
            let p = Path::new(v);
            Ok(match file.parent() {
                Some(dir) if p.is_relative() => dir.join(p).display().to_string(),
                _ => v.to_string(),
            })
        }
    }
}

/// `postgresql+psycopg2://…` (SQLAlchemy's form) → `postgresql://…`.
pub fn database_url(v: &str) -> Result<String, String> {
    // Never echo the value: it may hold a password.
    if !v.contains("://") && v.contains('=') {
        // libpq's key/value form (`host=h1,h2 dbname=placement`).
        return Ok(v.to_string());
    }
    let (scheme, rest) = v.split_once("://").ok_or_else(|| {
        "the value is not a database URL (expected postgresql://user:password@host/database)"
            .to_string()
    })?;
    let dialect = scheme.split('+').next().unwrap_or("");
    match dialect {
        "postgresql" | "postgres" => Ok(format!("postgresql://{rest}")),
        "mysql" | "sqlite" => Err(format!(
            "{dialect} is not supported: this server runs on PostgreSQL (see docs/migrating.md)"
        )),
        _ => Err(format!("\"{scheme}\" is not a PostgreSQL URL scheme")),
    }
}

/// One `option = value` and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    section: String,
    option: String,
    value: String,
    line: usize,
}

/// oslo.config's INI: `[section]`, `option = value` (or `:`), `#` and `;`
/// comments, indented lines continuing the previous value.
fn entries(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut out: Vec<Entry> = Vec::new();
    let mut section: Option<String> = None;
    // The line a continuation may follow: the last value's (or its last
    // continuation's).
    let mut open_value: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            open_value = None;
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            match out.last_mut() {
                Some(e) if open_value == Some(line - 1) => {
                    e.value.push('\n');
                    e.value.push_str(trimmed);
                    open_value = Some(line);
                    continue;
                }
                _ => return Err((line, "indented line continues no value".into())),
            }
        }
        open_value = None;
        if let Some(name) = trimmed.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or((line, format!("section header without ']': {trimmed}")))?;
            if name.trim().is_empty() {
                return Err((line, "empty section name".into()));
            }
            section = Some(name.trim().to_string());
            continue;
        }
        let split = trimmed
            .find(['=', ':'])
            .ok_or((line, format!("expected \"option = value\": {trimmed}")))?;
        let option = trimmed[..split].trim();
        if option.is_empty() {
            return Err((line, "empty option name".into()));
        }
        let section = section
            .clone()
            .ok_or((line, format!("\"{option}\" is outside any [section]")))?;
        out.push(Entry {
            section,
            option: option.to_string(),
            value: trimmed[split + 1..].trim().to_string(),
            line,
        });
        open_value = Some(line);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = "[DEFAULT]\ndebug = True\n\n[placement_database]\nconnection = postgresql+psycopg2://placement:pw@db/placement\n\n[api]\nauth_strategy = keystone\n\n[keystone_authtoken]\nwww_authenticate_uri = http://ks:5000\nauth_url = http://ks:5000/\nmemcached_servers = mc:11211\nauth_type = password\nproject_domain_name = Default\nuser_domain_name = Default\nproject_name = service\nusername = placement\npassword = PLACEMENT_PASS\n\n[placement]\nmax_allocation_candidates = -1\nrandomize_allocation_candidates = yes\n\n[oslo_policy]\npolicy_file = policy.yaml\nenforce_new_defaults = true\n\n[cors]\nallowed_origin = https://a.example.com,\n    https://b.example.com\n\n[wsgi]\napi_paste_config = x\n";

    fn value<'a>(l: &'a Loaded, flag: &str) -> Option<&'a str> {
        l.defaults
            .iter()
            .find(|(f, _)| *f == flag)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_placement_conf_maps_onto_the_flags() {
        let mut l = Loaded::default();
        read_into(&mut l, Path::new("/etc/placement/placement.conf"), CONF).expect("reads");
        assert!(l.debug);
        assert_eq!(
            value(&l, "database_url"),
            Some("postgresql://placement:pw@db/placement")
        );
        assert_eq!(value(&l, "auth_strategy"), Some("keystone"));
        assert_eq!(value(&l, "keystone_url"), Some("http://ks:5000/v3"));
        assert_eq!(value(&l, "keystone_password"), Some("PLACEMENT_PASS"));
        assert_eq!(value(&l, "max_allocation_candidates"), Some("-1"));
        assert_eq!(value(&l, "randomize_allocation_candidates"), Some("true"));
        assert_eq!(value(&l, "policy_file"), Some("/etc/placement/policy.yaml"));
        assert_eq!(
            value(&l, "cors_allowed_origin"),
            Some("https://a.example.com,https://b.example.com")
        );
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("line 34: [wsgi] api_paste_config"));
    }

    #[test]
    fn later_files_win() {
        let mut l = Loaded::default();
        read_into(
            &mut l,
            Path::new("a.conf"),
            "[api]\nauth_strategy = keystone\n",
        )
        .expect("a");
        read_into(
            &mut l,
            Path::new("b.conf"),
            "[api]\nauth_strategy = noauth2\n",
        )
        .expect("b");
        assert_eq!(l.defaults, vec![("auth_strategy", "noauth2".to_string())]);
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, says) in [
            ("[placement\nx = 1\n", "line 1"),
            (
                "debug = true\n",
                "line 1: \"debug\" is outside any [section]",
            ),
            (
                "[placement]\nmax_allocation_candidates = many\n",
                "line 2: [placement] max_allocation_candidates: \"many\" is not an integer",
            ),
            ("[oslo_policy]\nenforce_scope = maybe\n", "line 2"),
            (
                "[api]\nauth_strategy = noauth\n",
                "not one of keystone, noauth2",
            ),
            (
                "[placement_database]\nconnection = mysql+pymysql://p@db/placement\n",
                "mysql is not supported",
            ),
            ("[DEFAULT]\n\n   orphan\n", "line 3"),
            ("[cors]\njust words\n", "line 2"),
        ] {
            let mut l = Loaded::default();
            let e = read_into(&mut l, Path::new("p.conf"), text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(e.starts_with("config file p.conf: "), "{e}");
        }
    }

    #[test]
    fn config_file_paths_come_from_flags_or_the_environment() {
        let args: Vec<String> = [
            "placement",
            "serve",
            "--config-file",
            "a.conf",
            "--config-file=b.conf",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            paths_from(&args, Some("c.conf".into())),
            vec![PathBuf::from("a.conf"), PathBuf::from("b.conf")]
        );
        assert_eq!(
            paths_from(&args[..2], Some("c.conf, d.conf".into())),
            vec![PathBuf::from("c.conf"), PathBuf::from("d.conf")]
        );
    }
}
