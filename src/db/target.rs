//! Where the database is: one or several hosts in libpq's two forms (a
//! `postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write` URL
//! or a `host=h1,h2 port=5432,5433 dbname=db` key/value string), read into
//! the connect options of each host in order. The service writes, so it
//! only ever uses a host that accepts writes; libpq's read-only session
//! kinds are refused. Errors name the hosts, never the password.

use sqlx::postgres::PgConnectOptions;
use std::time::Duration;

/// libpq's `target_session_attrs`, as far as a writing service can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// `any` (libpq's default): every host is tried in order; the service
    /// still keeps to the one that accepts writes.
    Any,
    /// `read-write` or `primary`: the first host that accepts writes.
    ReadWrite,
}

/// One host to try: TCP or a Unix socket directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp { host: String, port: u16 },
    Socket(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Endpoint::Tcp { host, port } => write!(f, "{host}:{port}"),
            Endpoint::Socket(dir) => write!(f, "the socket in {dir}"),
        }
    }
}

/// The database as the URL or key/value string gave it.
#[derive(Debug, Clone)]
pub struct DbTarget {
    /// Every host, in the order given.
    pub endpoints: Vec<Endpoint>,
    /// What kind of session was asked for.
    pub attrs: SessionAttrs,
    /// How long one host may take to answer (libpq's `connect_timeout`).
    pub connect_timeout: Duration,
    /// The database name, for messages.
    pub database: String,
    /// Everything but the host: user, password, TLS, options, as sqlx
    /// query parameters.
    params: Vec<(String, String)>,
}

/// libpq's default per-host wait is unbounded; a failover must not wait on
/// a host that is gone, so this service bounds it.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The keys of the key/value form this service reads (libpq's names).
const KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "target_session_attrs",
    "connect_timeout",
];

impl DbTarget {
    /// Reads a `postgres://`/`postgresql://` URL or a key/value string.
    pub fn parse(s: &str) -> Result<DbTarget, String> {
        let pairs = match s.split_once("://") {
            Some(("postgres" | "postgresql", rest)) => url_pairs(rest)?,
            Some((scheme, _)) => {
                return Err(format!(
                    "\"{}\" is not a PostgreSQL URL scheme",
                    scheme.chars().take(40).collect::<String>()
                ))
            }
            None if s.contains('=') => keyword_pairs(s)?,
            None => {
                return Err(
                    "the value is not a database URL (expected postgresql://user:password@host/database)"
                        .into(),
                )
            }
        };
        Self::from_pairs(pairs)
    }

    fn from_pairs(pairs: Vec<(String, String)>) -> Result<DbTarget, String> {
        let mut hosts: Vec<String> = Vec::new();
        let mut addrs: Vec<String> = Vec::new();
        let mut ports: Vec<String> = Vec::new();
        let mut attrs = SessionAttrs::Any;
        let mut connect_timeout = DEFAULT_CONNECT_TIMEOUT;
        let mut database = String::new();
        let mut params = Vec::new();
        for (key, value) in pairs {
            match key.as_str() {
                "host" => hosts = value.split(',').map(str::to_string).collect(),
                "hostaddr" => addrs = value.split(',').map(str::to_string).collect(),
                "port" => ports = value.split(',').map(str::to_string).collect(),
                "target_session_attrs" => attrs = session_attrs(&value)?,
                "connect_timeout" => connect_timeout = timeout(&value)?,
                _ => {
                    if key == "dbname" {
                        database = value.clone();
                    }
                    params.push((key, value));
                }
            }
        }
        names_checked_with_a_ca(&mut params);
        let endpoints = match addrs.is_empty() {
            true => endpoints(&hosts, &ports)?,
            false => pinned(&addrs, &hosts, &ports, &params)?,
        };
        Ok(DbTarget {
            endpoints,
            attrs,
            connect_timeout,
            database,
            params,
        })
    }

