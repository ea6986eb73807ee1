//! The bookkeeping of one admission round: queues, shares, consumption,
//! headroom and the provider checks, stage by stage.

use super::empty_capacity::EmptyCapacity;
use super::room::Rooms;
use super::{
    Admitted, Class, Decision, Decline, Outcome, ProjectIx, Provider, ProviderIx, Reason,
    RefusedHead, Request, Round, Stage,
};
use crate::types::units_ok;
use std::collections::HashMap;

/// A sibling in the sorter's tree: a project's subtree, or the project
/// itself as the virtual leaf `p/.` beside its children.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Node(ProjectIx),
    Leaf(ProjectIx),
}

/// Where one request would go.
struct Fit {
    provider: ProviderIx,
    /// Units drawn from each reservation of the provider (by index).
    drawn: Vec<(usize, i64)>,
}

/// The round's mutable bookkeeping.
pub(super) struct State<'a> {
    round: &'a Round,
    providers: Vec<Provider>,
    /// Pending request indexes per project, in precedence order.
    queues: Vec<std::collections::VecDeque<usize>>,
    /// Subtree allocation and allocation count, for shares.
    subtree_alloc: Vec<Vec<i64>>,
    subtree_count: Vec<u64>,
    own_alloc: Vec<Vec<i64>>,
    own_count: Vec<u64>,
    consumed: Vec<Vec<i64>>,
    children: Vec<Vec<ProjectIx>>,
    paths: Vec<String>,
    leaf_paths: Vec<String>,
    /// Free capacity outside every reservation, summed over the cluster.
    available: Vec<i64>,
    declines: HashMap<(ProjectIx, ProviderIx), Vec<&'a Decline>>,
    decided: Vec<Option<Outcome>>,
    admitted_order: Vec<usize>,
    steps: u64,
    rooms: Rooms,
    /// The cluster empty: whether a request or a gang could ever fit.
    empty: EmptyCapacity<'a>,
    /// Each project's weighted subtree share and its own (leaf) share,
    /// kept as admissions change them: the sorter compares them for every
    /// project at every pick.
    node_share: Vec<f64>,
    leaf_share: Vec<f64>,
    /// Projects without a parent.
    roots: Vec<ProjectIx>,
    /// Work everything out again at every pick (tests compare the two).
    recompute: bool,
}

impl<'a> State<'a> {
    pub(super) fn new(round: &'a Round) -> Self {
        let n = round.projects.len();
        let queues = queues_of(round);
        let mut children = vec![Vec::new(); n];
        for (i, p) in round.projects.iter().enumerate() {
            if let Some(parent) = p.parent {
                children[parent].push(i);
            }
        }
        let mut subtree_alloc: Vec<Vec<i64>> =
            round.projects.iter().map(|p| p.allocated.clone()).collect();
        let mut subtree_count: Vec<u64> =
            round.projects.iter().map(|p| p.allocation_count).collect();
        for i in 0..n {
            let mut up = round.projects[i].parent;
            while let Some(a) = up {
                for (sum, own) in subtree_alloc[a]
                    .iter_mut()
                    .zip(&round.projects[i].allocated)
                {
                    *sum += own;
                }
                subtree_count[a] += round.projects[i].allocation_count;
                up = round.projects[a].parent;
            }
        }
        let paths: Vec<String> = (0..n).map(|i| path_of(round, i)).collect();
        let leaf_paths = paths.iter().map(|p| format!("{p}/.")).collect();
        let mut available = vec![0i64; round.classes];
        for p in &round.providers {
            for (c, s) in p.stock.iter().enumerate() {
                let Some(s) = s else { continue };
                let unused: i64 = p
                    .reservations
                    .iter()
                    .filter(|r| r.class == c)
                    .map(|r| r.unused)
                    .sum();
                // Capacity is fractional with a ratio; whole units only.
                let free = (s.capacity.floor() as i64) - s.used - unused;
                available[c] += free.max(0);
            }
        }
        let mut declines: HashMap<_, Vec<&Decline>> = HashMap::new();
        for d in &round.declines {
            declines.entry((d.project, d.provider)).or_default().push(d);
        }
        State {
            round,
            providers: round.providers.clone(),
            queues,
            subtree_alloc,
            subtree_count,
            own_alloc: round.projects.iter().map(|p| p.allocated.clone()).collect(),
            own_count: round.projects.iter().map(|p| p.allocation_count).collect(),
            consumed: round.projects.iter().map(|p| p.consumed.clone()).collect(),
            children,
            paths,
            leaf_paths,
            available,
            declines,
            decided: vec![None; round.requests.len()],
            admitted_order: Vec::new(),
            steps: 0,
            rooms: Rooms::of(&round.providers, round.classes),
            empty: EmptyCapacity::of(&round.providers, round.classes),
            node_share: Vec::new(),
            leaf_share: Vec::new(),
            roots: (0..n)
                .filter(|&p| round.projects[p].parent.is_none())
                .collect(),
            recompute: false,
        }
        .with_shares()
    }

