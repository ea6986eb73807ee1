//! Placement's own `placement.conf`, read as oslo.config reads it, and
//! mapped onto this server's flags.
//!
//! Where files come from: `--config-file` (repeatable) and `--config-dir`
//! (repeatable: its `*.conf` in name order), read in command-line order;
//! without a `--config-file`, `PLACEMENT_CONFIG_FILE`, else Placement's
//! own defaults: `$OS_PLACEMENT_CONFIG_DIR/placement.conf`, else the first
//! `placement.conf` in `~/.placement/`, `~/`, `/etc/placement/`, `/etc/`;
//! without a `--config-dir`, the first `placement.conf.d/` of those folders.
//!
//! How a file reads (oslo.config's iniparser and template substitution):
//! `[section]` (lower-cased, `DEFAULT` in any case), `option = value` or
//! `option: value`, one pair of matching quotes around a value stripped,
//! indented lines continuing a value, `#` and `;` comments; `$name` and
//! `${name}` (the option in the same section, else in `[DEFAULT]`),
//! `${section.name}`, and `$$` or `\$` for a dollar sign. Later files win.
//!
//! What a file sets becomes its flag's default, so flags and environment
//! variables win. An option of a section this server reads that it does
//! not know is a warning; a line that does not parse, a `$name` that names
//! nothing, or a value of the wrong type stops start-up with the file, line
//! and option. `tests/data/oslo-config-reads.json` records what oslo.config
//! itself makes of the cases in `tests/data/placement-conf/`, and
//! `tests/startup/config.rs` holds this reading to it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    /// A file path, relative to the folder of the file that sets it.
    Path,
}

/// One option this server reads: where it is, and the flag it sets.
struct Known {
    section: &'static str,
    option: &'static str,
    flag: &'static str,
    kind: Kind,
}

const fn known(
    section: &'static str,
    option: &'static str,
    flag: &'static str,
    kind: Kind,
) -> Known {
    Known {
        section,
        option,
        flag,
        kind,
    }
}

/// Every option this server reads.
const OPTIONS: &[Known] = &[
    known(
        "placement_database",
        "connection",
        "database_url",
        Kind::DatabaseUrl,
    ),
    known(
        "placement",
        "max_allocation_candidates",
        "max_allocation_candidates",
        Kind::Int,
    ),
    known(
        "placement",
        "randomize_allocation_candidates",
        "randomize_allocation_candidates",
        Kind::Bool,
    ),
    known(
        "placement",
        "allocation_candidates_generation_strategy",
        "allocation_candidates_generation_strategy",
        Kind::Choice(&["depth-first", "breadth-first"]),
    ),
    known(
        "placement",
        "allocation_conflict_retry_count",
        "allocation_conflict_retry_count",
        Kind::Unsigned,
    ),
    known(
        "placement",
        "incomplete_consumer_project_id",
        "incomplete_consumer_project_id",
        Kind::Text,
    ),
    known(
        "placement",
        "incomplete_consumer_user_id",
        "incomplete_consumer_user_id",
        Kind::Text,
    ),
    known(
        "api",
        "auth_strategy",
        "auth_strategy",
        Kind::Choice(&["keystone", "noauth2"]),
    ),
    known(
        "keystone_authtoken",
        "auth_url",
        "keystone_url",
        Kind::IdentityUrl,
    ),
    // keystonemiddleware's deprecated name for it, read first so that the
    // current name wins when a file has both.
    known(
        "keystone_authtoken",
        "auth_uri",
        "keystone_www_authenticate_uri",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "www_authenticate_uri",
        "keystone_www_authenticate_uri",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "username",
        "keystone_username",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "password",
        "keystone_password",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "project_name",
        "keystone_project",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "user_domain_name",
        "keystone_user_domain",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "project_domain_name",
        "keystone_project_domain",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "user_domain_id",
        "keystone_user_domain_id",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "project_domain_id",
        "keystone_project_domain_id",
        Kind::Text,
    ),
    known(
        "keystone_authtoken",
        "token_cache_time",
        "keystone_token_cache_seconds",
        Kind::Unsigned,
    ),
    known(
        "keystone_authtoken",
        "http_connect_timeout",
        "keystone_timeout",
        Kind::Unsigned,
    ),
    known(
        "keystone_authtoken",
        "cafile",
        "keystone_cafile",
        Kind::Path,
    ),
    known(
        "keystone_authtoken",
        "insecure",
        "keystone_insecure",
        Kind::Bool,
    ),
    known("oslo_policy", "policy_file", "policy_file", Kind::Path),
    known(
        "oslo_policy",
        "enforce_new_defaults",
        "enforce_new_defaults",
        Kind::Bool,
    ),
    known(OWN_OPTION.0, OWN_OPTION.1, "enforce_scope", Kind::Bool),
    known("cors", "allowed_origin", "cors_allowed_origin", Kind::List),
    known("cors", "allow_headers", "cors_allow_headers", Kind::List),
    known("cors", "expose_headers", "cors_expose_headers", Kind::List),
    known("cors", "max_age", "cors_max_age", Kind::Unsigned),
    // oslo.log: relative to the working folder, or to log_dir.
    known("DEFAULT", "log_file", "log_file", Kind::Text),
    known("DEFAULT", "log_dir", "log_dir", Kind::Text),
];

