//! Placement's own `placement.conf`, mapped onto this server's flags:
//! which options it reads ([`OPTIONS`]), what each means, and how a value
//! is checked. The files are read as oslo.config reads them
//! ([`super::oslo_files`]).
//!
//! What a file sets becomes its flag's default, so flags and environment
//! variables win. An option of a section this server reads that it does
//! not know is a warning; a line that does not parse, a `$name` that names
//! nothing, or a value of the wrong type stops start-up with the file, line
//! and option. `tests/data/oslo-config-reads.json` records what oslo.config
//! itself makes of the cases in `tests/data/placement-conf/`, and
//! `tests/startup/config.rs` holds this reading to it.

pub use super::oslo_files::{sources_from, Environment, Source};
use super::oslo_files::{Entry, Files};
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
        if matches!(k.kind, Kind::Path) && raw.trim().is_empty() {
            // `cafile =` as kolla-ansible writes it without a CA: an empty
            // path is no path (keystonemiddleware's `if cafile:`).
            continue;
        }
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
    for e in unknown(&read) {
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

/// Entries of the sections this server reads that it does not know.
fn unknown(files: &Files) -> impl Iterator<Item = &Entry> {
    files.entries.iter().filter(|e| {
        READ_SECTIONS.contains(&e.section.as_str())
            && !OPTIONS
                .iter()
                .any(|k| k.section == e.section && k.option == e.option)
            && !IGNORED.contains(&(e.section.as_str(), e.option.as_str()))
    })
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

#[cfg(test)]
mod tests {
    use super::super::oslo_files::scratch::{tmp, write};
    use super::*;

    fn value<'a>(l: &'a Loaded, flag: &str) -> Option<&'a str> {
        l.defaults
            .iter()
            .find(|(f, _)| *f == flag)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn an_empty_path_is_no_path() {
        let l =
            load_text("[keystone_authtoken]\ncafile =\n[oslo_policy]\npolicy_file = \n").unwrap();
        assert_eq!(value(&l, "keystone_cafile"), None);
        assert_eq!(value(&l, "policy_file"), None);
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
}