    /// The shares worked out from the allocations.
    fn with_shares(mut self) -> Self {
        let n = self.round.projects.len();
        self.node_share = (0..n).map(|p| self.node_share_now(p)).collect();
        self.leaf_share = (0..n)
            .map(|p| self.share(&self.own_alloc[p], 1.0))
            .collect();
        self
    }

    fn node_share_now(&self, p: ProjectIx) -> f64 {
        self.share(&self.subtree_alloc[p], self.round.projects[p].weight)
    }

    /// The same bookkeeping without passing over providers by their room
    /// (every request visits its providers) and with the sorter's inputs
    /// worked out again at every pick (tests compare the two).
    #[cfg(test)]
    pub(super) fn scanning(round: &'a Round) -> Self {
        State {
            rooms: Rooms::passing_nothing(&round.providers, round.classes),
            recompute: true,
            ..State::new(round)
        }
    }

    /// Runs one stage to its end.
    pub(super) fn stage(&mut self, stage: Stage) {
        let n = self.round.projects.len();
        let mut skipped = vec![false; n];
        let mut active: Vec<bool> = (0..n).map(|p| self.eligible(p, stage)).collect();
        let mut below = self.active_below(&active);
        loop {
            if self.recompute {
                active = (0..n)
                    .map(|p| !skipped[p] && self.eligible(p, stage))
                    .collect();
                below = self.active_below(&active);
            }
            let Some(p) = self.pick(&active, &below) else {
                break;
            };
            match self.queues[p].front() {
                None => skipped[p] = true,
                Some(&req) => match self.admit_head(p, req, stage) {
                    Ok(()) => {}
                    Err(reason) => {
                        let queueing = self.round.projects[p].queueing;
                        match queueing.refused_head(stage, reason) {
                            RefusedHead::StepsAside => self.defer_head(p, req, reason),
                            RefusedHead::DefersTheQueue => {
                                skipped[p] = true;
                                for r in self.queues[p].drain(..) {
                                    self.decided[r] = Some(Outcome::Deferred(reason));
                                }
                            }
                            RefusedHead::HoldsTheQueue => skipped[p] = true,
                        }
                    }
                },
            }
            // Only `p` changed: its queue, its consumption (a guarantee's
            // stage admits for top-level projects only) or its skip.
            active[p] = !skipped[p] && self.eligible(p, stage);
            self.update_below(&active, &mut below, p);
        }
    }

    /// Admits project `p`'s head request `req`, with every other member of
    /// its gang: all of them, or none (each placed as the ones before it
    /// left the cluster; undone when one does not fit, whose reason is the
    /// answer). Admitted requests leave the queue.
    fn admit_head(&mut self, p: ProjectIx, req: usize, stage: Stage) -> Result<(), Reason> {
        let members = self.members(p, req);
        if members.len() > 1 {
            let requests: Vec<&Request> =
                members.iter().map(|&m| &self.round.requests[m]).collect();
            if self.empty.gang_never_fits(&requests) {
                return Err(Reason::NeverFits);
            }
        }
        let mut done: Vec<(usize, Fit)> = Vec::with_capacity(members.len());
        for &m in &members {
            match self.place(m) {
                Ok(fit) => {
                    self.commit(m, stage, &fit);
                    done.push((m, fit));
                }
                Err(reason) => {
                    for (m, fit) in done.iter().rev() {
                        self.uncommit(*m, fit);
                    }
                    return Err(reason);
                }
            }
        }
        match members.len() {
            1 => {
                self.queues[p].pop_front();
            }
            _ => self.queues[p].retain(|r| !members.contains(r)),
        }
        Ok(())
    }

