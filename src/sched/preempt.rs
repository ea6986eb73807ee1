//! Preemption advice for the fair queue: when a project below its
//! guarantee waits for room that others borrowed, which of their
//! consumers to remove so that its request fits (as Kueue and YuniKorn
//! win guarantees back; Mesos' allocator does not). Pure: plain data in,
//! advice out; nothing is ever removed by the service itself.
//!
//! Rules (issue 29):
//! - victims come only from other projects above their weighted fair
//!   share (`weight / Σ weight` of the active projects, against the
//!   dominant share), checked again after each victim chosen, so a project
//!   is never taken at or below its fair share;
//! - never a `prod` consumer for a `batch` request;
//! - on each provider the victims are taken in the order (priority
//!   ascending, share above fair descending, newest first) until the
//!   request fits; the provider needing the fewest victims wins (the
//!   first in cluster order on a tie);
//! - requests are advised in queue order while their project's guarantee
//!   is unsatisfied on one of their classes, counting what earlier advice
//!   already wins back;
//! - victims make room only for the part of a request within its
//!   project's unsatisfied guarantee: on a provider, what the request
//!   needs beyond the free room must be within it, class by class, or the
//!   provider gets no advice (a project guaranteed 1 core that asks for 4
//!   reclaims 1 where 3 are free, and nothing where none are: as Kueue
//!   reclaims only for a workload within its nominal quota, issue 64);
//! - a gang is advised whole or not at all: every member gets room in the
//!   same pass, or none of its victims are named;
//! - a project that opts in (`within_project`) may have its own work of
//!   lower precedence (a later priority class, or a lower priority in the
//!   same class) advised for its request that fits nowhere and wins
//!   nothing back of a guarantee, lowest precedence and newest first,
//!   whatever the fair shares (Kueue's `withinClusterQueue:
//!   LowerPriority`);
//! - victims the service may remove itself are preferred, on a provider
//!   and between providers (the fewest others first), so that where the
//!   victims' project enforces preemption the advice is a set the service
//!   can carry out whole; it carries out a request's set only whole.

/// Index of a resource class.
pub type Class = usize;

/// The cluster as the advice sees it: DRF denominators and what is free on each provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterCapacity {
    /// Σ capacity per class.
    pub totals: Vec<f64>,
    /// Classes that do not count towards shares.
    pub excluded: Vec<bool>,
    /// Free units per provider, per class (capacity − used, floored).
    pub free: Vec<Vec<i64>>,
}

/// A project as the advice sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// DRF weight (> 0).
    pub weight: f64,
    /// What its consumers hold, per class.
    pub allocated: Vec<i64>,
    /// Guarantees per class (0: none).
    pub guarantees: Vec<i64>,
}

/// A consumer that could make room.
#[derive(Debug, Clone, PartialEq)]
pub struct Victim {
    /// Its project.
    pub project: usize,
    /// The provider it holds room on.
    pub provider: usize,
    /// What it holds there.
    pub amounts: Vec<(Class, i64)>,
    /// Its priority (lower goes first).
    pub priority: i64,
    /// True for production work, never removed for a batch request.
    pub prod: bool,
    /// Its priority class: 0 prod, 1 mid, 2 batch, 3 free.
    pub class: i16,
    /// Larger is newer (newest go first).
    pub age_rank: u64,
    /// The service may remove it itself (its project enforces preemption
    /// and it came through the queue): preferred, so that the advice is a
    /// set the service can carry out whole.
    pub removable: bool,
}

