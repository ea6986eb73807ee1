//! The SQL of `placement import`: reading a real Placement database
//! ([`source`]) and writing it into ours ([`target`]).

pub mod source;
pub mod target;
