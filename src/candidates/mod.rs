//! The allocation-candidate engine. Its core: Placement's query grammar
//! parsed into a typed [`find::Search`] (query_grammar.rs, groups.rs), the
//! provider snapshot (snapshot.rs, snapshot_build.rs), the bounded pure
//! solver (solve.rs), rendering (render.rs), and [`find::run`], which reads
//! and solves one search. Its speed machinery lives in [`speed`]: none of
//! it decides an answer, each part only makes one cheaper to reach.

pub mod budget;
pub mod explain;
pub mod find;
pub mod groups;
pub mod low_priority_filter;
pub mod query_grammar;
pub mod render;
pub mod snapshot;
pub mod snapshot_build;
pub mod snapshot_nodes;
pub mod solve;
pub mod speed;
