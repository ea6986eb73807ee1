//! The allocation-candidate engine: request parsing, the provider data a
//! request needs, the pure solver, and rendering.

pub mod request;