    /// sqlx's connect options for the `i`th host.
    pub fn options(&self, i: usize) -> Result<PgConnectOptions, String> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.params {
            query.append_pair(k, v);
        }
        match &self.endpoints[i] {
            Endpoint::Tcp { host, port } => {
                query.append_pair("host", host);
                query.append_pair("port", &port.to_string());
            }
            Endpoint::Socket(dir) => {
                query.append_pair("host", dir);
            }
        }
        format!("postgres://localhost/?{}", query.finish())
            .parse::<PgConnectOptions>()
            .map_err(|e| {
                // sqlx's words name the bad parameter, never its value.
                format!("the database settings for {}: {e}", self.endpoints[i])
            })
    }

    /// "PostgreSQL at h1:5432, h2:5433/placement (sslmode require)", for
    /// messages.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self.endpoints.iter().map(|e| e.to_string()).collect();
        let tls = self
            .params
            .iter()
            .find(|(k, _)| k == "sslmode" || k == "ssl-mode")
            .map(|(_, mode)| format!(" (sslmode {mode})"))
            .unwrap_or_default();
        format!("PostgreSQL at {}/{}{tls}", hosts.join(", "), self.database)
    }
}

/// `target_session_attrs`: only the kinds that can take writes.
fn session_attrs(v: &str) -> Result<SessionAttrs, String> {
    match v {
        "any" => Ok(SessionAttrs::Any),
        "read-write" | "primary" => Ok(SessionAttrs::ReadWrite),
        "read-only" | "standby" | "prefer-standby" => Err(format!(
            "target_session_attrs={v} is refused: this service writes, so it needs read-write (or leave the parameter out)"
        )),
        other => Err(format!(
            "unknown target_session_attrs \"{}\" (libpq's values: any, read-write, primary, read-only, standby, prefer-standby)",
            other.chars().take(40).collect::<String>()
        )),
    }
}

fn timeout(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        // libpq: zero (or negative) means wait forever; keep a bound.
        Ok(0) => Ok(DEFAULT_CONNECT_TIMEOUT),
        // libpq: anything below 2 s counts as 2 s.
        Ok(n) => Ok(Duration::from_secs(n.max(2))),
        Err(_) => Err("connect_timeout must be a number of seconds".into()),
    }
}

/// Hosts and ports paired as libpq pairs them: one port for all hosts or
/// one per host; no host means the local socket's default.
fn endpoints(hosts: &[String], ports: &[String]) -> Result<Vec<Endpoint>, String> {
    let hosts: Vec<String> = if hosts.is_empty() {
        vec!["localhost".into()]
    } else {
        hosts.to_vec()
    };
    let ports: Vec<u16> = ports
        .iter()
        .map(|p| port(p).ok_or_else(|| format!("invalid port ({PORT_RULE})")))
        .collect::<Result<_, _>>()?;
    if ports.len() > 1 && ports.len() != hosts.len() {
        return Err(format!(
            "{} hosts but {} ports: give one port for every host, or one for all",
            hosts.len(),
            ports.len()
        ));
    }
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = match ports.len() {
                0 => 5432,
                1 => ports[0],
                _ => ports[i],
            };
            match h.as_str() {
                "" => Err("an empty host in the host list".to_string()),
                dir if dir.starts_with('/') => Ok(Endpoint::Socket(dir.to_string())),
                host => Ok(Endpoint::Tcp {
                    host: host.to_string(),
                    port,
                }),
            }
        })
        .collect()
}

/// A CA given (`sslrootcert`) with `sslmode` absent, `prefer` or
/// `require` checks the server's name as well as its chain: `verify-full`.
/// libpq would check the chain only (`require` with a root certificate
/// acts as `verify-ca`), so any certificate the CA signed, for whatever
/// host, would pass; with a public CA or the system bundle that is any
/// publicly trusted certificate (issue 64). `sslmode=verify-ca` stays the
/// explicit choice to check the chain only.
fn names_checked_with_a_ca(params: &mut Vec<(String, String)>) {
    let is_mode = |k: &str| k == "sslmode" || k == "ssl-mode";
    if !params.iter().any(|(k, _)| k == "sslrootcert") {
        return;
    }
    let mode = params.iter().rev().find(|(k, _)| is_mode(k));
    if mode.is_none_or(|(_, v)| v == "prefer" || v == "require") {
        params.retain(|(k, _)| !is_mode(k));
        params.push(("sslmode".into(), "verify-full".into()));
    }
}

