//! The test harness shared by every integration test and bench of the
//! placement service, in one place:
//! - [`common`]: a fresh database per test (cloned from a migrated
//!   template; without `DATABASE_URL`, a throwaway PostgreSQL), the app
//!   driven in-process, and assertions on Placement's error shape;
//! - [`cluster`]: real `placement serve` processes on one database;
//! - [`load`]: claims and deletes with a ledger of what was promised,
//!   audited against the database afterwards;
//! - [`cpu`]: CPU seconds of a process or a PostgreSQL cluster, for benches;
//! - [`cgroups`]: real cgroups with workers in them, and the node agent;
//! - [`pgbouncer`]: PgBouncer in transaction mode in front of it;
//! - [`pg`]: a private PostgreSQL that a test can stop, restart, kill,
//!   replicate and promote.

pub mod browser;
pub mod cgroups;
pub mod cluster;
pub mod common;
pub mod cpu;
pub mod load;
pub mod patroni;
pub mod pg;
pub mod pgbouncer;

/// The `placement` binary Cargo built for these tests: beside the test
/// executable's `deps/` directory; or `BENCH_SERVER_BIN`, another build a
/// bench alternates with this one.
pub fn placement_bin() -> std::path::PathBuf {
    // A bench alternating two builds on one machine names the other one.
    if let Some(other) = std::env::var_os("BENCH_SERVER_BIN") {
        return other.into();
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    dir.join(format!("placement{}", std::env::consts::EXE_SUFFIX))
}

/// The scheduler's node for a vector's or fixture's label (up to 16
/// bytes): the label's bytes, zero-padded, as the provider uuid, so that
/// nodes order as their labels do, as Eru orders host names.
pub fn node(label: &str) -> placement::sched::NodeName {
    let bytes = label.as_bytes();
    assert!(bytes.len() <= 16, "node label {label:?} is over 16 bytes");
    let mut raw = [0u8; 16];
    raw[..bytes.len()].copy_from_slice(bytes);
    placement::sched::NodeName::of(uuid::Uuid::from_bytes(raw))
}

/// The label a [`node`] was made from.
pub fn label(node: placement::sched::NodeName) -> String {
    let raw = *node.uuid().as_bytes();
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}