    /// Defers project `p`'s head request `req` with every member of its
    /// gang, and takes them out of the queue.
    fn defer_head(&mut self, p: ProjectIx, req: usize, reason: Reason) {
        let members = self.members(p, req);
        for &r in &members {
            self.decided[r] = Some(Outcome::Deferred(reason));
        }
        self.queues[p].retain(|r| !members.contains(r));
    }

    /// `req` and the other members of its gang in `p`'s queue, in queue
    /// order (`req`, the head, first).
    fn members(&self, p: ProjectIx, req: usize) -> Vec<usize> {
        match self.round.requests[req].gang {
            None => vec![req],
            Some(g) => self.queues[p]
                .iter()
                .copied()
                .filter(|&r| r == req || self.round.requests[r].gang == Some(g))
                .collect(),
        }
    }

    /// `below` again for `p` and its ancestors, after `p`'s activity changed.
    fn update_below(&self, active: &[bool], below: &mut [bool], p: ProjectIx) {
        let mut at = Some(p);
        while let Some(a) = at {
            below[a] = active[a] || self.children[a].iter().any(|&c| below[c]);
            at = self.round.projects[a].parent;
        }
    }

    /// True when `p` takes part in this stage.
    fn eligible(&self, p: ProjectIx, stage: Stage) -> bool {
        let Some(&head) = self.queues[p].front() else {
            return false;
        };
        match stage {
            Stage::Fair => true,
            Stage::Guarantee => {
                let proj = &self.round.projects[p];
                proj.parent.is_none()
                    && self.round.requests[head]
                        .resources
                        .iter()
                        .any(|&(c, _)| proj.guarantees[c] > self.consumed[p][c])
            }
        }
    }

    /// The DRF sorter's first active project, or None: descend from the
    /// roots, taking at each level the smallest (share, count, path).
    fn pick(&self, active: &[bool], below: &[bool]) -> Option<ProjectIx> {
        let mut level: Vec<Entry> = self
            .roots
            .iter()
            .filter(|&&p| below[p])
            .map(|&p| Entry::Node(p))
            .collect();
        loop {
            let best = level.iter().copied().min_by(|&a, &b| self.compare(a, b))?;
            match best {
                Entry::Leaf(p) => return Some(p),
                Entry::Node(p) if self.children[p].is_empty() => return Some(p),
                Entry::Node(p) => {
                    level = self.children[p]
                        .iter()
                        .filter(|&&c| below[c])
                        .map(|&c| Entry::Node(c))
                        .collect();
                    if active[p] {
                        level.push(Entry::Leaf(p));
                    }
                }
            }
        }
    }

    /// The sorter's order between two siblings.
    fn compare(&self, a: Entry, b: Entry) -> std::cmp::Ordering {
        let (sa, ca, pa) = self.key(a);
        let (sb, cb, pb) = self.key(b);
        sa.total_cmp(&sb).then(ca.cmp(&cb)).then_with(|| pa.cmp(pb))
    }

    /// (share, allocation count, path) of a sibling.
    fn key(&self, e: Entry) -> (f64, u64, &str) {
        match e {
            Entry::Node(p) if self.recompute => (
                self.node_share_now(p),
                self.subtree_count[p],
                &self.paths[p],
            ),
            Entry::Node(p) => (self.node_share[p], self.subtree_count[p], &self.paths[p]),
            Entry::Leaf(p) if self.recompute => (
                self.share(&self.own_alloc[p], 1.0),
                self.own_count[p],
                &self.leaf_paths[p],
            ),
            Entry::Leaf(p) => (self.leaf_share[p], self.own_count[p], &self.leaf_paths[p]),
        }
    }

