//! The allocation-candidate engine. Its core: the typed [`search::Search`]
//! it is asked (Placement's query pairs become one at the API edge,
//! `api::allocation_candidates::query`; the values' grammar shared with
//! provider lists and deployments is query_grammar.rs), the
//! names it uses and their resolution (names.rs), the provider snapshot
//! (snapshot/, snapshot_build.rs), the bounded pure solver (solve.rs),
//! and [`find::run`], which reads and solves one search through the two
//! seams of `engine.rs` and returns candidates (their wire format is the
//! caller's, written by the writer it hands in). Its speed machinery lives
//! in [`speed`] and implements those seams: none of it decides an answer,
//! each part only makes one cheaper to reach. The core names nothing of
//! `speed` (`tests/layering.rs`).

pub mod answer;
pub mod budget;
pub mod engine;
pub mod explain;
pub mod find;
pub mod low_priority_filter;
pub mod names;
pub mod query_grammar;
pub mod search;
pub mod snapshot;
pub mod snapshot_build;
pub mod solve;
pub mod solve_ahead;
pub mod speed;
