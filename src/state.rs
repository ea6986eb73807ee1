//! The state every handler shares: the pool, the settings, this process's
//! candidate snapshot and the CPU permits.

use crate::{candidates, config, error};
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
    /// One permit per core for CPU-heavy work (solve, render, plans), so
    /// that a burst of expensive requests queues instead of crowding out
    /// the async workers that answer everything else.
    pub cpu: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    /// State over a pool with the given settings and an empty candidates cache.
    pub fn new(pool: sqlx::PgPool, settings: config::Settings) -> Self {
        AppState {
            pool,
            settings: Arc::new(settings),
            candidates: Arc::default(),
            cpu: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, usize::from),
            )),
        }
    }

    /// Runs CPU-heavy work on the blocking pool, one job per core at a time.
    pub async fn cpu_work<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> error::ApiResult<T> {
        candidates::find::on_cpu(&self.cpu, work).await
    }

    /// The candidate engine over this process's state.
    pub fn engine(&self) -> candidates::find::Engine<'_> {
        candidates::find::Engine {
            pool: &self.pool,
            cache: &self.candidates,
            settings: &self.settings,
            cpu: &self.cpu,
        }
    }
}
