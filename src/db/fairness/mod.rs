//! Fair sharing between projects: the project tree with weights, quotas,
//! per-project reservations, decline filters and admission rounds
//! (`migrations/*_fairness.sql`).
//!
//! Consumption against quota, for a project P and a class: over every
//! provider, max(allocations of P's subtree, reservations of P's subtree),
//! i.e. reservations count whether used or not and allocations made from
//! them are not counted twice. A reservation's unused part is
//! max(0, amount − allocations of the owner's subtree on that inventory).
//!
//! Locks: writers that may take a limited project over its limit take a
//! per-project advisory lock (after their provider row locks), so that
//! concurrent writers of one project in any number of processes are
//! checked one after another.

mod admissions;
pub mod preemptions;
mod projects;
pub mod queue;
mod quotas;
mod reservations;

pub use admissions::*;
pub use projects::*;
pub use quotas::*;
pub use reservations::*;
