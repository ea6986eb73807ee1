//! The state every handler shares: the pool, the settings, who may call
//! (authentication, policy, CORS), and apart from them this process's
//! machinery (caches, coalesced requests, CPU permits, wake-ups).

use crate::config::security::{CorsRules, SecurityArgs};
use crate::{auth, candidates, config, policy};
use candidates::engine::ProviderSnapshots;
use candidates::speed::shared_reads::SharedReads;
use candidates::speed::snapshot_cache::SnapshotCache;
use candidates::speed::solving_threads::SolvingThreads;
use std::sync::Arc;

/// How callers are authenticated and authorised.
#[derive(Debug)]
pub struct Security {
    /// noauth2 or Keystone.
    pub auth: auth::Authenticator,
    /// The policy rules in force, rebuilt when their file changes.
    pub policy: policy::source::PolicySource,
    /// CORS, when an origin is allowed.
    pub cors: Option<CorsRules>,
}

impl Security {
    /// From the options; the error is one line naming what is wrong (a
    /// missing Keystone option, an unreadable or invalid policy file).
    pub fn from_args(a: &SecurityArgs) -> Result<Self, String> {
        let mode = policy::Mode {
            enforce_new_defaults: a.enforce_new_defaults,
            enforce_scope: a.enforce_scope,
        };
        // As oslo.policy: a policy file that is not there means the
        // defaults (kolla-ansible names one whether or not it wrote it).
        let policy = policy::source::PolicySource::load(mode, a.policy_file.as_deref())?;
        Ok(Security {
            auth: auth::Authenticator::from_args(a)?,
            policy,
            cors: a.cors(),
        })
    }

    /// noauth2 with Placement's legacy defaults (as the gabbits' fixture
    /// sets `enforce_new_defaults = False`) and scope enforced, no CORS:
    /// what in-process tests run with. The server's own default enforces
    /// the new defaults.
    pub fn noauth() -> Self {
        Security {
            auth: auth::Authenticator::NoAuth,
            policy: policy::source::PolicySource::load(
                policy::Mode {
                    enforce_new_defaults: false,
                    enforce_scope: true,
                },
                None,
            )
            .expect("the built-in policy defaults parse (policy::tests)"),
            cors: None,
        }
    }
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The database pool.
    pub pool: crate::db::Pool,
    /// Behaviour settings.
    pub settings: Arc<config::Settings>,
    /// Authentication, policy and CORS.
    pub security: Arc<Security>,
    /// This process's machinery: caches, coalesced requests, CPU permits, wake-ups.
    pub machinery: Machinery,
}

/// What one process keeps to answer sooner or with fewer round trips,
/// and to wake its own waiters. None of it decides an answer: a request
/// answered without it (another process, a cold cache) gets the same one.
#[derive(Clone)]
pub struct Machinery {
    /// The provider data candidates need, kept current.
    pub snapshot: Arc<SnapshotCache>,
    /// Searches waiting in this process, read by one shared statement
    /// from `snapshot` (the candidate engine's provider read).
    pub shared_reads: Arc<SharedReads>,
    /// Where searches are solved: one permit per core for CPU-heavy work,
    /// so that a burst of expensive requests queues instead of crowding
    /// out the async workers that answer everything else.
    pub solving: Arc<SolvingThreads>,
    /// The deployment nodes' state, kept current.
    pub nodes: Arc<crate::deploy::node_cache::NodeCache>,
    /// The deployment nodes in the strategies' orders, per query and shape.
    pub rankings: Arc<crate::deploy::ranking::Rankings>,
    /// Single deployments waiting to be placed together.
    pub deployments: Arc<crate::deploy::Turns>,
    /// The apps' owners as read (an app's owner never changes).
    pub app_owners: Arc<crate::deploy::app_owners::AppOwners>,
    /// Wakes this process's long polls of the fair queue.
    pub queue_signals: Arc<crate::fairness::long_polls::QueueSignals>,
    /// Single queue submissions waiting to be stored by one statement.
    pub submissions: Arc<crate::fairness::submissions::Submissions>,
    /// Claims of new consumers waiting to be written by one statement.
    pub claims: Arc<crate::allocation::claims::Claims>,
}

impl Default for Machinery {
    fn default() -> Self {
        let snapshot = Arc::new(SnapshotCache::default());
        Machinery {
            shared_reads: Arc::new(SharedReads::new(snapshot.clone())),
            snapshot,
            solving: Arc::default(),
            nodes: Arc::default(),
            rankings: Arc::default(),
            deployments: Arc::default(),
            app_owners: Arc::default(),
            queue_signals: Arc::default(),
            submissions: Arc::default(),
            claims: Arc::default(),
        }
    }
}

impl Machinery {
    /// The provider data as a transaction sees it, for the fairness
    /// rounds and deployments (a handle, not the cache behind it).
    pub fn provider_snapshots(&self) -> Arc<dyn ProviderSnapshots> {
        self.snapshot.clone()
    }
}

impl AppState {
    /// State over a pool with the given settings and empty caches.
    pub fn new(pool: crate::db::Pool, settings: config::Settings) -> Self {
        AppState {
            pool,
            settings: Arc::new(settings),
            security: Arc::new(Security::noauth()),
            machinery: Machinery::default(),
        }
    }

    /// The same state with other security settings.
    pub fn with_security(mut self, security: Security) -> Self {
        self.security = Arc::new(security);
        self
    }

    /// The candidate engine over this process's state.
    pub fn engine(&self) -> candidates::find::Engine<'_> {
        candidates::find::Engine {
            pool: &self.pool,
            read: &*self.machinery.shared_reads,
            solving: &*self.machinery.solving,
            settings: &self.settings,
        }
    }

    /// Allocation writes, with this process's coalesced claims.
    pub fn allocations(&self) -> crate::allocation::Allocations<'_> {
        crate::allocation::Allocations {
            pool: &self.pool,
            claims: &self.machinery.claims,
            retries: self.settings.allocation_conflict_retry_count,
        }
    }

    /// Deployments, with the candidate engine and the deployment nodes as
    /// this process keeps them.
    pub fn deployments(&self) -> crate::deploy::Deployments {
        let m = &self.machinery;
        crate::deploy::Deployments {
            pool: self.pool.clone(),
            read: m.shared_reads.clone(),
            solving: m.solving.clone(),
            settings: self.settings.clone(),
            states: m.nodes.clone(),
            rankings: m.rankings.clone(),
            turns: m.deployments.clone(),
            retries: self.settings.allocation_conflict_retry_count,
        }
    }

    /// The apps' owners, read through this process's copy.
    pub fn app_owners(&self) -> &crate::deploy::app_owners::AppOwners {
        &self.machinery.app_owners
    }

    /// Admission rounds, placing on this process's provider data.
    pub fn admissions(&self) -> crate::fairness::admission::Admissions<'_> {
        crate::fairness::admission::Admissions {
            pool: &self.pool,
            snapshots: &*self.machinery.snapshot,
            settings: crate::fairness::admission::RoundSettings::of(&self.settings),
        }
    }

    /// The fair queue, with this process's coalesced submissions and the
    /// wake-ups of its long polls.
    pub fn queue(&self) -> crate::fairness::queue::Queue<'_> {
        crate::fairness::queue::Queue {
            pool: &self.pool,
            submissions: &self.machinery.submissions,
            signals: &self.machinery.queue_signals,
            max_pending_per_project: self.settings.queue_max_pending_per_project,
        }
    }
}