/// A waiting request.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// Its project.
    pub project: usize,
    /// What it needs, all on one provider.
    pub resources: Vec<(Class, i64)>,
    /// The providers it may use (None: all).
    pub allowed: Option<Vec<usize>>,
    /// True for batch or free work.
    pub batch: bool,
    /// Its priority class (0 prod … 3 free) and priority in the class:
    /// what its project's own work must be below to make room for it
    /// within the project.
    pub class: i16,
    /// Priority inside the class.
    pub priority: i64,
    /// Its project lets it take room from the project's own work of
    /// lower precedence (`within_project_preemption: lower_priority`).
    pub within_project: bool,
    /// The provider where room is already held for it by earlier advice:
    /// preferred while it can still make the room, so that the advice
    /// and the hold stay on one provider from round to round.
    pub held_on: Option<usize>,
    /// The gang it belongs to (an index the caller gives each gang):
    /// advised only together with every other member.
    pub gang: Option<usize>,
}

/// Room to make for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// Index into the asks.
    pub ask: usize,
    /// Where the room is made.
    pub provider: usize,
    /// Indexes into the victims, in the order chosen.
    pub victims: Vec<usize>,
}

/// The running picture while advice is built.
#[derive(Clone)]
struct Picture<'a> {
    cluster: &'a ClusterCapacity,
    projects: &'a [Holder],
    victims: &'a [Victim],
    allocated: Vec<Vec<i64>>,
    free: Vec<Vec<i64>>,
    taken: Vec<bool>,
    total_weight: f64,
}

impl<'a> Picture<'a> {
    fn new(
        cluster: &'a ClusterCapacity,
        projects: &'a [Holder],
        victims: &'a [Victim],
        asks: &[Ask],
    ) -> Self {
        let asking: Vec<bool> = (0..projects.len())
            .map(|p| asks.iter().any(|a| a.project == p))
            .collect();
        let total_weight = projects
            .iter()
            .enumerate()
            .filter(|(p, h)| asking[*p] || h.allocated.iter().any(|n| *n > 0))
            .map(|(_, h)| h.weight)
            .sum();
        Picture {
            cluster,
            projects,
            victims,
            allocated: projects.iter().map(|h| h.allocated.clone()).collect(),
            free: cluster.free.clone(),
            taken: vec![false; victims.len()],
            total_weight,
        }
    }

    fn share(&self, allocated: &[i64]) -> f64 {
        allocated
            .iter()
            .enumerate()
            .filter(|(c, _)| !self.cluster.excluded.get(*c).copied().unwrap_or(false))
            .filter(|(c, _)| self.cluster.totals.get(*c).is_some_and(|t| *t > 0.0))
            .map(|(c, n)| *n as f64 / self.cluster.totals[c])
            .fold(0.0, f64::max)
    }

    fn fair(&self, project: usize) -> f64 {
        match self.total_weight > 0.0 {
            true => self.projects[project].weight / self.total_weight,
            false => 0.0,
        }
    }

