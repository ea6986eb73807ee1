//! Builds an admission round (`sched::admission::Round`): the cluster's
//! providers (from the candidate snapshot, see `fairness::round_providers`) in a
//! seeded shuffle, every project that asks, owns a reservation, has a
//! quota or sits above one of those, the reservations' unused parts, and
//! the active decline filters.

use super::eligibility::{Eligibility, OrderedProviders};
use super::round_request::{AdmissionItem, PriorityClass};
use crate::candidates::snapshot::Snapshot;
use crate::db::fairness as db;
use crate::error::{Error, Result};
use crate::sched::admission::{self as round, Class, ProjectIx, ProviderIx, Queueing, Round};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sqlx::PgConnection;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use uuid::Uuid;

/// A round with the names behind its indexes.
pub struct Loaded {
    /// The round.
    pub round: Round,
    /// Class names by index.
    pub classes: Vec<String>,
    /// Provider uuids by index.
    pub providers: Vec<Uuid>,
    /// Provider row ids by index.
    pub provider_ids: Vec<i64>,
    /// Project external ids and table ids by index.
    pub projects: Vec<(String, i32)>,
}

/// The round's classes: names by index (sorted) and the maps to them.
struct Classes {
    names: Vec<String>,
    by_id: HashMap<i32, Class>,
}

impl Classes {
    /// The snapshot's classes and the requests' own (400 for a class that
    /// does not exist; one created since the snapshot's load does).
    async fn of(conn: &mut PgConnection, snap: &Snapshot, items: &[AdmissionItem]) -> Result<Self> {
        let asked = super::sorted_distinct(items.iter().flat_map(|i| i.resources.keys().cloned()));
        let mut ids: HashMap<i32, String> = snap
            .class_names
            .iter()
            .map(|(id, n)| (*id, n.clone()))
            .collect();
        ids.extend(
            super::class_ids(conn, &asked)
                .await?
                .into_iter()
                .map(|(n, id)| (id, n)),
        );
        let mut names: Vec<String> = ids.values().cloned().collect();
        names.sort();
        names.dedup();
        let mut classes = Classes {
            names,
            by_id: HashMap::new(),
        };
        let ix = classes.index();
        let by_id = ids
            .iter()
            .filter_map(|(id, n)| ix.get(n.as_str()).map(|&c| (*id, c)))
            .collect();
        classes.by_id = by_id;
        Ok(classes)
    }

    /// Class indexes by name.
    fn index(&self) -> HashMap<&str, Class> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i))
            .collect()
    }
}

/// Everything a round reads, in the caller's transaction, over the
/// providers of `snap` (current as of that transaction).
pub async fn load(
    conn: &mut PgConnection,
    snap: &Snapshot,
    items: &[AdmissionItem],
    seed: u32,
    excluded: &[String],
    max_steps: u64,
) -> Result<Loaded> {
    let mut order: Vec<usize> = (0..snap.nodes.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(u64::from(seed)));
    let ix_of_id: HashMap<i64, ProviderIx> = order
        .iter()
        .enumerate()
        .map(|(ix, &t)| (snap.nodes[t].id, ix))
        .collect();
    let classes = Classes::of(conn, snap, items).await?;
    let class_ix = classes.index();
    let class_of_id = &classes.by_id;
    let (mut providers, totals) = round_stock(snap, &order, classes.names.len(), class_of_id);
    let mut projects = Projects::load(conn, items).await?;
    reservations(conn, &mut providers, &mut projects, &ix_of_id, class_of_id).await?;
    let rows = OrderedProviders {
        snap,
        order: &order,
    };
    let request_list = requests(conn, items, &projects, &class_ix, rows).await?;
    let declines = declines(conn, &projects, &ix_of_id, &class_ix).await?;
    let held = projects
        .holdings(conn, &classes.names, &class_ix, class_of_id)
        .await?;
    let excluded = classes.names.iter().map(|c| excluded.contains(c)).collect();
    Ok(Loaded {
        round: Round {
            classes: classes.names.len(),
            totals,
            excluded,
            providers,
            projects: held,
            requests: request_list,
            declines,
            max_steps,
        },
        providers: order.iter().map(|&t| snap.nodes[t].uuid).collect(),
        provider_ids: order.iter().map(|&t| snap.nodes[t].id).collect(),
        projects: projects
            .list
            .iter()
            .map(|p| (p.name.clone(), p.id))
            .collect(),
        classes: classes.names,
    })
}

