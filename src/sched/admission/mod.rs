//! One admission round over a batch of requests: the Mesos allocator's two
//! stages (`__generateOffers`) at request granularity, as
//! `fairness_colocation.md` §C.2 specifies them. Pure: plain data in,
//! decisions out; the service loads the data and commits the result.
//!
//! - stage 1 serves top-level projects whose guarantee is unsatisfied on a
//!   class of their head request; stage 2 serves everyone;
//! - the next project is the DRF sorter's first (share, allocation count,
//!   path; hierarchical, pre-order; a project with children competes as a
//!   virtual leaf `p/.` of weight 1 inside its own subtree);
//! - each project's requests are FIFO; a project whose head request cannot
//!   be admitted is skipped for the rest of the stage (in stage 2 its
//!   remaining requests are deferred with the head's reason);
//! - a request goes to the first provider, in the round's order, where it
//!   fits: the project's own reservations (and its ancestors') first, then
//!   unreserved capacity; the unreserved part must respect every limit on
//!   the path to the root and fit the headroom that other projects'
//!   unsatisfied guarantees hold back;
//! - decisions list the admitted in admission order, then the deferred in
//!   request order.

use std::sync::Arc;

mod room;
mod state;
use state::State;

/// Index of a resource class in the round's class list.
pub type Class = usize;
/// Index of a project in [`Round::projects`].
pub type ProjectIx = usize;
/// Index of a provider in [`Round::providers`].
pub type ProviderIx = usize;

/// One inventory, as the allocation check sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stock {
    /// `(total − reserved) × allocation_ratio`.
    pub capacity: f64,
    /// Units allocated now, by anyone.
    pub used: i64,
    /// Smallest allocation.
    pub min_unit: i64,
    /// Largest allocation.
    pub max_unit: i64,
    /// Granularity.
    pub step_size: i64,
}

/// Capacity on one provider that only a project's subtree may allocate.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// The owning project.
    pub owner: ProjectIx,
    /// The class.
    pub class: Class,
    /// Reserved and not yet allocated by the owner's subtree.
    pub unused: i64,
}

/// One provider of the pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Provider {
    /// Inventories by class (None: no inventory of that class).
    pub stock: Vec<Option<Stock>>,
    /// Per-project reservations on it.
    pub reservations: Vec<Reservation>,
}

/// One project of the DRF tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    /// Its id (the final tie-break).
    pub name: String,
    /// Its parent in the project tree.
    pub parent: Option<ProjectIx>,
    /// DRF weight (> 0).
    pub weight: f64,
    /// How often it was admitted to before (persisted; only grows).
    pub allocation_count: u64,
    /// What its own consumers hold now, by class.
    pub allocated: Vec<i64>,
    /// Its subtree's consumption against quota now: allocations plus
    /// reservations not yet used, by class.
    pub consumed: Vec<i64>,
    /// Limits by class (None: unlimited).
    pub limits: Vec<Option<i64>>,
    /// Guarantees by class (top-level projects only; 0: none).
    pub guarantees: Vec<i64>,
}

/// One pending request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The project asking.
    pub project: ProjectIx,
    /// The user asking (decline filters may name one).
    pub user: String,
    /// Amounts by class, each > 0.
    pub resources: Vec<(Class, i64)>,
    /// The providers its traits and aggregates allow, in the round's
    /// order (None: every provider).
    pub allowed: Option<Arc<[ProviderIx]>>,
}

/// An active decline filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Decline {
    /// The project that declined.
    pub project: ProjectIx,
    /// Only this user's requests (None: the whole project's).
    pub user: Option<String>,
    /// The provider it hides.
    pub provider: ProviderIx,
    /// What was refused: a request no larger than this is hidden.
    pub refused: Vec<(Class, i64)>,
}

/// Everything one round reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    /// Number of classes.
    pub classes: usize,
    /// DRF denominators by class: Σ capacity over the pool.
    pub totals: Vec<f64>,
    /// Classes that do not count towards shares.
    pub excluded: Vec<bool>,
    /// The pool, in the order requests try it (the seeded shuffle).
    pub providers: Vec<Provider>,
    /// Every project that asks, owns a reservation, or is an ancestor.
    pub projects: Vec<Project>,
    /// Pending requests in submission order.
    pub requests: Vec<Request>,
    /// Active decline filters.
    pub declines: Vec<Decline>,
    /// Provider checks allowed before the rest is `not_reached`.
    pub max_steps: u64,
}

/// Which stage admitted a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Stage 1: serving an unsatisfied guarantee.
    Guarantee,
    /// Stage 2: fair share.
    Fair,
}

/// Why a request was not admitted, from least to most specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// No provider has room for it.
    NoCapacity,
    /// The only providers with room were declined by the project.
    Declined,
    /// It would take a project over a limit.
    QuotaLimit,
    /// It would eat into capacity held back for other projects' guarantees.
    Headroom,
    /// The round's step budget ran out before it was tried.
    NotReached,
    /// No provider of the pool could hold it even empty (a class asks
    /// more than any provider has or allows in one allocation, or is
    /// stocked nowhere): waiting cannot help, so it holds up nothing
    /// behind it in its project.
    NeverFits,
}

/// The outcome for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Admitted onto `provider`.
    Admitted {
        /// The stage.
        stage: Stage,
        /// Where.
        provider: ProviderIx,
        /// True when part of it came from the project's reservations.
        from_reservation: bool,
        /// The project's dominant share before, divided by its weight.
        share_before: f64,
        /// And after.
        share_after: f64,
    },
    /// Left for a later round.
    Deferred(Reason),
}

/// One decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index into [`Round::requests`].
    pub request: usize,
    /// What happened.
    pub outcome: Outcome,
}

/// The round's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// Admitted in admission order, then deferred in request order.
    pub decisions: Vec<Decision>,
    /// Free capacity left idle for unsatisfied guarantees, by class.
    pub held_back_for_headroom: Vec<i64>,
    /// Provider checks made.
    pub steps: u64,
}

/// Runs one round.
pub fn admit(round: &Round) -> Admitted {
    let mut state = State::new(round);
    state.stage(Stage::Guarantee);
    state.stage(Stage::Fair);
    state.finish()
}
