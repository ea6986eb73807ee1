//! The claim and the detailed path agree, on real PostgreSQL.
//!
//! The allocation write has two paths: `placement_claim` (one SQL function,
//! `src/db/definitions.sql`) for new consumers, and the detailed Rust path
//! (`db::allocations::write`) for everything, with Placement's errors. Each
//! states the rules (units, capacity, inventory, owners, quotas,
//! reservations, priority classes) in its own language. This test drives
//! random writes over random worlds through both, each case in one
//! transaction rolled back, and requires:
//!
//! - the claim never fails with an error (it refuses by writing nothing);
//! - when it writes, the detailed path accepts the same write and leaves
//!   the same stored rows: allocations in order, consumers, per-project
//!   totals, the change log, provider generations, owners;
//! - when it writes nothing although no rule it leaves to the detailed
//!   path by design may apply (owners to create, an existing consumer, a
//!   limit on the project or an ancestor, a reservation on a provider, a
//!   low-priority consumer), the detailed path refuses too;
//! - outside that domain it writes nothing, and the detailed path refuses
//!   every write that breaks a limit, a reservation or a priority class
//!   by this test's own reckoning (`Case::breaks`).
//!
//! A rule added to, or removed from, one path only fails it. The SQL side
//! is mutation-checked here: each mutation of the function's text (a rule
//! removed, the capacity formula or the logged totals changed) is applied
//! to the test's database and must be caught. So is the Rust side: the
//! detailed path run with each declared rule's check taken out in turn
//! (`allocations::write_checking` with `Checked::without`) must be caught
//! too.
//!
//! `CLAIM_AGREES_CASES` sets the number of cases (default 400); the seed
//! of a failing case is printed, and `CLAIM_AGREES_SEED` replays it.

use indexmap::IndexMap;
use placement::db::allocations;
use placement::db::allocations::rules::{Checked, InClaim, WriteRule, WRITE_RULES};
use placement::db::definitions;
use placement::types::{ConsumerWrite, GenerationCheck};
use placement_testkit::common::{drop_database, fresh_database, url_with_db};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

const CLASSES: [&str; 5] = [
    "VCPU",
    "MEMORY_MB",
    "DISK_GB",
    "CUSTOM_GPU",
    "BATCH_VCPU_MILLI",
];
const RATIOS: [f64; 6] = [0.5, 1.0, 1.0, 1.5, 2.0, 16.0];

/// One random world and one random write over it.
#[derive(Debug)]
struct Case {
    providers: Vec<Provider>,
    /// Projects and users that exist before the write (besides the old
    /// consumers' owners).
    projects: Vec<&'static str>,
    users: Vec<&'static str>,
    instance_type: bool,
    /// (project, parent).
    parents: Vec<(&'static str, &'static str)>,
    /// (project, class, limit).
    limits: Vec<(&'static str, &'static str, i64)>,
    /// (provider index, class, project, amount).
    reservations: Vec<(usize, &'static str, &'static str, i32)>,
    /// Consumers of the writes marked batch (low priority).
    low: Vec<Uuid>,
    writes: Vec<ConsumerWrite>,
}

