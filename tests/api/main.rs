//! HTTP tests of the Placement API against a real PostgreSQL: one binary
//! (to keep link time low), one module per resource or feature. Every test
//! gets a brand-new database (see `common`) and drives `placement::app` with
//! `tower::ServiceExt::oneshot`, no socket.
//!
//! Needs `DATABASE_URL` (a server where the role may `CREATE DATABASE`);
//! `bash scripts/test.sh` starts a throwaway PostgreSQL and sets it.

use placement_testkit::common;

mod aggregates;
mod allocations;
mod allocations_post;
mod answer_order;
mod bad_input;
mod batch_placement;
mod colocation;
mod divergences;
mod explain;
mod explain_sharing;
mod fairness;
mod hostile;
mod http;
mod inventories;
mod provider_lists;
mod providers;
mod reshaper;
mod resource_classes;
mod snapshot_cache;
mod traits;
mod usages;