/// The option read here that oslo.config does not know: oslo.policy 6
/// dropped `enforce_scope` (scope is always enforced); kept as this
/// server's own switch, which older files still set.
const OWN_OPTION: (&str, &str) = ("oslo_policy", "enforce_scope");

/// `[DEFAULT] debug`: read before logging starts, so not a flag.
const DEBUG: (&str, &str) = ("DEFAULT", "debug");

/// Sections whose unknown options are warned about: the ones this server
/// reads. Other sections (`[oslo_messaging_rabbit]`, `[profiler]`, …) are
/// other services' and libraries' business, as they are to Placement.
const READ_SECTIONS: &[&str] = &[
    "placement_database",
    "placement",
    "api",
    "keystone_authtoken",
    "oslo_policy",
    "cors",
];

/// Options of those sections that deployments commonly set and that mean
/// nothing here (keystonemiddleware's and SQLAlchemy's plumbing): not
/// warned about.
const IGNORED: &[(&str, &str)] = &[
    ("keystone_authtoken", "auth_type"),
    ("keystone_authtoken", "memcached_servers"),
    ("keystone_authtoken", "memcache_security_strategy"),
    ("keystone_authtoken", "memcache_secret_key"),
    ("keystone_authtoken", "region_name"),
    ("keystone_authtoken", "interface"),
    ("keystone_authtoken", "service_type"),
    ("keystone_authtoken", "service_token_roles"),
    ("keystone_authtoken", "service_token_roles_required"),
    ("cors", "allow_credentials"),
    ("cors", "allow_methods"),
    ("placement_database", "sync_on_startup"),
    ("placement_database", "connection_recycle_time"),
    ("placement_database", "max_overflow"),
    ("placement_database", "max_pool_size"),
    ("placement_database", "max_retries"),
    ("placement_database", "pool_timeout"),
    ("placement_database", "retry_interval"),
    ("placement_database", "connection_debug"),
    ("placement_database", "connection_trace"),
];

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

/// A value as oslo.config returns it, typed by the option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Setting {
    Bool(bool),
    Int(i64),
    List(Vec<String>),
    Text(String),
}

