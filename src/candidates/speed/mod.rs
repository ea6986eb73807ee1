//! The candidate engine's speed machinery, apart from the rules it speeds
//! up: it implements the seams the core states (`candidates::engine`),
//! and each part answers exactly as the plain path would (the tests of
//! `tests/shared_reads.rs` and `tests/api/snapshot_cache.rs` hold it
//! to that), only sooner or with fewer round trips. Only `state.rs`, which
//! assembles a process's machinery, names it (`tests/layering.rs`).
//!
//! - `snapshot_cache.rs`: this process's copy of the provider data,
//!   brought forward from the change log instead of read whole;
//!   `snapshot_visibility.rs`: whether one PostgreSQL snapshot sees all
//!   another does, so the copy serves every search it covers;
//! - `shared_reads.rs`: the searches waiting in this process resolve
//!   their names and read their snapshot in one shared statement;
//! - solving ahead: `SharedReads` guesses a search's read (the settled
//!   copy, the ids past turns resolved) and `SolvingThreads` says whether
//!   the search is large enough to start on it; the core keeps that
//!   answer only when the read confirms the guess (`solve_ahead.rs`);
//! - `solving_threads.rs` (the `SolvingStep`): where a search's CPU work runs (the blocking
//!   pool, one job per core, or in place when small).
//!
//! The connection the shared reads keep warm between them is
//! `db::warm_connection`; requests coalesced into one statement outside the
//! engine (claims, queue submissions) use `crate::coalescing`.

pub mod shared_reads;
pub mod snapshot_cache;
mod snapshot_visibility;
pub mod solving_threads;
