//! The candidate engine's two seams: what its rules (`find::run`) need
//! from outside them, stated as traits the core defines and the speed
//! machinery (`candidates::speed`) implements.
//!
//! - [`ProviderRead`]: a search's names and provider data, read in a
//!   statement shared with other searches when it may be, else the plain
//!   read in the search's own transaction, where [`ProviderSnapshots`] gives
//!   the providers as that transaction sees them;
//! - [`SolvingStep`]: where a resolved search is solved (in place, on the
//!   blocking pool), and whether solving it before its read pays.
//!
//! The core decides every answer: how names resolve (`names.rs`), what is
//! withheld, which solve ahead of its read counts (`find::SolveAhead`).
//! An implementation only reaches the same answer sooner; a plain one (read
//! every time, solve in place) answers the same. `tests/layering.rs` holds
//! that the core names nothing of `speed`.

use super::answer::Rendering;
use super::names::{Ids, Names};
use super::snapshot::Snapshot;
use super::solve::{self, Candidate, Limits};
use crate::config::Settings;
use crate::db::candidates::{self as db, NamesRead, Seen};
use crate::error::Result;
use sqlx::PgConnection;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Work a seam hands back to await.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The provider data as a repeatable-read transaction sees it: what a
/// search's plain read, a fairness round and a deployment's refresh need
/// (a narrow handle: they never see how it is kept).
pub trait ProviderSnapshots: Send + Sync {
    /// The provider data as of (at least) `seen`, the snapshot of the
    /// repeatable-read transaction open on `conn`.
    fn at<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        seen: Seen,
    ) -> Pending<'a, std::result::Result<Arc<Snapshot>, sqlx::Error>>;
}

/// The provider data as of (at least) the transaction open on `conn`.
pub async fn providers_now(
    snapshots: &dyn ProviderSnapshots,
    conn: &mut PgConnection,
) -> std::result::Result<Arc<Snapshot>, sqlx::Error> {
    let seen = db::seen(conn).await?;
    snapshots.at(conn, seen).await
}

/// What a read shared with other searches found: every name of the
/// searches in it (each search resolves only its own) and the provider
/// data that statement's snapshot sees.
#[derive(Debug)]
pub struct SharedRead {
    /// The names and the snapshot of the statement that read them.
    pub named: NamesRead,
    /// The provider data covering `named`'s snapshot; None when only the
    /// plain read applies (a reservation exists: the shared read does not
    /// withhold it; or only a full load would bring the data there).
    pub snap: Option<Arc<Snapshot>>,
}

/// Where a search's names and provider data come from.
pub trait ProviderRead: Send + Sync {
    /// The provider data for the plain read.
    fn snapshots(&self) -> &dyn ProviderSnapshots;

    /// The names and providers of a production search, read with the
    /// searches waiting beside it. A 503 when the database could not be
    /// reached; None when a shared read failed otherwise (the plain read
    /// then says why).
    fn shared<'a>(
        &'a self,
        pool: &'a crate::db::Pool,
        names: &'a Names,
    ) -> Pending<'a, Result<Option<Arc<SharedRead>>>>;

    /// What a read of `names` will most likely return, without a round
    /// trip: the provider data as it stands and the ids past reads gave the
    /// names. None when the data is moving or a name is new here.
    fn guess(&self, names: &Names) -> Option<(Arc<Snapshot>, Ids)>;
}

/// A resolved search to solve, and how to render its answer when the
/// caller wants it rendered.
pub struct Job {
    /// The provider data.
    pub snap: Arc<Snapshot>,
    /// The resolved request.
    pub request: solve::Request,
    /// How much to produce and in which order.
    pub limits: Limits,
    /// Render the candidates too.
    pub rendering: Option<Rendering>,
}

/// A search's solved answer.
#[derive(Debug)]
pub struct Solved {
    /// The candidates, in generation order.
    pub candidates: Vec<Candidate>,
    /// The step budget cut them.
    pub cut: bool,
    /// The rendered answer, when one was asked for.
    pub body: Option<String>,
}

/// Where a resolved search is solved.
pub trait SolvingStep: Send + Sync {
    /// Solves `job` (the same answer wherever it runs: the solver is
    /// deterministic for a given shuffle seed).
    fn solve(&self, job: Job) -> Pending<'_, Result<Solved>>;

    /// Whether `job` is worth solving before its read confirms its inputs
    /// (a small search solves in microseconds once they are known).
    fn pays_ahead(&self, job: &Job) -> bool;
}

/// What a search needs from the process: the database, the two seams and
/// the settings.
pub struct Engine<'a> {
    /// The database.
    pub pool: &'a crate::db::Pool,
    /// Where names and provider data come from.
    pub read: &'a dyn ProviderRead,
    /// Where searches are solved.
    pub solving: &'a dyn SolvingStep,
    /// Limits and generation order.
    pub settings: &'a Settings,
}
