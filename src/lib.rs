//! A resource placement and scheduling service: the OpenStack Placement API
//! on PostgreSQL, with an Eru-style scheduler on top.
//!
//! Layers, each using only those below it (`tests/layering.rs` checks it):
//! 1. `types`, `error`, `config`, `policy`, `coalescing`, `clock`: newtypes,
//!    the services' error (what went wrong, with a stable code; HTTP-free),
//!    settings, the policy engine (oslo.policy's rules, pure), coalescing of
//!    requests arriving together, the database's clock;
//! 2. `db` (all SQL), `sched` (pure scheduling algorithms) and `auth`
//!    (noauth2, Keystone token validation);
//! 3. services: `candidates` (the candidate engine, entry point
//!    `candidates::find::run`, its speed machinery in `candidates::speed`), `allocation` (allocation writes with retries),
//!    `inventory` (inventory rules and writes), `provider` (provider
//!    creation, re-parenting and deletion rules); above them `fairness`
//!    (quotas, reservations, DRF admission rounds), which commits through
//!    `allocation`, and `deploy` (the deployment service over the engine,
//!    the scheduler and `allocation`);
//! 4. `state`: what every handler shares, with the security settings;
//!    `maintenance`: the periodic passes beside the requests;
//! 5. `api`: thin handlers, one file per resource; a handler never imports
//!    another handler, only the plumbing (`extract`, `respond`, `schema`, …).
//!    Only `api`, `serve` and `main` know HTTP: errors become statuses in
//!    `api::respond::error`;
//! 6. `serve` and `localdb`: the HTTP server and the zero-config PostgreSQL;
//!    `agent`: the per-machine agent, a client of the service over HTTP;
//! 7. `startup`: `placement serve` from its arguments to its stop.

pub mod agent;
pub mod allocation;
pub mod api;
pub mod audit;
pub mod auth;
pub mod candidates;
pub mod clock;
pub mod coalescing;
pub mod colocation;
pub mod config;
pub mod db;
pub mod deploy;
pub mod error;
pub mod fairness;
pub mod import;
pub mod inventory;
pub mod localdb;
pub mod log_output;
pub mod maintenance;
pub mod metrics;
pub mod microversions;
pub mod policy;
pub mod provider;
pub mod sched;
pub mod serve;
pub mod startup;
pub mod state;
pub mod types;
pub mod upgrade;

pub use state::AppState;

/// The whole HTTP application, used by `main` and by the tests.
pub fn app(state: AppState) -> api::Router {
    api::respond::path_prefix::mount(api::router(state))
}