#[derive(Debug)]
struct Provider {
    uuid: Uuid,
    /// class → (total, reserved, min, max, step, ratio), and what an old
    /// consumer uses of it.
    inventories: Vec<(&'static str, [i32; 5], f64, i32)>,
}

fn pick<T: Copy>(rng: &mut StdRng, from: &[T]) -> T {
    from[rng.gen_range(0..from.len())]
}

fn world(rng: &mut StdRng) -> Case {
    let mut providers = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        let mut inventories = Vec::new();
        for class in CLASSES {
            if !rng.gen_bool(0.7) {
                continue;
            }
            let total = rng.gen_range(1..=24);
            let reserved = if rng.gen_bool(0.3) {
                rng.gen_range(0..=total)
            } else {
                0
            };
            let min = rng.gen_range(1..=2);
            let max = rng.gen_range(min..=total + 2);
            let step = pick(rng, &[1, 1, 2, 3]);
            let used = if rng.gen_bool(0.4) {
                rng.gen_range(1..=total / 2 + 1)
            } else {
                0
            };
            inventories.push((
                class,
                [total, reserved, min, max, step],
                pick(rng, &RATIOS),
                used,
            ));
        }
        providers.push(Provider {
            uuid: Uuid::from_u128(rng.gen()),
            inventories,
        });
    }
    let projects: Vec<&'static str> = ["pa", "pb"]
        .into_iter()
        .filter(|_| rng.gen_bool(0.85))
        .collect();
    let users: Vec<&'static str> = ["ua", "ub"]
        .into_iter()
        .filter(|_| rng.gen_bool(0.85))
        .collect();
    let mut parents = Vec::new();
    if projects.contains(&"pa") && rng.gen_bool(0.2) {
        parents.push(("pa", "pp"));
    }
    let mut limits = Vec::new();
    if rng.gen_bool(0.3) {
        limits.push((
            pick(rng, &["pa", "pb", "pp"]),
            pick(rng, &CLASSES),
            rng.gen_range(0..=20),
        ));
    }
    let mut reservations = Vec::new();
    if rng.gen_bool(0.2) {
        let i = rng.gen_range(0..providers.len());
        if let Some(&(class, [total, ..], ..)) = providers[i].inventories.first() {
            reservations.push((i, class, pick(rng, &["pa", "pb"]), rng.gen_range(1..=total)));
        }
    }
    let mut low = Vec::new();
    // A consumer with allocations before the write (see `set_up`): the
    // first write sometimes names one, with the generation `null`, which
    // both paths refuse (the claim takes new consumers only).
    let old_consumer = providers
        .iter()
        .find(|p| p.inventories.iter().any(|inv| inv.3 > 0))
        .map(|p| Uuid::from_u128(!p.uuid.as_u128()));
    let writes = (0..pick(rng, &[1, 1, 2, 2, 3]))
        .map(|n| {
            let reused = match old_consumer {
                Some(old) if n == 0 && rng.gen_bool(0.05) => Some(old),
                _ => None,
            };
            let consumer = reused.unwrap_or_else(|| Uuid::from_u128(rng.gen()));
            if rng.gen_bool(0.1) {
                low.push(consumer);
            }
            let mut claims: IndexMap<Uuid, IndexMap<String, i64>> = IndexMap::new();
            for _ in 0..rng.gen_range(1..=2) {
                let provider = &providers[rng.gen_range(0..providers.len())];
                let rp = if rng.gen_bool(0.02) {
                    Uuid::from_u128(rng.gen())
                } else {
                    provider.uuid
                };
                let classes = claims.entry(rp).or_default();
                for _ in 0..rng.gen_range(1..=2) {
                    // Mostly an amount its inventory's units allow, so that
                    // capacity, limits and the rest decide.
                    let stocked: Vec<_> = provider
                        .inventories
                        .iter()
                        .filter(|inv| inv.0 != "BATCH_VCPU_MILLI")
                        .collect();
                    let stocked = match stocked.len() {
                        0 => None,
                        n => Some(stocked[rng.gen_range(0..n)]),
                    };
                    let (class, amount) = match stocked {
                        Some((class, [_, _, min, max, step], ..)) if rng.gen_bool(0.92) => {
                            let first = (min + step - 1) / step * step;
                            let last = max / step * step;
                            let amount = if first <= last {
                                let steps = (last - first) / step;
                                let steps = if rng.gen_bool(0.6) {
                                    steps.min(1)
                                } else {
                                    steps
                                };
                                first + step * rng.gen_range(0..=steps)
                            } else {
                                *min
                            };
                            (*class, i64::from(amount))
                        }
                        _ if rng.gen_bool(0.1) => ("CUSTOM_NOPE", rng.gen_range(1..=12)),
                        _ => (pick(rng, &CLASSES[..4]), rng.gen_range(1..=12)),
                    };
                    classes.insert(class.to_string(), amount);
                }
            }
            ConsumerWrite {
                consumer,
                project_id: pick(rng, &["pa", "pa", "pb"]).to_string(),
                user_id: pick(rng, &["ua", "ua", "ub"]).to_string(),
                consumer_type: pick(rng, &[None, None, Some("INSTANCE")]).map(str::to_string),
                generation: if reused.is_some() || rng.gen_bool(0.5) {
                    GenerationCheck::New
                } else {
                    GenerationCheck::None
                },
                allocations: claims,
                unparsed_provider: None,
            }
        })
        .collect();
    Case {
        providers,
        projects,
        users,
        instance_type: rng.gen_bool(0.7),
        parents,
        limits,
        reservations,
        low,
        writes,
    }
}

impl Case {
    /// Whether the claim leaves this write to the detailed path by design,
    /// whatever the capacities: it checks these rules nowhere itself.
    fn left_to_detailed_path(&self) -> bool {
        let owners_missing = self.writes.iter().any(|w| {
            !self.projects.contains(&w.project_id.as_str())
                || !self.users.contains(&w.user_id.as_str())
                || (w.consumer_type.is_some() && !self.instance_type)
        });
        let limited = self.writes.iter().any(|w| {
            let mut chain = vec![w.project_id.as_str()];
            chain.extend(
                self.parents
                    .iter()
                    .filter(|(p, _)| *p == w.project_id)
                    .map(|(_, parent)| *parent),
            );
            self.limits.iter().any(|(p, class, _)| {
                chain.contains(p)
                    && self.projects_known().contains(p)
                    && w.allocations.values().any(|c| c.contains_key(*class))
            })
        });
        let reserved = self.reservations.iter().any(|(i, _, project, _)| {
            let rp = self.providers[*i].uuid;
            self.projects_known().contains(project)
                && self.writes.iter().any(|w| w.allocations.contains_key(&rp))
        });
        owners_missing || limited || reserved || !self.low.is_empty()
    }