/// What the files say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// Flag id → value, for the flags' defaults.
    pub defaults: Vec<(&'static str, String)>,
    /// Flag id → why the file's value cannot serve (a MySQL connection):
    /// an error unless the flag or its variable is given, then a warning.
    pub unusable: Vec<(&'static str, String)>,
    /// Flag id → where a file set it (`config file F: line N: [s] o`), for
    /// errors about the value found later.
    pub origins: Vec<(&'static str, String)>,
    /// `[DEFAULT] debug`.
    pub debug: bool,
    /// One line per option not used, to log once logging is up.
    pub warnings: Vec<String>,
    /// A file chose `[api] auth_strategy` itself (without one, a file
    /// means Keystone, as in Placement).
    pub auth_strategy_chosen: bool,
}

impl Loaded {
    /// Where a file set the flag's value, if one did.
    pub fn origin(&self, flag: &str) -> Option<&str> {
        self.origins
            .iter()
            .find(|(f, _)| *f == flag)
            .map(|(_, o)| o.as_str())
    }
}

/// Reads every source; later files win.
pub fn load(sources: &[Source]) -> Result<Loaded, String> {
    let read = Files::read(sources)?;
    let mut loaded = Loaded {
        files: read.files.clone(),
        ..Loaded::default()
    };
    for k in OPTIONS {
        let Some(entry) = read.entry(k.section, k.option) else {
            continue;
        };
        let raw = read.value(k.section, k.option)?.unwrap_or_default();
        let origin = entry.origin();
        loaded.origins.push((k.flag, origin.clone()));
        match convert(k.kind, &raw, &entry.file) {
            Ok(v) => loaded.defaults.push((k.flag, v)),
            Err(Unusable::Refused(msg)) => return Err(format!("{origin}: {msg}")),
            Err(Unusable::Elsewhere(msg)) => {
                loaded.unusable.push((k.flag, format!("{origin}: {msg}")))
            }
        }
    }
    if !loaded.defaults.iter().any(|(f, _)| *f == "policy_file") {
        // oslo.policy's default `policy_file = policy.yaml`, looked for
        // beside the config files (the last one's folder first).
        if let Some(found) = read
            .files
            .iter()
            .rev()
            .filter_map(|f| f.parent())
            .map(|d| d.join("policy.yaml"))
            .find(|p| p.is_file())
        {
            loaded
                .defaults
                .push(("policy_file", found.display().to_string()));
        }
    }
    if let Some(entry) = read.entry(DEBUG.0, DEBUG.1) {
        let raw = read.value(DEBUG.0, DEBUG.1)?.unwrap_or_default();
        loaded.debug = parse_bool(&raw)
            .ok_or_else(|| format!("{}: \"{}\" is not a boolean", entry.origin(), raw.trim()))?;
    }
    for e in read.unknown() {
        loaded
            .warnings
            .push(format!("{}: not used by this server", e.origin()));
    }
    loaded.auth_strategy_chosen = loaded.defaults.iter().any(|(f, _)| *f == "auth_strategy");
    if !loaded.files.is_empty() && !loaded.auth_strategy_chosen {
        // Placement's own default: noauth2 "is designed for testing only".
        loaded
            .defaults
            .push(("auth_strategy", "keystone".to_string()));
    }
    Ok(loaded)
}

/// What oslo.config would return for every option this server reads that
/// a file sets, keyed `section.option` (the reference's record compares
/// against it).
pub fn settings(sources: &[Source]) -> Result<BTreeMap<String, Setting>, String> {
    let read = Files::read(sources)?;
    let mut out = BTreeMap::new();
    let debug = Known {
        section: DEBUG.0,
        option: DEBUG.1,
        flag: "debug",
        kind: Kind::Bool,
    };
    for k in OPTIONS.iter().chain([&debug]) {
        if read.entry(k.section, k.option).is_none() || (k.section, k.option) == OWN_OPTION {
            continue;
        }
        let raw = read.value(k.section, k.option)?.unwrap_or_default();
        let v = raw.trim();
        let bad = |what: &str| format!("[{}] {}: \"{v}\" is not {what}", k.section, k.option);
        let setting = match k.kind {
            Kind::Bool => Setting::Bool(parse_bool(v).ok_or_else(|| bad("a boolean"))?),
            Kind::Int | Kind::Unsigned => Setting::Int(v.parse().map_err(|_| bad("an integer"))?),
            Kind::List => Setting::List(list(&raw)),
            _ => Setting::Text(raw),
        };
        out.insert(format!("{}.{}", k.section, k.option), setting);
    }
    Ok(out)
}

/// Why a file's value cannot be used.
enum Unusable {
    /// Wrong for its option: stops start-up.
    Refused(String),
    /// Meant for another server (a MySQL connection): fine when the flag
    /// or its variable gives the value instead.
    Elsewhere(String),
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// oslo.config's ListOpt: comma-separated, items trimmed.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn convert(kind: Kind, value: &str, file: &Path) -> Result<String, Unusable> {
    let v = value.trim();
    let refused = |m: String| Unusable::Refused(m);
    match kind {
        Kind::Text => Ok(v.to_string()),
        Kind::Bool => parse_bool(v)
            .map(|b| b.to_string())
            .ok_or_else(|| refused(format!("\"{v}\" is not a boolean"))),
        Kind::Int => v
            .parse::<i64>()
            .map(|n| n.to_string())
            .map_err(|_| refused(format!("\"{v}\" is not an integer"))),
        Kind::Unsigned => v
            .parse::<u64>()
            .map(|n| n.to_string())
            .map_err(|_| refused(format!("\"{v}\" is not a non-negative integer"))),
        Kind::List => Ok(list(value).join(",")),
        Kind::Choice(choices) => choices
            .iter()
            .find(|c| **c == v)
            .map(|c| c.to_string())
            .ok_or_else(|| refused(format!("\"{v}\" is not one of {}", choices.join(", ")))),
        Kind::DatabaseUrl => database_url(v).map_err(|e| match e {
            UrlRefusal::OtherDatabase(m) => Unusable::Elsewhere(m),
            UrlRefusal::NotAUrl(m) => Unusable::Refused(m),
        }),
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
                Some(dir) if p.is_relative() && !v.is_empty() => dir.join(p).display().to_string(),
                _ => v.to_string(),
            })
        }
    }
}

