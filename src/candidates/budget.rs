//! The work budget of one candidate search: steps counted in every loop
//! whose cost a request can multiply, and the cancel flag of a client that
//! went away.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Why a search stopped before it had visited everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The step budget ran out: the answer is what was found, as with `limit`.
    Budget,
    /// The caller cancelled.
    Cancelled,
}

/// Work accounting for one search. One step is one unit of work that a
/// request can multiply: a prefix tried in the cross-group product, a
/// combination of the unnumbered group's product, a provider examined for a
/// group at an anchor. The cancel flag is read every 1,024 steps.
#[derive(Debug)]
pub struct Budget {
    taken: u64,
    max: u64,
    cancel: Option<Arc<AtomicBool>>,
    stopped: Option<Stopped>,
}

impl Budget {
    /// A budget of `max` steps (0: unbounded), stopped early by `cancel`.
    pub fn new(max: u64, cancel: Option<Arc<AtomicBool>>) -> Self {
        Budget {
            taken: 0,
            max: if max == 0 { u64::MAX } else { max },
            cancel,
            stopped: None,
        }
    }

    /// Takes one step; false once the search must stop.
    pub fn step(&mut self) -> bool {
        self.take(1)
    }

    /// Takes `n` steps at once; false (and the work is not to be done)
    /// once the search must stop. Never takes more than the budget.
    pub fn take(&mut self, n: u64) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        if n > self.max - self.taken {
            self.stopped = Some(Stopped::Budget);
            return false;
        }
        let before = self.taken;
        self.taken += n;
        let cancelled = || {
            self.cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
        };
        if before >> 10 != self.taken >> 10 && cancelled() {
            self.stopped = Some(Stopped::Cancelled);
        }
        self.stopped.is_none()
    }

    /// Why the search stopped, if it did.
    pub fn stopped(&self) -> Option<Stopped> {
        self.stopped
    }

    /// Steps taken so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }
}