    /// A rule only the detailed path checks that this write breaks, by
    /// this test's own reckoning (the claim leaves these cases to the
    /// detailed path, so only an oracle can tell that path forgot one).
    /// Projects other than "old" consume nothing before the write.
    fn breaks(&self) -> Option<String> {
        let batch_ok = |class: &str| class == "DISK_GB" || class.starts_with("BATCH_");
        for w in self
            .writes
            .iter()
            .filter(|w| self.low.contains(&w.consumer))
        {
            if let Some(class) = w
                .allocations
                .values()
                .flat_map(|c| c.keys())
                .find(|c| !batch_ok(c))
            {
                return Some(format!(
                    "low-priority consumer {} allocates {class}",
                    w.consumer
                ));
            }
        }
        let known = self.projects_known();
        for (limited, class, limit) in self.limits.iter().filter(|l| known.contains(&l.0)) {
            let under = |project: &str| {
                project == *limited
                    || self
                        .parents
                        .iter()
                        .any(|(p, parent)| *p == project && parent == limited)
            };
            let after: i64 = self
                .writes
                .iter()
                .filter(|w| under(&w.project_id))
                .flat_map(|w| w.allocations.values())
                .filter_map(|c| c.get(*class))
                .sum();
            if after > *limit {
                return Some(format!(
                    "{limited}'s limit of {limit} {class} (it would consume {after})"
                ));
            }
        }
        for (i, class, owner, amount) in self.reservations.iter().filter(|r| known.contains(&r.2)) {
            let p = &self.providers[*i];
            let Some((_, [total, reserved, ..], ratio, old)) =
                p.inventories.iter().find(|inv| inv.0 == *class)
            else {
                continue;
            };
            let taken = |mine: bool| -> i64 {
                self.writes
                    .iter()
                    .filter(|w| (w.project_id == *owner) == mine)
                    .filter_map(|w| w.allocations.get(&p.uuid).and_then(|c| c.get(*class)))
                    .sum()
            };
            let (own, others) = (taken(true), taken(false));
            let before = i64::from(*old) + i64::from(*amount);
            let after = i64::from(*old) + own + others + (i64::from(*amount) - own).max(0);
            let capacity = f64::from(total - reserved) * ratio;
            if after as f64 > capacity && after > before {
                return Some(format!("{owner}'s reservation of {amount} {class}"));
            }
        }
        None
    }

