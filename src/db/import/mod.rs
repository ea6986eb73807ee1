//! The SQL of `placement import`: reading a real Placement database
//! ([`source`] on PostgreSQL, [`source_mysql`] on MySQL and MariaDB) and
//! writing it into ours ([`target`]).

pub mod source;
pub mod source_mysql;
pub mod target;
