//! A replay of the Mesos hierarchical allocator's offer cycle
//! (`hierarchical.cpp: __generateOffers`), whole-agent and coarse-grained,
//! with quota guarantees and limits, headroom, reservations and decline
//! filters. Pure. It exists to prove the rules the admission round is
//! built on against Mesos' own allocator tests (the
//! `mesos_allocator_scenario` vectors); the service admits at request
//! granularity (`sched::admission`).
//!
//! Resource names follow the vectors: `cpus` is unreserved, `cpus(role)`
//! is reserved for `role` (and usable by its sub-roles). Shares aggregate
//! by base name over every agent.

use super::drf::{self, Client, Resources, SortInput};
use std::collections::BTreeMap;

/// `--min_allocatable_resources`: an offer needs one of these.
const MIN_ALLOCATABLE: [(&str, f64); 2] = [("cpus", 0.01), ("mem", 32.0)];
/// Float slack for quantities (Mesos uses fixed point).
const EPS: f64 = 1e-9;

/// One offer: framework, role, agent, resources.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// The framework.
    pub framework: String,
    /// Its role.
    pub role: String,
    /// The agent.
    pub agent: String,
    /// What was offered.
    pub resources: Resources,
}

#[derive(Debug, Clone, Default)]
struct Agent {
    id: String,
    total: Resources,
    /// Offered or allocated, by framework.
    allocated: BTreeMap<String, Resources>,
}

#[derive(Debug, Clone)]
struct Filter {
    framework: String,
    agent: String,
    refused: Resources,
    expires: f64,
}

/// The allocator's state.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    agents: Vec<Agent>,
    /// Framework → role, in the order added.
    frameworks: Vec<(String, String)>,
    /// Role → (guarantees, limits).
    quotas: BTreeMap<String, (Resources, Resources)>,
    role_counts: BTreeMap<String, u64>,
    framework_counts: BTreeMap<String, u64>,
    filters: Vec<Filter>,
    clock: f64,
    /// `--allocation_interval` in seconds.
    pub allocation_interval: f64,
}

/// `cpus(role)` → (`cpus`, Some(`role`)).
fn split(name: &str) -> (&str, Option<&str>) {
    match name.split_once('(') {
        Some((base, rest)) => (base, Some(rest.trim_end_matches(')'))),
        None => (name, None),
    }
}

/// True when `role` is `owner` or one of its sub-roles.
fn within(role: &str, owner: &str) -> bool {
    role == owner || role.starts_with(&format!("{owner}/"))
}

fn add(a: &mut Resources, b: &Resources) {
    for (r, q) in b {
        *a.entry(r.clone()).or_default() += q;
    }
}

fn sub(a: &mut Resources, b: &Resources) {
    for (r, q) in b {
        *a.entry(r.clone()).or_default() -= q;
    }
    a.retain(|_, q| *q > EPS);
}

/// Quantities by base name.
fn by_base(r: &Resources) -> Resources {
    let mut out = Resources::new();
    for (name, q) in r {
        *out.entry(split(name).0.to_string()).or_default() += q;
    }
    out
}

fn unreserved(r: &Resources) -> Resources {
    r.iter()
        .filter(|(n, _)| split(n).1.is_none())
        .map(|(n, q)| (n.clone(), *q))
        .collect()
}

/// Each quantity capped at `cap` (a name absent from `cap` is capped at
/// `absent`: 0 or unlimited).
fn shrink(r: &Resources, cap: &Resources, absent: f64) -> Resources {
    r.iter()
        .map(|(n, q)| (n.clone(), q.min(cap.get(n).copied().unwrap_or(absent))))
        .filter(|(_, q)| *q > EPS)
        .collect()
}

/// `a − b` per name of `a`, keeping what stays positive.
fn minus(a: &Resources, b: &Resources) -> Resources {
    a.iter()
        .map(|(n, q)| (n.clone(), q - b.get(n).copied().unwrap_or(0.0)))
        .filter(|(_, q)| *q > EPS)
        .collect()
}

impl Allocator {
    /// An empty allocator with this `--allocation_interval` (seconds).
    pub fn new(allocation_interval: f64) -> Self {
        Allocator {
            allocation_interval,
            ..Default::default()
        }
    }

    /// A new agent, with what its frameworks already use.
    pub fn add_agent(&mut self, id: &str, total: Resources, used: BTreeMap<String, Resources>) {
        for fw in used.keys() {
            self.count(fw);
        }
        self.agents.push(Agent {
            id: id.to_string(),
            total,
            allocated: used,
        });
    }

    /// A new framework in `role`.
    pub fn add_framework(&mut self, id: &str, role: &str) {
        self.frameworks.push((id.to_string(), role.to_string()));
    }