/// The cluster's inventories as round providers (in round order) and the
/// DRF totals: Σ capacity per class.
fn round_stock(
    snap: &Snapshot,
    order: &[usize],
    classes: usize,
    class_of_id: &HashMap<i32, Class>,
) -> (Vec<round::Provider>, Vec<f64>) {
    let mut totals = vec![0.0; classes];
    let providers = order
        .iter()
        .map(|&t| {
            let mut stock = vec![None; classes];
            for s in &snap.nodes[t].stock {
                let Some(&c) = class_of_id.get(&s.class) else {
                    continue;
                };
                let capacity = s.capacity();
                totals[c] += capacity;
                stock[c] = Some(round::Stock {
                    capacity,
                    used: s.used,
                    min_unit: s.inventory.min_unit.into(),
                    max_unit: s.inventory.max_unit.into(),
                    step_size: s.inventory.step_size.into(),
                });
            }
            round::Provider {
                stock,
                reservations: Vec::new(),
            }
        })
        .collect();
    (providers, totals)
}

/// One project of the round before its holdings are read.
struct ProjectRow {
    name: String,
    id: i32,
    parent: Option<String>,
    weight: f64,
    count: i64,
    queueing: Queueing,
}

/// The round's projects, by index.
struct Projects {
    list: Vec<ProjectRow>,
    by_name: HashMap<String, ProjectIx>,
    quotas: Vec<db::QuotaRow>,
    /// Every reservation (their owners are among the projects).
    reservations: Vec<db::ReservationRow>,
    /// The projects with requests in the round.
    asking: BTreeSet<String>,
}

impl Projects {
    /// Requesting projects, every project with settings or a quota, and
    /// reservation owners (all ancestors have settings, so are included).
    async fn load(conn: &mut PgConnection, items: &[AdmissionItem]) -> Result<Self> {
        let settings = db::all_fairness(conn).await?;
        let quotas = db::all_quotas(conn).await?;
        let reservations = db::all_reservations(conn).await?;
        let asking: BTreeSet<String> = items.iter().map(|i| i.project_id.clone()).collect();
        let mut names = asking.clone();
        names.extend(settings.iter().map(|s| s.project_id.clone()));
        names.extend(settings.iter().filter_map(|s| s.parent_project_id.clone()));
        names.extend(quotas.iter().map(|q| q.project_id.clone()));
        names.extend(reservations.iter().map(|o| o.project_external_id.clone()));
        let names: Vec<String> = names.into_iter().collect();
        let ids = crate::db::consumers::ensure_projects(conn, &names).await?;
        let mut list = Vec::with_capacity(names.len());
        for name in names {
            let id = ids[&name];
            let s = settings.iter().find(|s| s.project_id == name);
            list.push(ProjectRow {
                parent: s.and_then(|s| s.parent_project_id.clone()),
                weight: s.map_or(1.0, |s| s.weight),
                count: s.map_or(0, |s| s.allocation_count),
                queueing: s
                    .and_then(|s| Queueing::named(&s.queueing))
                    .unwrap_or_default(),
                name,
                id,
            });
        }
        let by_name = list
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        Ok(Projects {
            list,
            by_name,
            quotas,
            reservations,
            asking,
        })
    }

    fn parent(&self, p: ProjectIx) -> Option<ProjectIx> {
        self.list[p]
            .parent
            .as_ref()
            .and_then(|n| self.by_name.get(n).copied())
    }