    /// Every project that exists before the write.
    fn projects_known(&self) -> Vec<&'static str> {
        let mut known = self.projects.clone();
        known.extend(self.parents.iter().map(|(_, parent)| *parent));
        known.push("old");
        known
    }

    /// Writes the world (the write itself is the paths' to make).
    async fn set_up(&self, conn: &mut PgConnection) {
        for class in CLASSES {
            sqlx::query(
                "INSERT INTO resource_classes (id, name)
                 SELECT nextval('custom_resource_class_id_seq'), $1
                  WHERE NOT EXISTS (SELECT 1 FROM resource_classes WHERE name = $1)",
            )
            .bind(class)
            .execute(&mut *conn)
            .await
            .expect("class");
        }
        for p in self.projects_known() {
            sqlx::query("INSERT INTO projects (external_id) VALUES ($1)")
                .bind(p)
                .execute(&mut *conn)
                .await
                .expect("project");
        }
        for u in self.users.iter().chain(&["old"]) {
            sqlx::query("INSERT INTO users (external_id) VALUES ($1)")
                .bind(u)
                .execute(&mut *conn)
                .await
                .expect("user");
        }
        if self.instance_type {
            sqlx::query("INSERT INTO consumer_types (name) VALUES ('INSTANCE')")
                .execute(&mut *conn)
                .await
                .expect("consumer type");
        }
        for (project, parent) in &self.parents {
            sqlx::query(
                "INSERT INTO project_fairness (project_id, parent_project_id)
                 SELECT (SELECT id FROM projects WHERE external_id = $1),
                        (SELECT id FROM projects WHERE external_id = $2)",
            )
            .bind(project)
            .bind(parent)
            .execute(&mut *conn)
            .await
            .expect("parent");
        }
        for (i, p) in self.providers.iter().enumerate() {
            sqlx::query(
                "INSERT INTO resource_providers (id, uuid, name, root_provider_id)
                 SELECT n, $1, $2, n FROM nextval('resource_providers_id_seq') AS n",
            )
            .bind(p.uuid)
            .bind(format!("rp{i}"))
            .execute(&mut *conn)
            .await
            .expect("provider");
            let old = Uuid::from_u128(!p.uuid.as_u128());
            for (class, [total, reserved, min, max, step], ratio, used) in &p.inventories {
                sqlx::query(
                    "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved,
                                              min_unit, max_unit, step_size, allocation_ratio)
                     SELECT rp.id, rc.id, $3, $4, $5, $6, $7, $8
                       FROM resource_providers rp, resource_classes rc
                      WHERE rp.uuid = $1 AND rc.name = $2",
                )
                .bind(p.uuid)
                .bind(class)
                .bind(total)
                .bind(reserved)
                .bind(min)
                .bind(max)
                .bind(step)
                .bind(ratio)
                .execute(&mut *conn)
                .await
                .expect("inventory");
                if *used > 0 {
                    sqlx::query(
                        "WITH c AS (
                           INSERT INTO consumers (uuid, project_id, user_id, generation)
                           SELECT $1, (SELECT id FROM projects WHERE external_id = 'old'),
                                  (SELECT id FROM users WHERE external_id = 'old'), 1
                           ON CONFLICT (uuid) DO UPDATE SET generation = 1
                           RETURNING id)
                         INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
                         SELECT rp.id, c.id, rc.id, $4 FROM c, resource_providers rp, resource_classes rc
                          WHERE rp.uuid = $2 AND rc.name = $3",
                    )
                    .bind(old)
                    .bind(p.uuid)
                    .bind(class)
                    .bind(used)
                    .execute(&mut *conn)
                    .await
                    .expect("old usage");
                }
            }
        }
        for (project, class, limit) in &self.limits {
            sqlx::query(
                "INSERT INTO project_quotas (project_id, resource_class_id, \"limit\")
                 SELECT p.id, rc.id, $3 FROM projects p, resource_classes rc
                  WHERE p.external_id = $1 AND rc.name = $2",
            )
            .bind(project)
            .bind(class)
            .bind(limit)
            .execute(&mut *conn)
            .await
            .expect("limit");
        }
        for (i, class, project, amount) in &self.reservations {
            sqlx::query(
                "INSERT INTO project_reservations (resource_provider_id, resource_class_id, project_id, amount)
                 SELECT rp.id, rc.id, p.id, $4 FROM resource_providers rp, resource_classes rc, projects p
                  WHERE rp.uuid = $1 AND rc.name = $2 AND p.external_id = $3",
            )
            .bind(self.providers[*i].uuid)
            .bind(class)
            .bind(project)
            .bind(amount)
            .execute(&mut *conn)
            .await
            .expect("reservation");
        }
        for consumer in &self.low {
            sqlx::query(
                "INSERT INTO consumer_priorities (consumer_uuid, priority_class) VALUES ($1, 2)",
            )
            .bind(consumer)
            .execute(&mut *conn)
            .await
            .expect("priority");
        }
    }
}

/// What a write leaves stored, as text rows (ids left out: sequences are
/// not rolled back with a savepoint).
async fn stored(conn: &mut PgConnection) -> Vec<String> {
    const READS: [&str; 6] = [
        "SELECT format('allocation %s %s %s %s', rp.uuid, c.uuid, rc.name, a.used)
           FROM allocations a JOIN resource_providers rp ON rp.id = a.resource_provider_id
           JOIN consumers c ON c.id = a.consumer_id JOIN resource_classes rc ON rc.id = a.resource_class_id
          ORDER BY a.id",
        "SELECT format('consumer %s %s %s %s %s', c.uuid, p.external_id, u.external_id, t.name, c.generation)
           FROM consumers c JOIN projects p ON p.id = c.project_id JOIN users u ON u.id = c.user_id
           LEFT JOIN consumer_types t ON t.id = c.consumer_type_id ORDER BY c.uuid",
        "SELECT format('total %s %s %s %s', p.external_id, rp.uuid, rc.name, pa.used)
           FROM project_allocations pa JOIN projects p ON p.id = pa.project_id
           JOIN resource_providers rp ON rp.id = pa.resource_provider_id
           JOIN resource_classes rc ON rc.id = pa.resource_class_id ORDER BY 1",
        "SELECT format('log %s %s %s %s', rp.uuid, l.structural, l.class_id, l.used_delta)
           FROM change_log l LEFT JOIN resource_providers rp ON rp.id = l.provider_id ORDER BY 1",
        "SELECT format('provider %s %s', uuid, generation) FROM resource_providers ORDER BY uuid",
        "SELECT format('owner %s', external_id) FROM projects
         UNION ALL SELECT format('user %s', external_id) FROM users
         UNION ALL SELECT format('type %s', name) FROM consumer_types ORDER BY 1",
    ];
    let mut rows = Vec::new();
    for read in READS {
        let some: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(read))
            .fetch_all(&mut *conn)
            .await
            .expect("read stored rows");
        rows.extend(some);
    }
    rows
}

