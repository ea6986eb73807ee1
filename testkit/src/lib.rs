//! The test harness shared by every integration test and bench of the
//! placement service, in one place:
//! - [`common`]: a fresh database per test (cloned from a migrated
//!   template; without `DATABASE_URL`, a throwaway PostgreSQL), the app
//!   driven in-process, and assertions on Placement's error shape;
//! - [`cluster`]: real `placement serve` processes on one database;
//! - [`pg`]: a private PostgreSQL that a test can stop and restart.

pub mod browser;
pub mod cluster;
pub mod common;
pub mod pg;

/// The `placement` binary Cargo built for these tests: beside the test
/// executable's `deps/` directory.
pub fn placement_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    dir.join(format!("placement{}", std::env::consts::EXE_SUFFIX))
}
