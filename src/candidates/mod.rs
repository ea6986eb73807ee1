//! The allocation-candidate engine: request parsing, the provider data a
//! request needs, the pure solver, and rendering.

mod ahead;
pub mod batch;
pub mod budget;
pub mod cache;
pub mod cpu;
pub mod explain;
pub mod find;
pub mod groups;
pub mod load;
pub mod render;
pub mod request;
pub mod rest;
pub mod snapshot;
pub mod solve;
mod visibility;