    /// For each project: whether it or a descendant is active.
    fn active_below(&self, active: &[bool]) -> Vec<bool> {
        let mut below = active.to_vec();
        for (p, &on) in active.iter().enumerate() {
            if on {
                let mut up = self.round.projects[p].parent;
                while let Some(a) = up {
                    below[a] = true;
                    up = self.round.projects[a].parent;
                }
            }
        }
        below
    }

    /// Weighted dominant share, in the Mesos sorter's f64 order.
    fn share(&self, alloc: &[i64], weight: f64) -> f64 {
        super::dominant_share(self.round, alloc, weight)
    }

    /// The first provider where request `req` may go, or the most specific
    /// reason none would take it.
    fn place(&mut self, req: usize) -> Result<Fit, Reason> {
        let r = &self.round.requests[req];
        let lineage = self.lineage(r.project);
        let top = *lineage.last().unwrap_or(&r.project);
        // What the request may take, by class: the surplus over every
        // guarantee's headroom, and what its own project's holds back.
        let room: Vec<(Class, i64)> = r
            .resources
            .iter()
            .map(|&(c, _)| (c, self.surplus(c) + self.held_back(top, c)))
            .collect();
        let candidates = r.allowed.as_ref().map_or(self.providers.len(), |a| a.len());
        if self.rooms.never_fits(&r.resources) || self.empty.never_fits(r) {
            return Err(Reason::NeverFits);
        }
        if !self.rooms.may_fit(&r.resources) {
            // Every provider would refuse it on capacity: the scan's
            // outcome and the steps it would have spent, without the scan.
            return self.pass_over(candidates).and(Err(Reason::NoCapacity));
        }
        let mut worst = Reason::NoCapacity;
        let mut scratch = Vec::with_capacity(r.resources.len());
        let mut k = 0;
        while k < candidates {
            if r.allowed.is_none() {
                // The cluster in order: pass over the providers without room.
                let open = self.rooms.next_open(k, &r.resources);
                self.pass_over(open - k)?;
                k = open;
                if k == candidates {
                    break;
                }
            }
            let rp = r.allowed.as_ref().map_or(k, |a| a[k]);
            if self.steps >= self.round.max_steps {
                return Err(Reason::NotReached);
            }
            self.steps += 1;
            match self.try_provider(r, rp, &lineage, &room, &mut scratch) {
                Ok(drawn) => {
                    return Ok(Fit {
                        provider: rp,
                        drawn,
                    })
                }
                Err(reason) => worst = worst.max(reason),
            }
            k += 1;
        }
        Err(worst)
    }

    /// Charges `visits` provider checks that would each have refused on
    /// capacity; `NotReached` (the budget spent) when the scan would have
    /// stopped among them.
    fn pass_over(&mut self, visits: usize) -> Result<(), Reason> {
        let spent = self
            .steps
            .saturating_add(u64::try_from(visits).unwrap_or(u64::MAX));
        if spent <= self.round.max_steps {
            self.steps = spent;
            return Ok(());
        }
        self.steps = self.round.max_steps;
        Err(Reason::NotReached)
    }

    /// Checks one provider for one request, in the allocator's order:
    /// capacity, decline filters, limits, headroom.
    fn try_provider(
        &self,
        r: &Request,
        rp: ProviderIx,
        lineage: &[ProjectIx],
        room: &[(Class, i64)],
        unreserved: &mut Vec<i64>,
    ) -> Result<Vec<(usize, i64)>, Reason> {
        let provider = &self.providers[rp];
        let mut drawn = Vec::new();
        unreserved.clear();
        for &(c, n) in &r.resources {
            let Some(stock) = provider.stock.get(c).and_then(Option::as_ref) else {
                return Err(Reason::NoCapacity);
            };
            if !units_ok(n, stock.min_unit, stock.max_unit, stock.step_size) {
                return Err(Reason::NoCapacity);
            }
            // The project's own reservation first, then its ancestors'.
            let mut left = n;
            for &owner in lineage {
                for (i, res) in provider.reservations.iter().enumerate() {
                    if res.owner == owner && res.class == c && res.unused > 0 && left > 0 {
                        let take = left.min(res.unused);
                        drawn.push((i, take));
                        left -= take;
                    }
                }
            }
            let unused: i64 = provider
                .reservations
                .iter()
                .filter(|x| x.class == c)
                .map(|x| x.unused)
                .sum();
            if (stock.used + unused + left) as f64 > stock.capacity {
                return Err(Reason::NoCapacity);
            }
            unreserved.push(left);
        }
        if self.declined(r, rp) {
            return Err(Reason::Declined);
        }
        for (depth, &p) in lineage.iter().enumerate() {
            let limits = &self.round.projects[p].limits;
            for &(c, n) in &r.resources {
                let Some(limit) = limits[c] else { continue };
                let delta = n - drawn_within(&drawn, provider, &lineage[..=depth], c);
                if delta > 0 && self.consumed[p][c] + delta > limit {
                    return Err(Reason::QuotaLimit);
                }
            }
        }
        if unreserved.iter().zip(room).any(|(u, (_, room))| u > room) {
            return Err(Reason::Headroom);
        }
        Ok(drawn)
    }