    /// Sets a role's quota.
    pub fn set_quota(&mut self, role: &str, guarantees: Resources, limits: Resources) {
        self.quotas.insert(role.to_string(), (guarantees, limits));
    }

    /// A framework declines part of an agent: the resources come back and,
    /// unless `refuse_seconds` is 0, a filter hides the agent from it.
    pub fn decline(&mut self, fw: &str, agent: &str, resources: &Resources, refuse_seconds: f64) {
        if let Some(a) = self.agents.iter_mut().find(|a| a.id == agent) {
            if let Some(held) = a.allocated.get_mut(fw) {
                sub(held, resources);
            }
        }
        if let Some(seconds) =
            super::decline::filter_seconds(Some(refuse_seconds), self.allocation_interval)
        {
            self.filters.push(Filter {
                framework: fw.to_string(),
                agent: agent.to_string(),
                refused: resources.clone(),
                expires: self.clock + seconds,
            });
        }
    }

    /// Removes every filter.
    pub fn expire_filters(&mut self) {
        self.filters.clear();
    }

    /// Moves the clock; filters past their time go.
    pub fn advance_clock(&mut self, seconds: f64) {
        self.clock += seconds;
        let now = self.clock;
        self.filters.retain(|f| f.expires > now + EPS);
    }

    fn count(&mut self, fw: &str) {
        *self.framework_counts.entry(fw.to_string()).or_default() += 1;
        if let Some(role) = self.role_of(fw) {
            *self.role_counts.entry(role).or_default() += 1;
        }
    }

    fn role_of(&self, fw: &str) -> Option<String> {
        self.frameworks
            .iter()
            .find(|(f, _)| f == fw)
            .map(|(_, r)| r.clone())
    }

    fn totals(&self) -> Resources {
        let mut t = Resources::new();
        for a in &self.agents {
            add(&mut t, &by_base(&a.total));
        }
        t
    }

    /// What a framework holds over all agents.
    fn held_by(&self, fw: &str) -> Resources {
        let mut out = Resources::new();
        for a in &self.agents {
            if let Some(r) = a.allocated.get(fw) {
                add(&mut out, r);
            }
        }
        out
    }

    /// Roles with frameworks, in DRF order.
    fn role_order(&self) -> Vec<String> {
        let mut roles: BTreeMap<String, Resources> = BTreeMap::new();
        for (fw, role) in &self.frameworks {
            add(
                roles.entry(role.clone()).or_default(),
                &by_base(&self.held_by(fw)),
            );
        }
        let clients = roles
            .into_iter()
            .map(|(path, allocation)| Client {
                allocation_count: self.role_counts.get(&path).copied().unwrap_or(0),
                path,
                active: true,
                allocation,
            })
            .collect();
        drf::sort(&SortInput {
            totals: self.totals(),
            clients,
            ..Default::default()
        })
    }

    /// A role's frameworks, in DRF order.
    fn framework_order(&self, role: &str) -> Vec<String> {
        let clients = self
            .frameworks
            .iter()
            .filter(|(_, r)| r == role)
            .map(|(fw, _)| Client {
                path: fw.clone(),
                active: true,
                allocation: by_base(&self.held_by(fw)),
                allocation_count: self.framework_counts.get(fw).copied().unwrap_or(0),
            })
            .collect();
        drf::sort(&SortInput {
            totals: self.totals(),
            clients,
            ..Default::default()
        })
    }

    /// Quota consumption: reservations of the role's subtree (used or not)
    /// plus its unreserved allocations, by base name.
    fn consumed(&self, role: &str) -> Resources {
        let mut out = Resources::new();
        for a in &self.agents {
            for (name, q) in &a.total {
                if split(name).1.is_some_and(|owner| within(owner, role)) {
                    *out.entry(split(name).0.to_string()).or_default() += q;
                }
            }
            for (fw, held) in &a.allocated {
                if self.role_of(fw).is_some_and(|r| within(&r, role)) {
                    add(&mut out, &unreserved(held));
                }
            }
        }
        out
    }

    fn unsatisfied(&self, role: &str) -> Resources {
        match self.quotas.get(role) {
            Some((g, _)) => minus(g, &self.consumed(role)),
            None => Resources::new(),
        }
    }

    /// Σ of unsatisfied guarantees.
    fn required_headroom(&self) -> Resources {
        let mut out = Resources::new();
        for role in self.quotas.keys() {
            add(&mut out, &self.unsatisfied(role));
        }
        out
    }

    /// Unreserved resources not offered or allocated, over every agent.
    fn available_headroom(&self) -> Resources {
        let mut out = Resources::new();
        for i in 0..self.agents.len() {
            add(&mut out, &unreserved(&self.free(i)));
        }
        out
    }

    /// What is neither offered nor allocated on an agent.
    fn free(&self, agent: usize) -> Resources {
        let a = &self.agents[agent];
        let mut free = a.total.clone();
        for held in a.allocated.values() {
            sub(&mut free, held);
        }
        free
    }