/// Why a database URL is not one this server connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlRefusal {
    /// Another database's URL (MySQL, SQLite).
    OtherDatabase(String),
    /// Not a database URL at all.
    NotAUrl(String),
}

impl std::fmt::Display for UrlRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlRefusal::OtherDatabase(m) | UrlRefusal::NotAUrl(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for UrlRefusal {}

/// `postgresql+psycopg2://…` (SQLAlchemy's form) → `postgresql://…`.
pub fn database_url(v: &str) -> Result<String, UrlRefusal> {
    // Never echo the value: it may hold a password.
    if !v.contains("://") && v.contains('=') {
        // libpq's key/value form (`host=h1,h2 dbname=placement`).
        return Ok(v.to_string());
    }
    let (scheme, rest) = v.split_once("://").ok_or_else(|| {
        UrlRefusal::NotAUrl(
            "the value is not a database URL (expected postgresql://user:password@host/database)"
                .to_string(),
        )
    })?;
    let dialect = scheme.split('+').next().unwrap_or("");
    match dialect {
        "postgresql" | "postgres" => Ok(format!("postgresql://{rest}")),
        "mysql" | "sqlite" => Err(UrlRefusal::OtherDatabase(format!(
            "{dialect} is not supported: this server runs on PostgreSQL; give its URL with DATABASE_URL or --database-url (and see docs/migrating.md to bring the data over)"
        ))),
        _ => Err(UrlRefusal::NotAUrl(format!(
            "\"{scheme}\" is not a PostgreSQL URL scheme"
        ))),
    }
}

/// One `option = value` and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    section: String,
    option: String,
    value: String,
    file: PathBuf,
    line: usize,
}

