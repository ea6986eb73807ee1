//! Each process's copy of the apps' owners: the project that first
//! deployed an app owns it for good (`deployment_apps` rows are only ever
//! inserted), so once read an owner needs no round trip again. Before,
//! every deployment gave its app to its project, or read who had it, in
//! two statements of their own (two of a single deploy's round trips).
//!
//! Speed machinery: it decides nothing. A process that has not seen an
//! app asks the database, which stays the one place an app is given.

use crate::db::deployments as db;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Owners kept at most: past it the copy starts again empty (apps are
/// named by clients, so the copy is bounded however many they name).
const MOST_APPS: usize = 100_000;

/// The owners this process has read, by app.
#[derive(Debug, Default)]
pub struct AppOwners {
    known: Mutex<HashMap<String, String>>,
}

impl AppOwners {
    /// The project `app` belongs to: `project`'s from now on when nobody
    /// had it (a deployment takes it).
    pub async fn take(
        &self,
        pool: &crate::db::Pool,
        app: &str,
        project: &str,
    ) -> Result<String, sqlx::Error> {
        if let Some(owner) = self.known(app) {
            return Ok(owner);
        }
        let mut conn = pool.acquire().await?;
        let owner = db::take_app(&mut conn, app, project).await?;
        self.keep(app, &owner);
        Ok(owner)
    }

    /// The project `app` belongs to, if it was ever deployed (a dry run
    /// and a read take nothing).
    pub async fn owner(
        &self,
        pool: &crate::db::Pool,
        app: &str,
    ) -> Result<Option<String>, sqlx::Error> {
        if let Some(owner) = self.known(app) {
            return Ok(Some(owner));
        }
        let mut conn = pool.acquire().await?;
        let owner = db::app_owner(&mut conn, app).await?;
        if let Some(owner) = &owner {
            self.keep(app, owner);
        }
        Ok(owner)
    }

    fn known(&self, app: &str) -> Option<String> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(app).cloned()
    }

    fn keep(&self, app: &str, owner: &str) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= MOST_APPS {
            known.clear();
        }
        known.insert(app.to_string(), owner.to_string());
    }
}