    /// True when an active decline hides the provider from this request.
    fn declined(&self, r: &Request, rp: ProviderIx) -> bool {
        let Some(filters) = self.declines.get(&(r.project, rp)) else {
            return false;
        };
        filters.iter().any(|d| {
            d.user.as_ref().is_none_or(|u| *u == r.user)
                && r.resources.iter().all(|(c, n)| {
                    d.refused
                        .iter()
                        .any(|(rc, refused)| rc == c && refused >= n)
                })
        })
    }

    /// `p` and its ancestors, nearest first.
    fn lineage(&self, p: ProjectIx) -> Vec<ProjectIx> {
        let mut out = vec![p];
        let mut up = self.round.projects[p].parent;
        while let Some(a) = up {
            out.push(a);
            up = self.round.projects[a].parent;
        }
        out
    }

    /// What a top-level project's guarantee still lacks in class `c`.
    fn unsatisfied(&self, top: ProjectIx, c: Class) -> i64 {
        (self.round.projects[top].guarantees[c] - self.consumed[top][c]).max(0)
    }

    /// What a top-level project's unsatisfied guarantee holds back from
    /// others in class `c`: all of it, less what the project lends.
    fn held_back(&self, top: ProjectIx, c: Class) -> i64 {
        (self.unsatisfied(top, c) - self.round.projects[top].lending_limits[c]).max(0)
    }

    /// Free capacity beyond what unsatisfied guarantees hold back.
    fn surplus(&self, c: Class) -> i64 {
        self.available[c] - self.required(c)
    }

    /// Σ of what unsatisfied guarantees hold back in class `c`.
    fn required(&self, c: Class) -> i64 {
        (0..self.round.projects.len())
            .filter(|&p| self.round.projects[p].parent.is_none())
            .map(|p| self.held_back(p, c))
            .sum()
    }

    /// Books an admission.
    fn commit(&mut self, req: usize, stage: Stage, fit: &Fit) {
        let r = &self.round.requests[req];
        let p = r.project;
        let weight = self.round.projects[p].weight;
        let before = self.share(&self.subtree_alloc[p], weight);
        let lineage = self.lineage(p);
        let provider = &mut self.providers[fit.provider];
        for &(i, n) in &fit.drawn {
            provider.reservations[i].unused -= n;
        }
        for &(c, n) in &r.resources {
            if let Some(s) = provider.stock[c].as_mut() {
                s.used += n;
                self.rooms.set(fit.provider, c, s.capacity - s.used as f64);
            }
            let from_res: i64 = fit
                .drawn
                .iter()
                .filter(|(i, _)| provider.reservations[*i].class == c)
                .map(|(_, n)| n)
                .sum();
            self.available[c] -= n - from_res;
            self.own_alloc[p][c] += n;
            for (depth, &a) in lineage.iter().enumerate() {
                let within = drawn_within(&fit.drawn, provider, &lineage[..=depth], c);
                self.consumed[a][c] += n - within;
                self.subtree_alloc[a][c] += n;
            }
        }
        self.own_count[p] += 1;
        for &a in &lineage {
            self.subtree_count[a] += 1;
            self.node_share[a] = self.node_share_now(a);
        }
        self.leaf_share[p] = self.share(&self.own_alloc[p], 1.0);
        let after = self.share(&self.subtree_alloc[p], weight);
        self.decided[req] = Some(Outcome::Admitted {
            stage,
            provider: fit.provider,
            from_reservation: !fit.drawn.is_empty(),
            share_before: before,
            share_after: after,
        });
        self.admitted_order.push(req);
    }