impl Entry {
    fn origin(&self) -> String {
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
struct Files {
    files: Vec<PathBuf>,
    entries: Vec<Entry>,
}

impl Files {
    fn read(sources: &[Source]) -> Result<Files, String> {
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

    fn entry(&self, section: &str, option: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.section == section && e.option == option)
    }

    /// The option's value with templates substituted, if a file sets it.
    fn value(&self, section: &str, option: &str) -> Result<Option<String>, String> {
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
        let out = substitute(&entry.value, |name| {
            let (s, o) = match name.split_once('.') {
                Some((s, o)) => (normalize_section(s), o.to_string()),
                None if self.entry(section, name).is_some() => {
                    (section.to_string(), name.to_string())
                }
                None => ("DEFAULT".to_string(), name.to_string()),
            };
            self.substituted(&s, &o, seen)?.ok_or_else(|| {
                format!(
                    "{}: ${name} names no option set in the config files (set [{s}] {o})",
                    entry.origin()
                )
            })
        });
        seen.pop();
        out.map(Some)
    }

    /// Entries of the sections this server reads that it does not know.
    fn unknown(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| {
            READ_SECTIONS.contains(&e.section.as_str())
                && !OPTIONS
                    .iter()
                    .any(|k| k.section == e.section && k.option == e.option)
                && !IGNORED.contains(&(e.section.as_str(), e.option.as_str()))
        })
    }
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
fn substitute(
    value: &str,
    mut lookup: impl FnMut(&str) -> Result<String, String>,
) -> Result<String, String> {
    let value = value.replace("\\$", "$$");
    let is_start = |c: char| c == '_' || c.is_ascii_alphabetic();
    let is_rest = |c: char| c == '_' || c == '.' || c.is_ascii_alphanumeric();
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            let name_len = inner
                .char_indices()
                .find(|&(i, c)| if i == 0 { !is_start(c) } else { !is_rest(c) })
                .map_or(inner.len(), |(i, _)| i);
            if name_len > 0 && inner[name_len..].starts_with('}') {
                out.push_str(&lookup(&inner[..name_len])?);
                rest = &inner[name_len + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        } else if after.starts_with(is_start) {
            let name_len = after.find(|c: char| !is_rest(c)).unwrap_or(after.len());
            out.push_str(&lookup(&after[..name_len])?);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("placement-conf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn value<'a>(l: &'a Loaded, flag: &str) -> Option<&'a str> {
        l.defaults
            .iter()
            .find(|(f, _)| *f == flag)
            .map(|(_, v)| v.as_str())
    }

    fn load_text(text: &str) -> Result<Loaded, String> {
        let d = tmp();
        let f = write(&d, "placement.conf", text);
        let out = load(&[Source::File(f)]);
        std::fs::remove_dir_all(d).unwrap();
        out
    }

    #[test]
    fn a_placement_conf_maps_onto_the_flags() {
        let l = load_text("[DEFAULT]\ndebug = True\n\n[placement_database]\nconnection = postgresql+psycopg2://placement:pw@db/placement\n\n[keystone_authtoken]\nauth_url = http://ks:5000/\nmemcached_servers = mc:11211\npassword = PLACEMENT_PASS\n\n[placement]\nmax_allocation_candidates = -1\nrandomize_allocation_candidates = yes\n\n[oslo_policy]\npolicy_file = policy.yaml\n\n[cors]\nallowed_origin = https://a.example.com,\n    https://b.example.com\n\n[placement]\napi_paste_config = x\n[profiler]\nenabled = true\n").expect("reads");
        assert!(l.debug);
        assert_eq!(
            value(&l, "database_url"),
            Some("postgresql://placement:pw@db/placement")
        );
        assert_eq!(
            value(&l, "auth_strategy"),
            Some("keystone"),
            "a file means Keystone"
        );
        assert_eq!(value(&l, "keystone_url"), Some("http://ks:5000/v3"));
        assert_eq!(value(&l, "keystone_password"), Some("PLACEMENT_PASS"));
        assert_eq!(value(&l, "max_allocation_candidates"), Some("-1"));
        assert_eq!(value(&l, "randomize_allocation_candidates"), Some("true"));
        assert!(value(&l, "policy_file")
            .is_some_and(|p| p.ends_with("/policy.yaml") && p.starts_with('/')));
        assert_eq!(
            value(&l, "cors_allowed_origin"),
            Some("https://a.example.com,https://b.example.com")
        );
        // Only the sections this server reads are warned about.
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(
            l.warnings[0].contains("line 24: [placement] api_paste_config"),
            "{:?}",
            l.warnings
        );
        assert!(l
            .origin("keystone_password")
            .is_some_and(|o| o.ends_with("line 10: [keystone_authtoken] password")));
    }

    #[test]
    fn later_files_and_folders_win_in_command_line_order() {
        let d = tmp();
        let a = write(&d, "a.conf", "[api]\nauth_strategy = keystone\n");
        write(&d, "conf.d/02.conf", "[api]\nauth_strategy = noauth2\n");
        write(
            &d,
            "conf.d/01.conf",
            "[api]\nauth_strategy = keystone\n[placement]\nmax_allocation_candidates = 5\n",
        );
        write(
            &d,
            "conf.d/03.txt",
            "[placement]\nmax_allocation_candidates = 7\n",
        );
        let l = load(&[Source::File(a.clone()), Source::Dir(d.join("conf.d"))]).unwrap();
        assert_eq!(value(&l, "auth_strategy"), Some("noauth2"));
        assert_eq!(value(&l, "max_allocation_candidates"), Some("5"));
        let l = load(&[Source::Dir(d.join("conf.d")), Source::File(a)]).unwrap();
        assert_eq!(value(&l, "auth_strategy"), Some("keystone"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn quotes_templates_and_dollars_read_as_oslo_config_reads_them() {
        let l = load_text(concat!(
            "[DEFAULT]\nstate_path = /var/lib/placement\n",
            "[oslo_policy]\npolicy_file = \"$state_path/policy.yaml\"\n",
            "[keystone_authtoken]\nauth_url = http://ks:5000\nwww_authenticate_uri = ${auth_url}/public\n",
            "password = 'pw$$x\\$y$'\nusername = ${placement.incomplete_consumer_user_id}\n",
            "[placement]\nmax_allocation_candidates = '500'\nincomplete_consumer_user_id = $1 and $\n",
        ))
        .unwrap();
        assert_eq!(
            value(&l, "policy_file"),
            Some("/var/lib/placement/policy.yaml")
        );
        assert_eq!(
            value(&l, "keystone_www_authenticate_uri"),
            Some("http://ks:5000/public")
        );
        assert_eq!(value(&l, "keystone_password"), Some("pw$x$y$"));
        assert_eq!(value(&l, "keystone_username"), Some("$1 and $"));
        assert_eq!(value(&l, "max_allocation_candidates"), Some("500"));
        // keystonemiddleware's deprecated auth_uri, and the current name winning.
        let l = load_text("[keystone_authtoken]\nauth_uri = http://old:5000\n").unwrap();
        assert_eq!(
            value(&l, "keystone_www_authenticate_uri"),
            Some("http://old:5000")
        );
        let l = load_text(
            "[keystone_authtoken]\nwww_authenticate_uri = http://new:5000\nauth_uri = http://old:5000\n",
        )
        .unwrap();
        let uris: Vec<&str> = l
            .defaults
            .iter()
            .filter(|(f, _)| *f == "keystone_www_authenticate_uri")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(uris.last(), Some(&"http://new:5000"));
    }

    #[test]
    fn a_mysql_connection_is_set_aside_not_refused() {
        let l =
            load_text("[placement_database]\nconnection = mysql+pymysql://p:secret@db/placement\n")
                .unwrap();
        assert_eq!(value(&l, "database_url"), None);
        assert_eq!(l.unusable.len(), 1);
        let (flag, why) = &l.unusable[0];
        assert_eq!(*flag, "database_url");
        assert!(
            why.contains("line 2: [placement_database] connection: mysql is not supported"),
            "{why}"
        );
        assert!(!why.contains("secret"), "{why}");
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, says) in [
            ("[placement\nx = 1\n", "line 1"),
            ("debug = true\n", "line 1: \"debug\" is outside any [section]"),
            (
                "[placement]\nmax_allocation_candidates = many\n",
                "line 2: [placement] max_allocation_candidates: \"many\" is not an integer",
            ),
            ("[oslo_policy]\nenforce_scope = maybe\n", "line 2"),
            ("[api]\nauth_strategy = noauth\n", "not one of keystone, noauth2"),
            ("[DEFAULT]\n\n   orphan\n", "line 3"),
            ("[cors]\njust words\n", "line 2"),
            ("[oslo_policy]\npolicy_file = $nowhere/p.yaml\n", "line 2: [oslo_policy] policy_file: $nowhere names no option"),
            ("[placement]\nincomplete_consumer_user_id = $incomplete_consumer_project_id\nincomplete_consumer_project_id = ${incomplete_consumer_user_id}\n", "refers to itself"),
        ] {
            let e = load_text(text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(e.starts_with("config file "), "{e}");
        }
    }

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