/// libpq's `hostaddr`: the addresses connected to, whatever order the
/// keys came in, without a name lookup; `host`, when given too, names
/// them one for one (libpq verifies a certificate against it). This
/// service connects to the address it verifies, so `verify-full` with a
/// name beside the address is refused rather than checked against the
/// wrong one.
fn pinned(
    addrs: &[String],
    hosts: &[String],
    ports: &[String],
    params: &[(String, String)],
) -> Result<Vec<Endpoint>, String> {
    if addrs.iter().any(|a| a.parse::<std::net::IpAddr>().is_err()) {
        return Err("hostaddr must hold numeric IP addresses (host is for names)".into());
    }
    if !hosts.is_empty() && hosts.len() != addrs.len() {
        return Err(format!(
            "{} hostaddr values but {} host values: give one name for every address",
            addrs.len(),
            hosts.len()
        ));
    }
    let verify_full = params
        .iter()
        .any(|(k, v)| (k == "sslmode" || k == "ssl-mode") && v == "verify-full");
    if verify_full && hosts.iter().zip(addrs).any(|(h, a)| h != a) {
        return Err("sslmode=verify-full (what sslrootcert means unless sslmode=verify-ca says otherwise) with both hostaddr and host: this service checks the certificate against the address it connects to, so it cannot check it against host; give host alone (resolved by DNS), or hostaddr with sslmode=verify-ca".into());
    }
    endpoints(addrs, ports)
}

/// What a port must be, said with every refused one. The port's text is
/// never echoed: a password with an unescaped `/`, `?` or `#` ends the
/// URL's authority early and lands where the port is read.
const PORT_RULE: &str = "a number from 1 to 65535; a password holding \"/\", \"?\", \"#\" or \"@\" must be percent-encoded";

fn port(p: &str) -> Option<u16> {
    p.trim().parse::<u16>().ok().filter(|n| *n > 0)
}

/// The URL's parts (after the scheme) as libpq key/value pairs.
fn url_pairs(rest: &str) -> Result<Vec<(String, String)>, String> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hostlist) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut pairs = Vec::new();
    if let Some(u) = userinfo {
        let (user, password) = match u.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (u, None),
        };
        if !user.is_empty() {
            pairs.push(("user".into(), percent_decode(user)?));
        }
        if let Some(p) = password {
            pairs.push(("password".into(), percent_decode(p)?));
        }
    }
    if !hostlist.is_empty() {
        let (hosts, ports) = host_list(hostlist)?;
        pairs.push(("host".into(), hosts.join(",")));
        if ports.iter().any(|p| !p.is_empty()) {
            pairs.push(("port".into(), ports.join(",")));
        }
    }
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, q),
        None => (tail, ""),
    };
    let path = path.split('#').next().unwrap_or("").trim_start_matches('/');
    if !path.is_empty() {
        pairs.push(("dbname".into(), percent_decode(path)?));
    }
    let query = query.split('#').next().unwrap_or("");
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        pairs.push((k.into_owned(), v.into_owned()));
    }
    Ok(pairs)
}

/// `h1:5432,[::1]:5433,h3` → hosts and ports ("" where none is given).
fn host_list(list: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let mut hosts = Vec::new();
    let mut ports = Vec::new();
    for item in list.split(',') {
        let (host, port) = if let Some(rest) = item.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| "an IPv6 host without its closing ]".to_string())?;
            (h.to_string(), after.strip_prefix(':').unwrap_or(after))
        } else {
            match item.rsplit_once(':') {
                Some((h, p)) => (percent_decode(h)?, p),
                None => (percent_decode(item)?, ""),
            }
        };
        if !port.is_empty() {
            self::port(port)
                .ok_or_else(|| format!("invalid port for host {host} ({PORT_RULE})"))?;
        }
        hosts.push(host);
        ports.push(port.to_string());
    }
    let given = ports.iter().filter(|p| !p.is_empty()).count();
    if given > 0 && given < ports.len() {
        // libpq's URL form leaves a port out to mean 5432.
        for p in &mut ports {
            if p.is_empty() {
                *p = "5432".into();
            }
        }
    }
    Ok((hosts, ports))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a bad %-escape in the database URL".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the database URL is not UTF-8 once decoded".to_string())
}