    /// Takes back [`commit`](Self::commit) of `req` onto `fit`, the last
    /// one committed: every sum it changed, in reverse.
    fn uncommit(&mut self, req: usize, fit: &Fit) {
        let r = &self.round.requests[req];
        let p = r.project;
        let lineage = self.lineage(p);
        let provider = &mut self.providers[fit.provider];
        for &(c, n) in &r.resources {
            if let Some(s) = provider.stock[c].as_mut() {
                s.used -= n;
                self.rooms.set(fit.provider, c, s.capacity - s.used as f64);
            }
            let from_res: i64 = fit
                .drawn
                .iter()
                .filter(|(i, _)| provider.reservations[*i].class == c)
                .map(|(_, n)| n)
                .sum();
            self.available[c] += n - from_res;
            self.own_alloc[p][c] -= n;
            for (depth, &a) in lineage.iter().enumerate() {
                let within = drawn_within(&fit.drawn, provider, &lineage[..=depth], c);
                self.consumed[a][c] -= n - within;
                self.subtree_alloc[a][c] -= n;
            }
        }
        for &(i, n) in &fit.drawn {
            provider.reservations[i].unused += n;
        }
        self.own_count[p] -= 1;
        for &a in &lineage {
            self.subtree_count[a] -= 1;
            self.node_share[a] = self.node_share_now(a);
        }
        self.leaf_share[p] = self.share(&self.own_alloc[p], 1.0);
        self.decided[req] = None;
        self.admitted_order.pop();
    }

    pub(super) fn finish(mut self) -> Admitted {
        let mut decisions: Vec<Decision> = self
            .admitted_order
            .iter()
            .map(|&r| Decision {
                request: r,
                outcome: self.decided[r]
                    .clone()
                    .unwrap_or(Outcome::Deferred(Reason::NotReached)),
            })
            .collect();
        for (r, d) in self.decided.iter_mut().enumerate() {
            match d.take() {
                Some(Outcome::Admitted { .. }) => {}
                Some(outcome) => decisions.push(Decision {
                    request: r,
                    outcome,
                }),
                None => decisions.push(Decision {
                    request: r,
                    outcome: Outcome::Deferred(Reason::NotReached),
                }),
            }
        }
        let held_back = (0..self.round.classes)
            .map(|c| self.required(c).min(self.available[c].max(0)))
            .collect();
        Admitted {
            decisions,
            held_back_for_headroom: held_back,
            steps: self.steps,
        }
    }
}

/// Units of class `c` drawn from reservations owned by `owners`.
fn drawn_within(
    drawn: &[(usize, i64)],
    provider: &Provider,
    owners: &[ProjectIx],
    c: Class,
) -> i64 {
    drawn
        .iter()
        .filter(|(i, _)| {
            let res = &provider.reservations[*i];
            res.class == c && owners.contains(&res.owner)
        })
        .map(|(_, n)| n)
        .sum()
}

/// Each project's requests (indexes), in precedence order: a stable sort,
/// so equal precedence keeps submission order.
fn queues_of(round: &Round) -> Vec<std::collections::VecDeque<usize>> {
    let mut queues = vec![std::collections::VecDeque::new(); round.projects.len()];
    for (i, r) in round.requests.iter().enumerate() {
        queues[r.project].push_back(i);
    }
    for queue in &mut queues {
        queue
            .make_contiguous()
            .sort_by_key(|&i| round.requests[i].precedence);
    }
    queues
}

/// `root/…/p`, for tie-breaks.
fn path_of(round: &Round, p: ProjectIx) -> String {
    let mut parts = vec![round.projects[p].name.as_str()];
    let mut up = round.projects[p].parent;
    while let Some(a) = up {
        parts.push(round.projects[a].name.as_str());
        up = round.projects[a].parent;
    }
    parts.reverse();
    parts.join("/")
}