    /// `p` and its ancestors.
    fn lineage(&self, p: ProjectIx) -> Vec<ProjectIx> {
        let mut out = vec![p];
        while let Some(a) = self.parent(*out.last().unwrap_or(&p)) {
            if out.contains(&a) {
                break;
            }
            out.push(a);
        }
        out
    }

    /// The projects whose allocations the DRF sorter compares: those of
    /// every tree with a project asking in the round (a parent's share
    /// sums its subtree's). A project of another tree never competes, so
    /// its allocations are not read (every project that ever had an
    /// admission has settings, so is in the round's list).
    fn compared(&self) -> Vec<i32> {
        let root = |p: ProjectIx| self.lineage(p).last().copied().unwrap_or(p);
        let trees: BTreeSet<ProjectIx> = self
            .asking
            .iter()
            .filter_map(|name| self.by_name.get(name))
            .map(|&p| root(p))
            .collect();
        (0..self.list.len())
            .filter(|&p| trees.contains(&root(p)))
            .map(|p| self.list[p].id)
            .collect()
    }

    /// The sched projects: allocations, consumption, limits, guarantees.
    async fn holdings(
        &self,
        conn: &mut PgConnection,
        classes: &[String],
        class_ix: &HashMap<&str, Class>,
        class_of_id: &HashMap<i32, Class>,
    ) -> Result<Vec<round::Project>> {
        let n = classes.len();
        let ids: Vec<i32> = self.list.iter().map(|p| p.id).collect();
        // Consumption counts only against a limit or a guarantee: read it
        // for the projects that have either (a round over a large cloud
        // would otherwise sum every project's allocations).
        let quoted: BTreeSet<&str> = self.quotas.iter().map(|q| q.project_id.as_str()).collect();
        let with_quota: Vec<i32> = self
            .list
            .iter()
            .filter(|p| quoted.contains(p.name.as_str()))
            .map(|p| p.id)
            .collect();
        let consumed = db::consumption(conn, &with_quota, None).await?;
        let allocated = db::project_allocations(conn, &self.compared()).await?;
        let mut out: Vec<round::Project> = self
            .list
            .iter()
            .enumerate()
            .map(|(i, p)| round::Project {
                name: p.name.clone(),
                parent: self.parent(i),
                weight: p.weight,
                allocation_count: u64::try_from(p.count).unwrap_or(0),
                allocated: vec![0; n],
                consumed: vec![0; n],
                limits: vec![None; n],
                guarantees: vec![0; n],
                lending_limits: vec![0; n],
                queueing: p.queueing,
            })
            .collect();
        let ix_of_id: HashMap<i32, ProjectIx> =
            ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        for ((pid, cid), units) in consumed {
            let (Some(&p), Some(c)) = (ix_of_id.get(&pid), class_of_id.get(&cid)) else {
                continue;
            };
            out[p].consumed[*c] = units;
        }
        for (project, cid, units) in allocated {
            let (Some(&p), Some(c)) = (self.by_name.get(&project), class_of_id.get(&cid)) else {
                continue;
            };
            out[p].allocated[*c] = units;
        }
        for q in &self.quotas {
            let (Some(&p), Some(&c)) = (
                self.by_name.get(&q.project_id),
                class_ix.get(q.resource_class.as_str()),
            ) else {
                continue;
            };
            out[p].limits[c] = q.limit;
            if out[p].parent.is_none() {
                out[p].guarantees[c] = q.guarantee.unwrap_or(0);
                out[p].lending_limits[c] = q.lending_limit.unwrap_or(0);
            }
        }
        Ok(out)
    }
}