    /// What `ask` needs on `provider` beyond its free room, per class.
    fn need_beyond_free(&self, provider: usize, ask: &Ask) -> Vec<(Class, i64)> {
        ask.resources
            .iter()
            .map(|&(c, n)| (c, n - self.free[provider].get(c).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The victims to take on `provider` for `ask` (none where it fits in
    /// the free room), or None if even every eligible one would not make
    /// it fit, or if what it needs beyond the free room is more than
    /// `reclaimable` (per class: the part of the project's guarantee not
    /// yet held or won back).
    fn victims_on(&self, provider: usize, ask: &Ask, reclaimable: &[i64]) -> Option<Vec<usize>> {
        let mut need = self.need_beyond_free(provider, ask);
        if need
            .iter()
            .any(|&(c, n)| n > reclaimable.get(c).copied().unwrap_or(0))
        {
            return None;
        }
        let mut allocated = self.allocated.clone();
        let mut picks: Vec<usize> = Vec::new();
        while !need.is_empty() {
            let next = (0..self.victims.len())
                .filter(|&v| self.may_take(v, provider, ask, &picks, &need))
                .map(|v| (v, self.above_fair(self.victims[v].project, &allocated)))
                .filter(|(_, above)| *above > 1e-9)
                .min_by(|(a, above_a), (b, above_b)| {
                    let (va, vb) = (&self.victims[*a], &self.victims[*b]);
                    va.priority
                        .cmp(&vb.priority)
                        .then(vb.removable.cmp(&va.removable))
                        .then(above_b.total_cmp(above_a))
                        .then(vb.age_rank.cmp(&va.age_rank))
                })?;
            let v = &self.victims[next.0];
            for &(c, n) in &v.amounts {
                allocated[v.project][c] -= n;
            }
            take_off(&mut need, v);
            picks.push(next.0);
        }
        Some(picks)
    }

    /// The project's own work of lower precedence to take on `provider`
    /// for `ask` (within-project preemption), lowest precedence and newest
    /// first; None when all of it would not make it fit.
    fn own_victims_on(&self, provider: usize, ask: &Ask) -> Option<Vec<usize>> {
        let mut need = self.need_beyond_free(provider, ask);
        if need.is_empty() {
            return None;
        }
        let lower =
            |v: &Victim| v.class > ask.class || (v.class == ask.class && v.priority < ask.priority);
        let mut candidates: Vec<usize> = (0..self.victims.len())
            .filter(|&v| {
                let victim = &self.victims[v];
                !self.taken[v]
                    && victim.provider == provider
                    && victim.project == ask.project
                    && lower(victim)
            })
            .collect();
        candidates.sort_by(|&a, &b| {
            let (va, vb) = (&self.victims[a], &self.victims[b]);
            vb.class
                .cmp(&va.class)
                .then(va.priority.cmp(&vb.priority))
                .then(vb.removable.cmp(&va.removable))
                .then(vb.age_rank.cmp(&va.age_rank))
        });
        let mut picks = Vec::new();
        for v in candidates {
            if need.is_empty() {
                break;
            }
            let victim = &self.victims[v];
            if !frees_some_of(&need, victim) {
                continue;
            }
            take_off(&mut need, victim);
            picks.push(v);
        }
        need.is_empty().then_some(picks)
    }

    fn above_fair(&self, project: usize, allocated: &[Vec<i64>]) -> f64 {
        self.share(&allocated[project]) - self.fair(project)
    }

    fn may_take(
        &self,
        v: usize,
        provider: usize,
        ask: &Ask,
        picks: &[usize],
        need: &[(Class, i64)],
    ) -> bool {
        let victim = &self.victims[v];
        !self.taken[v]
            && victim.provider == provider
            && victim.project != ask.project
            && !(ask.batch && victim.prod)
            && !picks.contains(&v)
            && frees_some_of(need, victim)
    }

    fn apply(&mut self, ask: &Ask, provider: usize, picks: &[usize]) {
        for &v in picks {
            self.taken[v] = true;
            let victim = &self.victims[v];
            for &(c, n) in &victim.amounts {
                self.allocated[victim.project][c] -= n;
                self.free[provider][c] += n;
            }
        }
        for &(c, n) in &ask.resources {
            self.free[provider][c] -= n;
            self.allocated[ask.project][c] += n;
        }
    }
}

/// Whether `victim` holds some of a class `need` still lacks.
fn frees_some_of(need: &[(Class, i64)], victim: &Victim) -> bool {
    victim
        .amounts
        .iter()
        .any(|(c, n)| *n > 0 && need.iter().any(|(nc, _)| nc == c))
}

/// `need` less what `victim` frees; classes met leave it.
fn take_off(need: &mut Vec<(Class, i64)>, victim: &Victim) {
    for &(c, n) in &victim.amounts {
        if let Some(slot) = need.iter_mut().find(|(nc, _)| *nc == c) {
            slot.1 -= n;
        }
    }
    need.retain(|(_, n)| *n > 0);
}

/// What `ask`'s project may still win back of its guarantee, per class
/// (`won`: what earlier advice already wins).
fn reclaimable(holder: &Holder, won: &[i64]) -> Vec<i64> {
    holder
        .guarantees
        .iter()
        .enumerate()
        .map(|(c, guaranteed)| {
            let held =
                holder.allocated.get(c).copied().unwrap_or(0) + won.get(c).copied().unwrap_or(0);
            (guaranteed - held).max(0)
        })
        .collect()
}

/// The advice for `asks` (waiting requests that did not fit, in queue order).
pub fn advise(
    cluster: &ClusterCapacity,
    projects: &[Holder],
    victims: &[Victim],
    asks: &[Ask],
) -> Vec<Advice> {
    let mut picture = Picture::new(cluster, projects, victims, asks);
    let mut won: Vec<Vec<i64>> = projects
        .iter()
        .map(|h| vec![0; h.allocated.len()])
        .collect();
    let mut out = Vec::new();
    let mut gangs_seen: Vec<usize> = Vec::new();
    for (i, ask) in asks.iter().enumerate() {
        // A gang is tried whole at its first member, on a copy of the
        // picture kept only when every member found room.
        let members: Vec<usize> = match ask.gang {
            Some(g) if gangs_seen.contains(&g) => continue,
            Some(g) => {
                gangs_seen.push(g);
                (i..asks.len())
                    .filter(|&j| asks[j].gang == Some(g))
                    .collect()
            }
            None => vec![i],
        };
        let mut trial = picture.clone();
        let mut trial_won = won.clone();
        let mut advised = Vec::new();
        for &m in &members {
            match advise_one(&mut trial, &mut trial_won, projects, &asks[m]) {
                Some((provider, picks)) => advised.push(Advice {
                    ask: m,
                    provider,
                    victims: picks,
                }),
                None => break,
            }
        }
        if advised.len() == members.len() {
            picture = trial;
            won = trial_won;
            out.extend(advised);
        }
    }
    out
}

/// Room for one request from its own project's work of lower precedence
/// (when the project opts in): the provider needing the fewest victims,
/// preferring the one already holding room and victims the service may
/// remove. The picture is updated.
fn advise_within(
    picture: &mut Picture<'_>,
    ask: &Ask,
    allowed: &[usize],
) -> Option<(usize, Vec<usize>)> {
    if !ask.within_project {
        return None;
    }
    let (provider, picks) = allowed
        .iter()
        .filter_map(|&p| picture.own_victims_on(p, ask).map(|v| (p, v)))
        .min_by_key(|(p, v)| {
            let unremovable = v.iter().filter(|&&i| !picture.victims[i].removable).count();
            (Some(*p) != ask.held_on, unremovable, v.len(), *p)
        })?;
    picture.apply(ask, provider, &picks);
    Some((provider, picks))
}

/// Room for one request: where, and the victims; the picture and what
/// its project won are updated.
fn advise_one(
    picture: &mut Picture<'_>,
    won: &mut [Vec<i64>],
    projects: &[Holder],
    ask: &Ask,
) -> Option<(usize, Vec<usize>)> {
    let every: Vec<usize> = (0..picture.free.len()).collect();
    let allowed = ask.allowed.as_deref().unwrap_or(&every);
    let reclaimable = reclaimable(&projects[ask.project], &won[ask.project]);
    if !ask
        .resources
        .iter()
        .any(|&(c, _)| reclaimable.get(c).is_some_and(|n| *n > 0))
    {
        return advise_within(picture, ask, allowed);
    }
    // A lone request that fits in free room needs no advice (the round
    // admits it); a gang's member may: its room is held with the rest.
    let (provider, picks) = allowed
        .iter()
        .filter_map(|&p| picture.victims_on(p, ask, &reclaimable).map(|v| (p, v)))
        .filter(|(_, v)| ask.gang.is_some() || !v.is_empty())
        .min_by_key(|(p, v)| {
            let unremovable = v.iter().filter(|&&i| !picture.victims[i].removable).count();
            (Some(*p) != ask.held_on, unremovable, v.len(), *p)
        })?;
    picture.apply(ask, provider, &picks);
    for &(c, n) in &ask.resources {
        won[ask.project][c] += n;
    }
    Some((provider, picks))
}

#[cfg(test)]
mod tests;
