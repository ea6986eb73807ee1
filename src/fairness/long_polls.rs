//! The fair queue's long polls (`GET /queue/{id}?wait=`) in one process:
//! woken when any process's round decided (the leader's listener hears
//! `decided`), and bounded in number, overall and per project.

/// Wakes long polls in this process when any process's round decided,
/// and bounds how many are held: a long poll holds a connection busy, so
/// without a budget one project's waiters could take every connection.
#[derive(Debug)]
pub struct QueueSignals {
    decided: tokio::sync::watch::Sender<u64>,
    /// Long polls held at most, over all projects.
    max_waiters: usize,
    /// Long polls held at most for one project.
    max_waiters_per_project: usize,
    /// Long polls held now, per project.
    waiting: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Default for QueueSignals {
    fn default() -> Self {
        QueueSignals::with_budget(1024, 64)
    }
}

/// A long poll's place in the budget, given back when it ends.
#[derive(Debug)]
pub struct PollSlot<'a> {
    signals: &'a QueueSignals,
    project: String,
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        let mut waiting = self
            .signals
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = waiting.get_mut(&self.project) {
            *n -= 1;
            if *n == 0 {
                waiting.remove(&self.project);
            }
        }
    }
}

impl QueueSignals {
    /// Signals holding at most `max_waiters` long polls, and at most
    /// `per_project` of one project.
    pub fn with_budget(max_waiters: usize, per_project: usize) -> Self {
        QueueSignals {
            decided: tokio::sync::watch::channel(0).0,
            max_waiters,
            max_waiters_per_project: per_project,
            waiting: std::sync::Mutex::default(),
        }
    }

    /// A receiver that sees the next round's decision.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.decided.subscribe()
    }

    /// A place for one more long poll of `project`, or None when the
    /// budget (overall or the project's) is spent: the poll is then
    /// answered at once.
    pub fn poll_slot(&self, project: &str) -> Option<PollSlot<'_>> {
        let mut waiting = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let total: usize = waiting.values().sum();
        let mine = waiting.get(project).copied().unwrap_or(0);
        if total >= self.max_waiters || mine >= self.max_waiters_per_project {
            return None;
        }
        *waiting.entry(project.to_string()).or_insert(0) += 1;
        Some(PollSlot {
            signals: self,
            project: project.to_string(),
        })
    }

    /// Wakes every long poll: a round decided.
    pub(super) fn wake(&self) {
        self.decided.send_modify(|n| *n += 1);
    }
}