    /// The part of an agent's free resources a role may use.
    fn usable(&self, agent: usize, role: &str) -> Resources {
        self.free(agent)
            .into_iter()
            .filter(|(n, _)| split(n).1.is_none_or(|owner| within(role, owner)))
            .collect()
    }

    /// What each limited name still allows the role, after `also` (every
    /// name of the limits, possibly 0); None without limits.
    fn limit_caps(&self, role: &str, also: &Resources) -> Option<Resources> {
        let (_, limits) = self.quotas.get(role)?;
        let consumed = self.consumed(role);
        Some(
            limits
                .iter()
                .map(|(n, l)| {
                    let used = consumed.get(n).copied().unwrap_or(0.0)
                        + also.get(n).copied().unwrap_or(0.0);
                    (n.clone(), (l - used).max(0.0))
                })
                .collect(),
        )
    }

    fn filtered(&self, fw: &str, agent: usize, offer: &Resources) -> bool {
        let id = &self.agents[agent].id;
        self.filters.iter().any(|f| {
            f.framework == fw
                && &f.agent == id
                && offer
                    .iter()
                    .all(|(n, q)| f.refused.get(n).is_some_and(|r| *r + EPS >= *q))
        })
    }

    fn give(&mut self, fw: &str, agent: usize, offer: &Resources, out: &mut Vec<Offer>) {
        add(
            self.agents[agent]
                .allocated
                .entry(fw.to_string())
                .or_default(),
            offer,
        );
        self.count(fw);
        let role = self.role_of(fw).unwrap_or_default();
        let id = self.agents[agent].id.clone();
        match out.iter_mut().find(|o| o.framework == fw && o.agent == id) {
            Some(o) => add(&mut o.resources, offer),
            None => out.push(Offer {
                framework: fw.to_string(),
                role,
                agent: id,
                resources: offer.clone(),
            }),
        }
    }

    /// One allocation round over the candidate agents (indexes by id).
    pub fn allocate(&mut self, candidates: &[String]) -> Vec<Offer> {
        let agents: Vec<usize> = candidates
            .iter()
            .filter_map(|c| self.agents.iter().position(|a| &a.id == c))
            .collect();
        let mut out = Vec::new();
        for &a in &agents {
            self.guarantee_stage(a, &mut out);
        }
        for &a in &agents {
            self.fair_stage(a, &mut out);
        }
        out
    }

    /// Stage 1 on one agent: roles below their guarantee.
    fn guarantee_stage(&mut self, agent: usize, out: &mut Vec<Offer>) {
        for role in self.role_order() {
            for fw in self.framework_order(&role) {
                let unsatisfied = self.unsatisfied(&role);
                if unsatisfied.is_empty() {
                    break;
                }
                let available = self.usable(agent, &role);
                let guarantee_part = shrink(&unreserved(&available), &unsatisfied, 0.0);
                if guarantee_part.is_empty() {
                    break;
                }
                let mut additional = minus(&unreserved(&available), &guarantee_part);
                if let Some(caps) = self.limit_caps(&role, &guarantee_part) {
                    additional = shrink(&additional, &caps, f64::INFINITY);
                }
                let surplus = minus(&self.available_headroom(), &self.required_headroom());
                additional = shrink(&additional, &surplus, 0.0);
                let mut offer = guarantee_part;
                add(&mut offer, &minus(&available, &unreserved(&available)));
                add(&mut offer, &additional);
                if self.offerable(&fw, agent, &offer) {
                    self.give(&fw, agent, &offer, out);
                }
            }
        }
    }

    /// Stage 2 on one agent: every role, limits and headroom respected.
    fn fair_stage(&mut self, agent: usize, out: &mut Vec<Offer>) {
        for role in self.role_order() {
            for fw in self.framework_order(&role) {
                let available = self.usable(agent, &role);
                let mut free = unreserved(&available);
                if let Some(caps) = self.limit_caps(&role, &Resources::new()) {
                    free = shrink(&free, &caps, f64::INFINITY);
                }
                let surplus = minus(&self.available_headroom(), &self.required_headroom());
                free = shrink(&free, &surplus, 0.0);
                let mut offer = minus(&available, &unreserved(&available));
                add(&mut offer, &free);
                if self.offerable(&fw, agent, &offer) {
                    self.give(&fw, agent, &offer, out);
                }
            }
        }
    }

    fn offerable(&self, fw: &str, agent: usize, offer: &Resources) -> bool {
        let base = by_base(offer);
        let big_enough = MIN_ALLOCATABLE
            .iter()
            .any(|(n, min)| base.get(*n).is_some_and(|q| *q + EPS >= *min));
        big_enough && !self.filtered(fw, agent, offer)
    }
}