/// How the two paths disagreed on one case (Err), or the rule the
/// detailed path refused it by (None: it wrote).
async fn disagreement(
    conn: &mut PgConnection,
    case: &Case,
    checked: Checked,
) -> Result<Option<WriteRule>, String> {
    match paths(conn, case, checked).await {
        (Some(why), _) => Err(why),
        (None, refused) => Ok(refused),
    }
}

/// Both paths on one case: how they disagreed, if they did, and the rule
/// the detailed path refused it by.
async fn paths(
    conn: &mut PgConnection,
    case: &Case,
    checked: Checked,
) -> (Option<String>, Option<WriteRule>) {
    let mut tx = conn.begin().await.expect("begin");
    case.set_up(&mut tx).await;
    sqlx::query("SAVEPOINT paths")
        .execute(&mut *tx)
        .await
        .expect("savepoint");
    let before = stored(&mut tx).await;
    let claimed = match allocations::claim(&mut tx, &case.writes).await {
        Ok(claimed) => claimed,
        Err(e) => return (Some(format!("the claim failed: {e}")), None),
    };
    let after_claim = stored(&mut tx).await;
    if !claimed && after_claim != before {
        return (Some("the claim refused and still wrote".into()), None);
    }
    sqlx::query("ROLLBACK TO SAVEPOINT paths")
        .execute(&mut *tx)
        .await
        .expect("rollback to savepoint");
    let detailed = allocations::write_checking(&mut tx, &case.writes, checked).await;
    if let Err(allocations::AllocError::Db(e)) = &detailed {
        return (Some(format!("the detailed path failed: {e}")), None);
    }
    let refused = detailed.as_ref().err().and_then(WriteRule::of);
    let after_detailed = stored(&mut tx).await;
    tx.rollback().await.expect("rollback");
    let by_design = case.left_to_detailed_path();
    if let (Some(rule), Ok(_)) = (case.breaks(), &detailed) {
        return (
            Some(format!(
                "the detailed path accepted a write that breaks {rule}"
            )),
            refused,
        );
    }
    let why = match (claimed, &detailed) {
        (true, Err(e)) => Some(format!("the claim wrote; the detailed path refused: {e}")),
        (true, Ok(_)) if by_design => {
            Some("the claim wrote a write it leaves to the detailed path".into())
        }
        (true, Ok(_)) if after_claim != after_detailed => Some(format!(
            "both wrote, different rows:\n  claim only: {:?}\n  detailed only: {:?}",
            after_claim
                .iter()
                .filter(|r| !after_detailed.contains(r))
                .collect::<Vec<_>>(),
            after_detailed
                .iter()
                .filter(|r| !after_claim.contains(r))
                .collect::<Vec<_>>(),
        )),
        (false, Ok(_)) if !by_design => {
            Some("the claim refused a write the detailed path accepted".into())
        }
        _ => None,
    };
    (why, refused)
}

struct Db {
    admin_url: String,
    name: String,
}

impl Drop for Db {
    fn drop(&mut self) {
        drop_database(&self.admin_url, &self.name);
    }
}

async fn database() -> (Db, PgConnection) {
    let (admin_url, name) = fresh_database().await;
    let url = url_with_db(&admin_url, &name);
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    placement::db::prepare(&pool).await.expect("prepare");
    pool.close().await;
    let conn = PgConnection::connect(&url).await.expect("connect");
    (Db { admin_url, name }, conn)
}

