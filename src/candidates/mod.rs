//! The allocation-candidate engine: request parsing, the provider data a
//! request needs, the pure solver, and rendering.

mod ahead;
pub mod budget;
pub mod explain;
pub mod find;
pub mod groups;
pub mod low_priority_filter;
pub mod query_grammar;
pub mod render;
pub mod rest;
pub mod snapshot;
pub mod snapshot_build;
pub mod snapshot_cache;
pub mod solve;
pub mod solving_threads;
mod visibility;
