//! One admission round over a set of requests: the Mesos allocator's two
//! stages (`__generateOffers`) at request granularity, as
//! `fairness_colocation.md` §C.2 specifies them. Pure: plain data in,
//! decisions out; the service loads the data and commits the result.
//!
//! - stage 1 serves top-level projects whose guarantee is unsatisfied on a
//!   class of their head request; stage 2 serves everyone;
//! - the next project is the DRF sorter's first (share, allocation count,
//!   path; hierarchical, pre-order; a project with children competes as a
//!   virtual leaf `p/.` of weight 1 inside its own subtree);
//! - each project's requests are served in their precedence (priority
//!   class, then priority, higher first), FIFO within one; a best-effort
//!   project's head that cannot be admitted in stage 2 is deferred and
//!   the next one tried; otherwise a project whose head request cannot
//!   be admitted is skipped for the rest of the stage (in stage 2 its
//!   remaining requests are deferred with the head's reason);
//! - requests of one gang (all-or-nothing) are tried together when the
//!   first of them is the head: each placed as the others see it, and
//!   all undone when one does not fit, which then counts as the head's
//!   failure with that one's reason;
//! - a request goes to the first provider, in the round's order, where it
//!   fits: the project's own reservations (and its ancestors') first, then
//!   unreserved capacity; the unreserved part must respect every limit on
//!   the path to the root and fit the headroom that other projects'
//!   unsatisfied guarantees hold back (less what each lends);
//! - decisions list the admitted in admission order, then the deferred in
//!   request order.

use std::sync::Arc;

mod empty_capacity;
mod queueing;
mod room;
mod state;
pub use queueing::{Queueing, RefusedHead};
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

/// One provider of the cluster.
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
    /// Of each unused guarantee, the units others may use meanwhile
    /// (Kueue's lendingLimit; 0: none, the guarantee's headroom is held
    /// back whole, Mesos' rule).
    pub lending_limits: Vec<i64>,
    /// How its queued requests wait: what a head request that cannot be
    /// admitted does to the ones behind it.
    pub queueing: Queueing,
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
    /// Where it stands among its project's requests.
    pub precedence: Precedence,
    /// The all-or-nothing group it belongs to, if any: the requests of
    /// one project sharing a gang are admitted together in one round, or
    /// none of them is. The group is tried when its first member reaches
    /// the head of the project's queue.
    pub gang: Option<usize>,
}

/// Where a request stands among its own project's: its priority class
/// first (prod, then mid, batch, free), then its priority inside the
/// class, higher first; requests of equal precedence keep submission
/// order. Preemption takes victims in the reverse of this order. The
/// default is a prod request of priority 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Precedence {
    /// 0 prod, 1 mid, 2 batch, 3 free (`PriorityClass::code`).
    pub class: i16,
    /// Koordinator's integer priority (0 when not given).
    pub priority: i32,
}

impl Ord for Precedence {
    /// Served first is least.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.class
            .cmp(&other.class)
            .then(other.priority.cmp(&self.priority))
    }
}