fn cases() -> u64 {
    std::env::var("CLAIM_AGREES_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

/// Runs cases from `first_seed` until one disagrees; counts what the claim
/// did with the cases it could take.
async fn run(
    conn: &mut PgConnection,
    seeds: impl Iterator<Item = u64>,
    checked: Checked,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    for seed in seeds {
        let case = world(&mut StdRng::seed_from_u64(seed));
        if !case.writes.iter().all(allocations::claimable) {
            continue;
        }
        match disagreement(conn, &case, checked).await {
            Err(why) => return Err(format!("seed {seed}: {why}\n{case:#?}")),
            Ok(Some(rule)) => *tally.refused_by.entry(rule).or_default() += 1,
            Ok(None) => {}
        }
        tally.cases += 1;
        tally.by_design += u64::from(case.left_to_detailed_path());
    }
    Ok(tally)
}

#[derive(Default, Debug)]
struct Tally {
    cases: u64,
    by_design: u64,
    /// The detailed path's refusals, by rule.
    refused_by: std::collections::BTreeMap<WriteRule, u64>,
}

#[tokio::test]
async fn the_claim_and_the_detailed_path_agree() {
    let (_db, mut conn) = database().await;
    let seeds: Box<dyn Iterator<Item = u64>> = match std::env::var("CLAIM_AGREES_SEED") {
        Ok(seed) => Box::new(std::iter::once(seed.parse().expect("a seed"))),
        Err(_) => Box::new(0..cases()),
    };
    let one_seed = std::env::var("CLAIM_AGREES_SEED").is_ok();
    match run(&mut conn, seeds, Checked::ALL).await {
        Ok(t) => {
            println!(
                "claim agrees: {} cases, {} in the claim's domain, {} left to the detailed path; refused by {:?}",
                t.cases,
                t.cases - t.by_design,
                t.by_design,
                t.refused_by
            );
            // Every declared rule the claim can meet was met: a rule
            // declared without cases that break it fails here.
            let unmet: Vec<&str> = WRITE_RULES
                .iter()
                .filter(|r| r.in_claim() != InClaim::CannotArise)
                .filter(|r| !t.refused_by.contains_key(r))
                .map(|r| r.name())
                .collect();
            assert!(
                one_seed || unmet.is_empty(),
                "no case broke these declared rules: {unmet:?}"
            );
        }
        Err(why) => panic!("{why}"),
    }
}

/// Each rule taken out of the claim's text, or a value it writes changed,
/// is caught by the cases above: the test can fail.
#[tokio::test]
async fn every_mutation_of_the_claim_is_caught() {
    const MUTATIONS: [(&str, &str, &str); 10] = [
        ("units unchecked", "OR off_units", "OR false"),
        (
            "capacity unchecked",
            "OR (used + n)::float8 > placement_capacity(total, reserved, allocation_ratio)",
            "OR false",
        ),
        ("missing inventory unchecked", "WHERE total IS NULL", "WHERE false"),
        ("reservations unchecked", "OR reserved_for", "OR false"),
        ("low priority unchecked", "OR low)", "OR false)"),
        // Unknown providers and classes have no inventory either: taking
        // their own check out leaves `inventory_exists` refusing them, an
        // equivalent mutation, so it is not among these.
        ("consumer existence unchecked", "OR existing", "OR false"),
        ("limits unchecked", "AND q.\"limit\" IS NOT NULL", "AND false"),
        (
            "reserved left out of capacity",
            "SELECT (total - reserved)::float8 * allocation_ratio",
            "SELECT total::float8 * allocation_ratio",
        ),
        (
            "the recorded units doubled",
            "array_agg(o.project_id), array_agg(r.used)) AS done",
            "array_agg(o.project_id), array_agg(2 * r.used)) AS done",
        ),
        (
            "recorded when refused",
            "FROM claimed r JOIN owners o ON o.uuid = r.consumer\n             WHERE (SELECT ok FROM ok)),",
            "FROM claimed r JOIN owners o ON o.uuid = r.consumer),",
        ),
    ];
    let (_db, mut conn) = database().await;
    let mut missed = Vec::new();
    for (name, from, to) in MUTATIONS {
        if std::env::var("CLAIM_AGREES_MUTATION").is_ok_and(|m| m != name) {
            continue;
        }
        assert_eq!(
            definitions::TEXT.matches(from).count(),
            1,
            "the mutation '{name}' no longer matches src/db/definitions.sql once: update it"
        );
        let mutated = definitions::TEXT.replace(from, to);
        sqlx::raw_sql(sqlx::AssertSqlSafe(mutated))
            .execute(&mut conn)
            .await
            .expect("the mutated definitions apply");
        let caught = run(&mut conn, 0..cases(), Checked::ALL).await;
        match caught {
            Err(why) => println!(
                "mutation '{name}': caught ({})",
                why.lines().next().unwrap_or("")
            ),
            Ok(_) => missed.push(name),
        }
    }
    sqlx::raw_sql(definitions::TEXT)
        .execute(&mut conn)
        .await
        .expect("the definitions apply again");
    assert!(missed.is_empty(), "mutations not caught: {missed:?}");
}

/// `placement_capacity` (SQL) and `types::capacity` (Rust) are one formula.
#[tokio::test]
async fn capacity_is_one_formula() {
    let (_db, mut conn) = database().await;
    let mut rng = StdRng::seed_from_u64(54);
    let mut values: Vec<(i64, i64, f64)> = vec![
        (0, 0, 1.0),
        (i64::from(i32::MAX), 0, 16.0),
        (i64::from(i32::MAX), i64::from(i32::MAX), 0.0001),
        (7, 3, 0.1),
        (10, 11, 1.5),
    ];
    values.extend((0..500).map(|_| {
        let total = rng.gen_range(0..=i64::from(i32::MAX));
        (
            total,
            rng.gen_range(0..=total),
            rng.gen_range(0.0001..10_000.0),
        )
    }));
    let (totals, reserved, ratios): (Vec<i64>, Vec<i64>, Vec<f64>) = (
        values.iter().map(|v| v.0).collect(),
        values.iter().map(|v| v.1).collect(),
        values.iter().map(|v| v.2).collect(),
    );
    let sql: Vec<f64> = sqlx::query_scalar(
        "SELECT placement_capacity(t, r, a) FROM UNNEST($1::bigint[], $2::bigint[], $3::float8[])
            WITH ORDINALITY AS v(t, r, a, n) ORDER BY n",
    )
    .bind(&totals)
    .bind(&reserved)
    .bind(&ratios)
    .fetch_all(&mut conn)
    .await
    .expect("placement_capacity");
    for ((t, r, a), s) in values.iter().zip(sql) {
        let rust = placement::types::capacity(*t, *r, *a);
        assert_eq!(
            rust.to_bits(),
            s.to_bits(),
            "capacity({t}, {r}, {a}): Rust {rust}, SQL {s}"
        );
    }
}

/// `placement_units_ok` (SQL) and `types::units_ok` (Rust) are one rule,
/// a step size of 0 or less included (no amount is then a multiple).
#[tokio::test]
async fn units_are_one_rule() {
    let (_db, mut conn) = database().await;
    let mut rng = StdRng::seed_from_u64(55);
    let mut values: Vec<[i64; 4]> = vec![
        [0, 0, 0, 0],
        [4, 1, 8, 0],
        [4, 1, 8, -2],
        [4, 1, 8, 2],
        [5, 1, 8, 2],
        [9, 1, 8, 1],
        [0, 1, 8, 1],
        [i64::from(i32::MAX), 1, i64::from(i32::MAX), 1],
    ];
    values.extend((0..500).map(|_| {
        let min = rng.gen_range(-2..20);
        [
            rng.gen_range(-2..100),
            min,
            rng.gen_range(min - 2..120),
            rng.gen_range(-2..12),
        ]
    }));
    let column = |k: usize| values.iter().map(|v| v[k]).collect::<Vec<i64>>();
    let sql: Vec<bool> = sqlx::query_scalar(
        "SELECT placement_units_ok(n, lo, hi, step)
           FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
                WITH ORDINALITY AS v(n, lo, hi, step, k) ORDER BY k",
    )
    .bind(column(0))
    .bind(column(1))
    .bind(column(2))
    .bind(column(3))
    .fetch_all(&mut conn)
    .await
    .expect("placement_units_ok");
    for (&[n, lo, hi, step], s) in values.iter().zip(sql) {
        let rust = placement::types::units_ok(n, lo, hi, step);
        assert_eq!(rust, s, "units_ok({n}, {lo}, {hi}, {step})");
    }
}

/// Every writer of the change log (a function that inserts into it or
/// records usage through `placement_usage_changed`) and every trigger
/// that runs one has its current text in `definitions.sql`: what is logged,
/// and what the claim's trigger skips, is read in one file.
#[tokio::test]
async fn every_change_log_writer_is_in_the_definitions() {
    let (_db, mut conn) = database().await;
    let writers: Vec<String> = sqlx::query_scalar(
        "SELECT proname::text FROM pg_proc
          WHERE pronamespace = 'public'::regnamespace
            AND (prosrc ~* 'insert\\s+into\\s+change_log' OR prosrc ~ 'placement_usage_changed\\(')
          ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .expect("functions");
    assert!(writers.len() >= 6, "writers found: {writers:?}");
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT t.tgname::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
          WHERE NOT t.tgisinternal AND p.proname::text = ANY($1) ORDER BY 1",
    )
    .bind(&writers)
    .fetch_all(&mut conn)
    .await
    .expect("triggers");
    let text = definitions::TEXT;
    let missing: Vec<String> = writers
        .iter()
        .filter(|f| !text.contains(&format!("CREATE OR REPLACE FUNCTION {f}(")))
        .chain(
            triggers
                .iter()
                .filter(|t| !text.contains(&format!("CREATE OR REPLACE TRIGGER {t}"))),
        )
        .cloned()
        .collect();
    assert!(missing.is_empty(), "not in definitions.sql: {missing:?}");
}

/// Each check of the detailed path taken out in turn is caught by the
/// cases above: the paths disagree, the detailed path accepts a write
/// that breaks a rule by this test's reckoning, the rule never refuses a
/// case (which the agreement test requires of every rule), or the write
/// panics past a check that guarded what follows. Bound cores cannot
/// concern a claimable write: their check is caught on a case of its own.
#[tokio::test]
async fn every_check_of_the_detailed_path_is_needed() {
    let (db, conn) = database().await;
    let url = url_with_db(&db.admin_url, &db.name);
    let mut kept = Some(conn);
    let mut missed = Vec::new();
    for &rule in WRITE_RULES
        .iter()
        .filter(|r| r.in_claim() != InClaim::CannotArise)
    {
        let mut conn = match kept.take() {
            Some(conn) => conn,
            None => PgConnection::connect(&url).await.expect("connect"),
        };
        let checked = Checked::without(rule);
        let outcome = tokio::spawn(async move {
            let tally = run(&mut conn, 0..cases(), checked).await;
            (conn, tally)
        })
        .await;
        let caught = match outcome {
            // The connection went with the panicked task.
            Err(_) => "the write panicked".to_string(),
            Ok((conn, tally)) => {
                kept = Some(conn);
                match tally {
                    Err(why) => why.lines().next().unwrap_or("").to_string(),
                    Ok(t) if !t.refused_by.contains_key(&rule) => "it never refused".to_string(),
                    Ok(_) => {
                        missed.push(rule.name());
                        continue;
                    }
                }
            }
        };
        println!("check '{}' taken out: caught ({caught})", rule.name());
    }
    let mut conn = match kept.take() {
        Some(conn) => conn,
        None => PgConnection::connect(&url).await.expect("connect"),
    };
    assert_eq!(
        bound_cores_refused(&mut conn, Checked::ALL).await,
        Some(WriteRule::BoundShares),
        "a bound instance's shares changed"
    );
    match bound_cores_refused(&mut conn, Checked::without(WriteRule::BoundShares)).await {
        Some(WriteRule::BoundShares) => missed.push("bound_shares (not taken out)"),
        other => println!("check 'bound_shares' taken out: caught (refused by {other:?})"),
    }
    assert!(
        missed.is_empty(),
        "checks taken out and not caught: {missed:?}"
    );
}

/// A deployment instance bound to a core (200 CPU shares) whose consumer
/// is then written with 100 shares, in a transaction rolled back: the rule
/// that refused it, if one did.
async fn bound_cores_refused(conn: &mut PgConnection, checked: Checked) -> Option<WriteRule> {
    let mut tx = conn.begin().await.expect("begin");
    let (rp, consumer) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query(
        "WITH class AS (
           INSERT INTO resource_classes (id, name)
           SELECT nextval('custom_resource_class_id_seq'), 'CUSTOM_CPU_SHARES'
            WHERE NOT EXISTS (SELECT 1 FROM resource_classes WHERE name = 'CUSTOM_CPU_SHARES')
           RETURNING id),
         node AS (
           INSERT INTO resource_providers (id, uuid, name, root_provider_id)
           SELECT n, $1, 'bound', n FROM nextval('resource_providers_id_seq') AS n
           RETURNING id)
         INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved,
                                  min_unit, max_unit, step_size, allocation_ratio)
         SELECT node.id, COALESCE((SELECT id FROM class),
                                  (SELECT id FROM resource_classes WHERE name = 'CUSTOM_CPU_SHARES')),
                1000, 0, 1, 1000, 1, 1.0
           FROM node",
    )
    .bind(rp)
    .execute(&mut *tx)
    .await
    .expect("a node");
    let write = |shares: i64, generation: GenerationCheck| ConsumerWrite {
        consumer,
        project_id: "p".into(),
        user_id: "u".into(),
        consumer_type: None,
        generation,
        allocations: IndexMap::from([(
            rp,
            IndexMap::from([("CUSTOM_CPU_SHARES".to_string(), shares)]),
        )]),
        unparsed_provider: None,
    };
    let ids = allocations::write(&mut tx, &[write(200, GenerationCheck::New)])
        .await
        .expect("the instance's allocation");
    sqlx::query(
        "INSERT INTO instances (consumer_id, app, resource_provider_id, cpu, cpu_bind, memory_mb,
                                core_ids, core_shares)
         SELECT $1, 'bound', id, 2, true, 0, '{0}', '{200}' FROM resource_providers WHERE uuid = $2",
    )
    .bind(ids[&consumer])
    .bind(rp)
    .execute(&mut *tx)
    .await
    .expect("the instance");
    let resized = write(100, GenerationCheck::None);
    let refused = allocations::write_checking(&mut tx, &[resized], checked)
        .await
        .err()
        .and_then(|e| WriteRule::of(&e));
    tx.rollback().await.expect("rollback");
    refused
}
