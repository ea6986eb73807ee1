//! Start-up and security through real server processes: a Placement-style
//! `placement.conf` alone configures a server, a malformed one stops it
//! with its line; a bad policy file stops start-up with one line naming
//! the line, and a good one's rules are what the server enforces; under
//! Keystone a token nobody can validate gets 503 (never a pass), a
//! missing or malformed one 401 with `WWW-Authenticate`, and identity
//! headers change nothing; CORS answers bad preflights without its
//! headers; a second zero-config server on a data directory in use names
//! the first. (The real Keystone is driven by `scripts/keystone_check.sh`.)
//!
//! One binary, one module per concern: `security` (policy files, Keystone
//! that cannot answer, CORS), `config` (placement.conf), `database` (the
//! zero-config data directory, TLS to PostgreSQL), `observability` (JSON
//! logs, metrics).

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod config;
mod dashboard;
mod database;
mod health;
mod isolation;
mod observability;
mod policy_files;
mod retention;
mod sealed;
mod security;

pub(crate) fn policy_file(text: &str) -> tempfile_path::TempFile {
    tempfile_path::TempFile::with(text)
}

/// A file under the temp dir removed on drop (no extra crate for it).
mod tempfile_path {
    pub struct TempFile(pub std::path::PathBuf);
    impl TempFile {
        pub fn with(text: &str) -> Self {
            let path = std::env::temp_dir().join(format!("policy-{}.yaml", uuid::Uuid::new_v4()));
            std::fs::write(&path, text).expect("write policy file");
            TempFile(path)
        }
        pub fn arg(&self) -> String {
            self.0.display().to_string()
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
/// Runs `placement serve` with `args` and expects it to exit at once with
/// an error; its stderr. (A `--data-dir` run gets no DATABASE_URL.)
pub(crate) fn refused_start(args: &[&str]) -> String {
    if args.contains(&"--data-dir") {
        refused_start_with(None, args)
    } else {
        refused_start_with(Some("postgres://nobody@127.0.0.1:1/none"), args)
    }
}

/// Like [`refused_start`], on the database at `url`.
pub(crate) fn refused_start_on(url: &str, args: &[&str]) -> String {
    refused_start_with(Some(url), args)
}

fn refused_start_with(url: Option<&str>, args: &[&str]) -> String {
    let mut cmd = Command::new(placement_testkit::placement_bin());
    match url {
        None => cmd.env_remove("DATABASE_URL"),
        Some(url) => cmd.env("DATABASE_URL", url),
    };
    cmd.arg("serve");
    if !args.contains(&"--bind") {
        cmd.args(["--bind", "127.0.0.1:0"]);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start placement");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(!status.success(), "{args:?} started");
            let out = child.wait_with_output().expect("stderr");
            return String::from_utf8_lossy(&out.stderr).into_owned();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?}: still running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
pub(crate) async fn send(
    base: &str,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("openstack-api-version", "placement latest");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}