impl PartialOrd for Precedence {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
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
    /// DRF denominators by class: Σ capacity over the cluster.
    pub totals: Vec<f64>,
    /// Classes that do not count towards shares.
    pub excluded: Vec<bool>,
    /// The cluster, in the order requests try it (the seeded shuffle).
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
    /// No provider of the cluster could hold it even empty (a class asks
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

/// A weighted dominant share: the largest fraction of any counted class's
/// cluster total in `alloc`, divided by `weight` (the Mesos sorter's order).
pub fn dominant_share(round: &Round, alloc: &[i64], weight: f64) -> f64 {
    let dominant = (0..round.classes)
        .filter(|&c| round.totals[c] > 0.0 && !round.excluded[c])
        .map(|c| alloc[c] as f64 / round.totals[c])
        .fold(0.0_f64, f64::max);
    dominant / weight
}

/// Runs one round.
pub fn admit(round: &Round) -> Admitted {
    let mut state = State::new(round);
    state.stage(Stage::Guarantee);
    state.stage(Stage::Fair);
    state.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One project, one provider with `vcpu` VCPUs, and requests of
    /// (VCPUs, precedence) in submission order.
    fn round(vcpu: i64, requests: &[(i64, Precedence)]) -> Round {
        Round {
            classes: 1,
            totals: vec![vcpu as f64],
            excluded: vec![false],
            providers: vec![Provider {
                stock: vec![Some(Stock {
                    capacity: vcpu as f64,
                    used: 0,
                    min_unit: 1,
                    max_unit: vcpu,
                    step_size: 1,
                })],
                reservations: Vec::new(),
            }],
            projects: vec![Project {
                name: "A".into(),
                parent: None,
                weight: 1.0,
                allocation_count: 0,
                allocated: vec![0],
                consumed: vec![0],
                limits: vec![None],
                guarantees: vec![0],
                lending_limits: vec![0],
                queueing: Queueing::Strict,
            }],
            requests: requests
                .iter()
                .map(|&(n, precedence)| Request {
                    project: 0,
                    user: "u".into(),
                    resources: vec![(0, n)],
                    allowed: None,
                    precedence,
                    gang: None,
                })
                .collect(),
            declines: Vec::new(),
            max_steps: 1_000,
        }
    }

    /// `round` with a second project "B" and these requests:
    /// (project, VCPUs, gang) in submission order.
    fn ganged(vcpu: i64, requests: &[(ProjectIx, i64, Option<usize>)]) -> Round {
        let mut r = round(vcpu, &[]);
        let mut b = r.projects[0].clone();
        b.name = "B".into();
        r.projects.push(b);
        r.requests = requests
            .iter()
            .map(|&(project, n, gang)| Request {
                project,
                user: "u".into(),
                resources: vec![(0, n)],
                allowed: None,
                precedence: Precedence::default(),
                gang,
            })
            .collect();
        r
    }

    fn reason_of(out: &Admitted, request: usize) -> Option<Reason> {
        out.decisions
            .iter()
            .find(|d| d.request == request)
            .and_then(|d| match d.outcome {
                Outcome::Deferred(reason) => Some(reason),
                Outcome::Admitted { .. } => None,
            })
    }

    #[test]
    fn a_gang_is_admitted_whole_or_not_at_all() {
        // Two of two fit: both, with B's request beside them.
        let r = ganged(5, &[(0, 2, Some(0)), (1, 1, None), (0, 2, Some(0))]);
        let mut got = admitted(&r);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);
        // Three of 2 VCPU where 4 of 6 are free: none of A's, and what a
        // member took while the gang was tried is back for B (two of 2
        // VCPU). (Empty, the provider would hold the gang: it may fit
        // later, so it waits for room.)
        let used = |mut r: Round| {
            if let Some(stock) = r.providers[0].stock[0].as_mut() {
                stock.used = 2;
            }
            r
        };
        let r = used(ganged(
            6,
            &[
                (0, 2, Some(0)),
                (0, 2, Some(0)),
                (0, 2, Some(0)),
                (1, 2, None),
                (1, 2, None),
            ],
        ));
        assert_eq!(admitted(&r), vec![3, 4]);
        let out = admit(&r);
        for m in 0..3 {
            assert_eq!(reason_of(&out, m), Some(Reason::NoCapacity), "{out:?}");
        }
        // The pure bookkeeping ends as if the gang had never been tried.
        let without = used(ganged(6, &[(1, 2, None), (1, 2, None)]));
        let a = admit(&without);
        let shares = |o: &Admitted| -> Vec<(f64, f64)> {
            o.decisions
                .iter()
                .filter_map(|d| match d.outcome {
                    Outcome::Admitted {
                        share_before,
                        share_after,
                        ..
                    } => Some((share_before, share_after)),
                    Outcome::Deferred(_) => None,
                })
                .collect()
        };
        assert_eq!(shares(&out), shares(&a));
        // A member that can never fit: the whole gang says so and holds up
        // nothing behind it.
        let r = ganged(4, &[(0, 2, Some(0)), (0, 9, Some(0)), (0, 1, None)]);
        let out = admit(&r);
        assert_eq!(admitted(&r), vec![2]);
        assert_eq!(reason_of(&out, 0), Some(Reason::NeverFits));
        assert_eq!(reason_of(&out, 1), Some(Reason::NeverFits));
    }

    /// Issue 65, item 6: `never_fits` from the whole request. A head
    /// whose traits or aggregates allow no provider, or a gang the cluster
    /// could never hold whole (by its total, or by its members' places),
    /// says so and holds up nothing behind it, with room free.
    #[test]
    fn never_fits_reads_the_whole_request() {
        /// (VCPUs, gang, allowed providers) of one request.
        type Asked = (i64, Option<usize>, Option<Vec<ProviderIx>>);
        // Three providers of 10 (one class), A strict.
        let three = |requests: &[Asked]| {
            let mut r = ganged(10, &[]);
            let p = r.providers[0].clone();
            r.providers = vec![p.clone(), p.clone(), p];
            r.totals = vec![30.0];
            r.requests = requests
                .iter()
                .map(|(n, gang, allowed)| Request {
                    project: 0,
                    user: "u".into(),
                    resources: vec![(0, *n)],
                    allowed: allowed.clone().map(Arc::from),
                    precedence: Precedence::default(),
                    gang: *gang,
                })
                .collect();
            r
        };
        // A required trait no provider has: an empty allowed list.
        let r = three(&[(1, None, Some(Vec::new())), (1, None, None)]);
        let out = admit(&r);
        assert_eq!(reason_of(&out, 0), Some(Reason::NeverFits));
        assert_eq!(admitted(&r), vec![1]);
        // Allowed only on providers too small for it is the same: 8 on a
        // provider of 10 fits, 12 on any does not.
        let r = three(&[(12, None, Some(vec![1])), (8, None, Some(vec![1]))]);
        assert_eq!(reason_of(&admit(&r), 0), Some(Reason::NeverFits));
        assert_eq!(admitted(&r), vec![1]);
        // A gang of 4 × 8 on 3 × 10: 32 > 30 in all.
        let gang = |n: i64| (n, Some(0), None);
        let r = three(&[gang(8), gang(8), gang(8), gang(8), (1, None, None)]);
        let out = admit(&r);
        for m in 0..4 {
            assert_eq!(reason_of(&out, m), Some(Reason::NeverFits), "{out:?}");
        }
        assert_eq!(admitted(&r), vec![4]);
        // 4 × 6 on 3 × 10: 24 ≤ 30, but each provider has one place of 6.
        let r = three(&[gang(6), gang(6), gang(6), gang(6), (1, None, None)]);
        assert_eq!(reason_of(&admit(&r), 0), Some(Reason::NeverFits));
        assert_eq!(admitted(&r), vec![4]);
        // 3 × 6 fits, one a provider.
        let r = three(&[gang(6), gang(6), gang(6)]);
        assert_eq!(admitted(&r), vec![0, 1, 2]);
    }