/// libpq's key/value form: `key = value` pairs separated by spaces,
/// values optionally in single quotes with `\'` and `\\` escapes.
fn keyword_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        // What failed is named by the option before it, never by its own
        // text: a value with an unquoted space, or a URL without its
        // scheme, puts a piece of a password where a keyword should be.
        let after = || match pairs.last() {
            Some((k, _)) => format!(" after {k}="),
            None => String::new(),
        };
        if chars.next() != Some('=') {
            return Err(format!(
                "an option without \"=\"{} in the connection string (a value with spaces needs single quotes)",
                after()
            ));
        }
        if !KEYWORDS.contains(&key.as_str()) {
            // Only a word that looks like a keyword is shown.
            let shown = key.len() <= 40 && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            return Err(match shown {
                true => format!("invalid connection option \"{key}\""),
                false => format!(
                    "an invalid connection option{} (not shown: it may hold a password; a URL needs its postgresql:// scheme)",
                    after()
                ),
            });
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let value = keyword_value(&mut chars)?;
        pairs.push((key, value));
    }
}

fn keyword_value(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, String> {
    let mut value = String::new();
    if chars.peek() == Some(&'\'') {
        chars.next();
        loop {
            match chars.next() {
                Some('\\') => value.extend(chars.next()),
                Some('\'') => return Ok(value),
                Some(c) => value.push(c),
                None => return Err("an unterminated quoted value in the connection string".into()),
            }
        }
    }
    while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
        if c == '\\' {
            value.extend(chars.next());
        } else {
            value.push(c);
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn a_url_names_hosts_in_order_with_their_ports() {
        let t = DbTarget::parse(
            "postgres://u:p%40ss@h1:5432,h2:5433,[::1]:5434/placement?target_session_attrs=read-write&sslmode=disable",
        )
        .unwrap();
        assert_eq!(
            t.endpoints,
            vec![tcp("h1", 5432), tcp("h2", 5433), tcp("::1", 5434)]
        );
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
        assert_eq!(t.database, "placement");
        let o = t.options(1).unwrap();
        assert_eq!((o.get_host(), o.get_port()), ("h2", 5433));
        assert_eq!(o.get_database(), Some("placement"));
        assert_eq!(o.get_username(), "u");
        assert_eq!(
            t.describe(),
            "PostgreSQL at h1:5432, h2:5433, [::1]:5434/placement (sslmode disable)"
        );
    }

    #[test]
    fn one_host_and_sockets_read_as_before() {
        let t = DbTarget::parse("postgresql://postgres@127.0.0.1:55432/app").unwrap();
        assert_eq!(t.endpoints, vec![tcp("127.0.0.1", 55432)]);
        assert_eq!(t.attrs, SessionAttrs::Any);
        let t = DbTarget::parse("postgresql://u@/placement?host=/run/pg").unwrap();
        assert_eq!(t.endpoints, vec![Endpoint::Socket("/run/pg".into())]);
        assert_eq!(
            t.options(0).unwrap().get_socket().unwrap().to_str(),
            Some("/run/pg")
        );
        let t = DbTarget::parse("postgresql://u@h/db?host=a,b&port=1,2").unwrap();
        assert_eq!(t.endpoints, vec![tcp("a", 1), tcp("b", 2)]);
    }

    /// Issue 50, item 7: `hostaddr` is connected to whether it comes
    /// before or after `host`; never a name lookup in its place.
    #[test]
    fn a_hostaddr_pin_holds_in_any_order() {
        for s in [
            "hostaddr=127.0.0.1 host=db.example port=5433 dbname=p user=u",
            "host=db.example hostaddr=127.0.0.1 port=5433 dbname=p user=u",
            "postgresql://u@db.example:5433/p?hostaddr=127.0.0.1",
        ] {
            let t = DbTarget::parse(s).unwrap();
            assert_eq!(t.endpoints, vec![tcp("127.0.0.1", 5433)], "{s}");
        }
        let refused = |s: &str| DbTarget::parse(s).unwrap_err();
        assert!(refused("hostaddr=db.example dbname=p").contains("numeric"));
        assert!(
            refused("host=a,b hostaddr=127.0.0.1 dbname=p").contains("one name for every address")
        );
        assert!(
            refused("host=db.example hostaddr=127.0.0.1 sslmode=verify-full dbname=p")
                .contains("verify-ca")
        );
    }

    #[test]
    fn a_ca_checks_the_name_unless_verify_ca_says_otherwise() {
        let mode = |s: &str| {
            let t = DbTarget::parse(s).unwrap();
            let modes: Vec<&str> = t
                .params
                .iter()
                .filter(|(k, _)| k == "sslmode")
                .map(|(_, v)| v.as_str())
                .collect();
            modes.join(",")
        };
        let ca = "postgres://u@db/p?sslrootcert=/etc/ca.pem";
        assert_eq!(mode(ca), "verify-full");
        assert_eq!(mode(&format!("{ca}&sslmode=require")), "verify-full");
        assert_eq!(mode(&format!("{ca}&sslmode=prefer")), "verify-full");
        assert_eq!(mode(&format!("{ca}&sslmode=verify-ca")), "verify-ca");
        assert_eq!(mode("postgres://u@db/p?sslmode=require"), "require");
        assert_eq!(
            mode("host=db sslmode=require sslrootcert=/ca dbname=p"),
            "verify-full"
        );
        // The name is checked against the address connected to: a CA with
        // a name beside a pinned address must say verify-ca.
        assert!(
            DbTarget::parse("host=db hostaddr=127.0.0.1 sslrootcert=/ca dbname=p")
                .unwrap_err()
                .contains("verify-ca")
        );
    }

    #[test]
    fn the_key_value_form_reads_like_libpq() {
        let t = DbTarget::parse(
            "host=h1,h2 port = 5432,5433 dbname=placement user=u password='a b\\'c' target_session_attrs=primary connect_timeout=1",
        )
        .unwrap();
        assert_eq!(t.endpoints, vec![tcp("h1", 5432), tcp("h2", 5433)]);
        assert_eq!(t.attrs, SessionAttrs::ReadWrite);
        assert_eq!(t.connect_timeout, Duration::from_secs(2));
        assert!(t.params.contains(&("password".into(), "a b'c".into())));
        let o = t.options(0).unwrap();
        assert_eq!(o.get_username(), "u");
        assert_eq!(o.get_database(), Some("placement"));
    }

    #[test]
    fn bad_input_is_one_clear_error_without_the_password() {
        let cases = [
            (
                "postgres://u:secret@h1:54x2,h2/db",
                "invalid port for host h1",
            ),
            ("postgres://u:secret@h1:0/db", "invalid port"),
            // A password with "=" and no scheme: read as key/value.
            (
                "placement:S3cr3tPW==@db/placement",
                "an invalid connection option",
            ),
            // An unescaped "/" in the password ends the authority early.
            (
                "postgres://placement:S3cr/3tPW@db/placement",
                "invalid port for host placement",
            ),
            (
                "postgres://placement:S3cr?3tPW@db/placement",
                "invalid port for host placement",
            ),
            (
                "postgres://placement:S3cr#3tPW@db/placement",
                "invalid port for host placement",
            ),
            // An unquoted space in a key/value password.
            (
                "host=db password=S3cr 3tPW dbname=placement",
                "an option without \"=\" after password=",
            ),
            (
                "host=h1,h2,h3 port=1,2 password=secret",
                "3 hosts but 2 ports",
            ),
            (
                "postgres://u:secret@h1,h2/db?target_session_attrs=read-only",
                "target_session_attrs=read-only is refused",
            ),
            (
                "postgres://u:secret@h1/db?target_session_attrs=prefer-standby",
                "is refused",
            ),
            (
                "postgres://u:secret@h1/db?target_session_attrs=sometimes",
                "unknown target_session_attrs \"sometimes\"",
            ),
            (
                "host=h1 passwd=secret",
                "invalid connection option \"passwd\"",
            ),
            ("host=h1 password='secret", "unterminated quoted value"),
            ("postgres://u:secret@h1,,h2/db", "an empty host"),
            ("mysql://u:secret@h/db", "not a PostgreSQL URL scheme"),
            (
                "postgres://u:secret@h1/db?connect_timeout=soon",
                "connect_timeout",
            ),
        ];
        for (input, want) in cases {
            let e = DbTarget::parse(input).expect_err(input);
            assert!(e.contains(want), "{input}: {e}");
            for piece in ["secret", "S3cr", "3tPW"] {
                assert!(!e.contains(piece), "{input}: {e}");
            }
        }
    }
}
