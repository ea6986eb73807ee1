//! How a project's queued requests wait for room (Kueue's StrictFIFO and
//! BestEffortFIFO): the queue policy, and the one rule that tells what a
//! head request the round could not admit does to the requests behind it.
//! A new policy is a variant here, an arm of [`Queueing::refused_head`],
//! and the stored column's check (a migration; a test compares the two).

use super::{Reason, Stage};

crate::types::named_enum! {
    /// How a project's queued requests wait for room.
    #[derive(Default)]
    pub enum Queueing {
        /// The head request holds up the ones behind it until it is
        /// admitted (Kueue's StrictFIFO): order is kept, at the price of
        /// idle room.
        #[default]
        Strict => "strict",
        /// A head that does not fit waits, and the requests behind it are
        /// tried in the same round (Kueue's BestEffortFIFO): room is used,
        /// at the price of order (the reservation against starvation still
        /// serves the large ones).
        BestEffort => "best_effort",
    }
}

/// What a refused head request does to its project's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedHead {
    /// The head (with its gang) leaves the queue with the reason, and the
    /// project's next request is tried.
    StepsAside,
    /// The project is done for this stage; the head and every request
    /// behind it leave the queue with the head's reason.
    DefersTheQueue,
    /// The project is done for this stage; its queue waits, whole, for
    /// the next one.
    HoldsTheQueue,
}

impl Queueing {
    /// What a head refused for `reason` in `stage` does. A head that can
    /// never fit holds up nothing. A round that ran out of steps defers
    /// every request it did not reach. Otherwise the guarantee stage only
    /// passes the project over (the fair stage comes next), and in the
    /// fair stage the policy decides.
    pub fn refused_head(self, stage: Stage, reason: Reason) -> RefusedHead {
        match (reason, stage, self) {
            (Reason::NeverFits, _, _) => RefusedHead::StepsAside,
            (Reason::NotReached, _, _) => RefusedHead::DefersTheQueue,
            (_, Stage::Guarantee, _) => RefusedHead::HoldsTheQueue,
            (_, Stage::Fair, Queueing::BestEffort) => RefusedHead::StepsAside,
            (_, Stage::Fair, Queueing::Strict) => RefusedHead::DefersTheQueue,
        }
    }
}