    #[test]
    fn a_best_effort_project_goes_on_past_a_head_that_does_not_fit() {
        let mut r = round(4, &[(3, prec(0, 0)), (2, prec(0, 0)), (2, prec(0, 0))]);
        if let Some(stock) = r.providers[0].stock[0].as_mut() {
            stock.used = 2;
        }
        // Strict: the head holds up the rest.
        assert_eq!(admitted(&r), Vec::<usize>::new());
        // Best effort: the head waits, the next one fits.
        r.projects[0].queueing = Queueing::BestEffort;
        let out = admit(&r);
        assert_eq!(admitted(&r), vec![1]);
        assert_eq!(reason_of(&out, 0), Some(Reason::NoCapacity));
        assert_eq!(reason_of(&out, 2), Some(Reason::NoCapacity));
    }

    #[test]
    fn an_idle_guarantee_lends_up_to_its_lending_limit() {
        // A guarantees 10 of 30 VCPU and asks nothing; B asks 30 × 1.
        let r = |lend: i64| {
            let mut r = ganged(30, &vec![(1, 1, None); 30]);
            r.projects[0].guarantees = vec![10];
            r.projects[0].lending_limits = vec![lend];
            r
        };
        let b_gets = |lend: i64| {
            (
                admitted(&r(lend)).len(),
                admit(&r(lend)).held_back_for_headroom,
            )
        };
        // Mesos' rule: the unused guarantee stays idle.
        assert_eq!(b_gets(0), (20, vec![10]));
        assert_eq!(b_gets(4), (24, vec![6]));
        assert_eq!(b_gets(10), (30, vec![0]));
        // What A uses already needs no headroom: with 7 of its 10 in use,
        // 3 are unsatisfied, and a lending limit of 2 holds back 1.
        let mut used = r(2);
        used.projects[0].consumed = vec![7];
        used.projects[0].allocated = vec![7];
        if let Some(stock) = used.providers[0].stock[0].as_mut() {
            stock.used = 7;
        }
        assert_eq!(admitted(&used).len(), 22);
        // The lender's own requests still see its whole guarantee.
        let mut own = r(10);
        own.requests.insert(
            0,
            Request {
                project: 0,
                ..own.requests[0].clone()
            },
        );
        own.requests[0].resources = vec![(0, 10)];
        assert!(admitted(&own).contains(&0));
    }

    fn admitted(round: &Round) -> Vec<usize> {
        admit(round)
            .decisions
            .iter()
            .filter(|d| matches!(d.outcome, Outcome::Admitted { .. }))
            .map(|d| d.request)
            .collect()
    }

    fn prec(class: i16, priority: i32) -> Precedence {
        Precedence { class, priority }
    }

    #[test]
    fn a_projects_requests_are_served_by_class_then_priority_then_submission() {
        // Room for two of four 2-VCPU requests.
        let r = round(
            4,
            &[
                (2, prec(0, 0)),
                (2, prec(2, 5999)),
                (2, prec(0, 9500)),
                (2, prec(0, 0)),
            ],
        );
        assert_eq!(admitted(&r), vec![2, 0], "prod 9500, then the first prod 0");
        // Equal precedence: submission order, as before priorities.
        let r = round(4, &[(2, prec(0, 0)), (2, prec(0, 0)), (2, prec(0, 0))]);
        assert_eq!(admitted(&r), vec![0, 1]);
        // A higher-priority request that does not fit holds up the project
        // as the head does (strict order), with its reason.
        let mut r = round(4, &[(2, prec(0, 0)), (3, prec(0, 9999))]);
        if let Some(stock) = r.providers[0].stock[0].as_mut() {
            stock.used = 2;
        }
        let out = admit(&r);
        assert!(
            out.decisions
                .iter()
                .all(|d| !matches!(d.outcome, Outcome::Admitted { .. })),
            "{out:?}"
        );
    }
}
