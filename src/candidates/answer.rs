//! A search's answer as the caller writes it: the engine returns
//! candidates, and the wire format is the caller's (Placement's JSON is
//! `api::allocation_candidates::answer_json`). The caller hands in a
//! writer, which runs on the solver's thread beside the solve: one job
//! where two would each change threads.

use super::snapshot::Snapshot;
use super::solve::Candidate;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What a search asked, for the writer of its answer.
#[derive(Debug, Clone)]
pub struct Asked {
    /// Group suffixes, in the candidates' mapping order.
    pub suffixes: Vec<String>,
    /// Class ids requested by any group.
    pub requested: BTreeSet<i32>,
}

/// Writes the answer for the candidates over the provider data.
pub type WriteAnswer = dyn Fn(&Snapshot, &[Candidate], &Asked) -> String + Send + Sync;

/// The caller's writer of a search's answer.
#[derive(Clone)]
pub struct AnswerWriter {
    /// The answer for the candidates over the provider data.
    pub write: Arc<WriteAnswer>,
    /// Whether the answer summarises whole trees (what it costs grows
    /// with them: a small one is written in place).
    pub whole_trees: bool,
}

impl std::fmt::Debug for AnswerWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerWriter")
            .field("whole_trees", &self.whole_trees)
            .finish_non_exhaustive()
    }
}

/// A search's answer to write: the writer and what the search asked.
#[derive(Debug, Clone)]
pub struct Rendering {
    /// What the search asked.
    pub asked: Asked,
    /// The caller's writer.
    pub writer: AnswerWriter,
}

impl Rendering {
    /// The answer for `cands` over `snap`.
    pub fn render(&self, snap: &Snapshot, cands: &[Candidate]) -> String {
        (self.writer.write)(snap, cands, &self.asked)
    }
}
