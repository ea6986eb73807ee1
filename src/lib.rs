//! A resource placement and scheduling service: the OpenStack Placement API
//! on PostgreSQL, with an Eru-style scheduler on top.

pub mod api;
pub mod candidates;
pub mod config;
pub mod db;
pub mod deploy;
pub mod error;
pub mod localdb;
pub mod sched;
pub mod types;

use std::sync::Arc;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The database pool.
    pub pool: sqlx::PgPool,
    /// Behaviour settings.
    pub settings: Arc<config::Settings>,
    /// This process's snapshot of the provider data candidates need.
    pub candidates: Arc<candidates::cache::SnapshotCache>,
}

impl AppState {
    /// State over a pool with the given settings and an empty candidates cache.
    pub fn new(pool: sqlx::PgPool, settings: config::Settings) -> Self {
        AppState {
            pool,
            settings: Arc::new(settings),
            candidates: Arc::default(),
        }
    }
}

/// The whole HTTP application, used by `main` and by the tests.
pub fn app(state: AppState) -> axum::Router {
    api::router(state)
}