/// Each reservation with its unused part: amount − what the owner's
/// subtree allocated on that inventory.
async fn reservations(
    conn: &mut PgConnection,
    providers: &mut [round::Provider],
    projects: &mut Projects,
    ix_of_id: &HashMap<i64, ProviderIx>,
    class_of_id: &HashMap<i32, Class>,
) -> Result<()> {
    let rows = std::mem::take(&mut projects.reservations);
    if rows.is_empty() {
        return Ok(());
    }
    let mut on: Vec<i64> = rows.iter().map(|r| r.rp_id).collect();
    on.dedup();
    let used = db::project_allocations_on(conn, &on).await?;
    for row in rows {
        let (rp, class, amount) = (row.rp_id, row.class_id, row.amount);
        let (Some(&p), Some(c), Some(&o)) = (
            ix_of_id.get(&rp),
            class_of_id.get(&class).copied(),
            projects.by_name.get(&row.project_external_id),
        ) else {
            continue;
        };
        let by_subtree: i64 = used
            .iter()
            .filter(|(proj, r, rc, _)| {
                *r == rp
                    && *rc == class
                    && projects
                        .by_name
                        .get(proj)
                        .is_some_and(|&x| projects.lineage(x).contains(&o))
            })
            .map(|u| u.3)
            .sum();
        providers[p].reservations.push(round::Reservation {
            owner: o,
            class: c,
            unused: (i64::from(amount) - by_subtree).max(0),
        });
    }
    Ok(())
}

/// A request's provider filter: (required traits, member_of).
type FilterKey = (Vec<String>, Vec<Uuid>);

/// The requests as round requests; 400 for unknown classes or traits.
async fn requests(
    conn: &mut PgConnection,
    items: &[AdmissionItem],
    projects: &Projects,
    class_ix: &HashMap<&str, Class>,
    pool: OrderedProviders<'_>,
) -> Result<Vec<round::Request>> {
    let filter = Eligibility::new(conn, items, pool).await?;
    let mut cache: HashMap<FilterKey, Arc<[ProviderIx]>> = HashMap::new();
    let mut gangs: HashMap<Uuid, usize> = HashMap::new();
    items
        .iter()
        .map(|item| {
            let resources = item
                .resources
                .iter()
                .map(|(c, n)| {
                    class_ix
                        .get(c.as_str())
                        .map(|&ix| (ix, *n))
                        .ok_or_else(|| Error::invalid(format!("No such resource class {c}.")))
                })
                .collect::<Result<Vec<_>>>()?;
            let allowed = if item.required.is_empty() && item.member_of.is_empty() {
                None
            } else {
                let key = (item.required.clone(), item.member_of.clone());
                Some(
                    cache
                        .entry(key)
                        .or_insert_with(|| filter.allowed(item))
                        .clone(),
                )
            };
            Ok(round::Request {
                project: projects.by_name[&item.project_id],
                user: item.user_id.clone(),
                resources,
                allowed,
                precedence: round::Precedence {
                    class: item.priority_class.unwrap_or(PriorityClass::Prod).code(),
                    priority: item.priority.unwrap_or(0),
                },
                gang: item.gang.map(|g| {
                    let next = gangs.len();
                    *gangs.entry(g).or_insert(next)
                }),
            })
        })
        .collect()
}

/// Active decline filters as round filters (unknown classes never match).
async fn declines(
    conn: &mut PgConnection,
    projects: &Projects,
    ix_of_id: &HashMap<i64, ProviderIx>,
    class_ix: &HashMap<&str, Class>,
) -> Result<Vec<round::Decline>> {
    let rows = db::active_declines(conn).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let refused: HashMap<String, i64> = serde_json::from_value(row.resources).ok()?;
            Some(round::Decline {
                project: *projects.by_name.get(&row.project)?,
                user: row.user_id,
                provider: *ix_of_id.get(&row.rp_id)?,
                refused: refused
                    .iter()
                    .filter_map(|(c, n)| class_ix.get(c.as_str()).map(|&ix| (ix, *n)))
                    .collect(),
            })
        })
        .collect())
}
