//! Writing an imported Placement database into ours, set-based (one
//! `UNNEST` statement per table), in the caller's transaction, and checking
//! the result against the source before anything is committed.

use super::source::Snapshot;
use crate::db::classes::FIRST_CUSTOM_ID;
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// Why the copy was refused (nothing is committed).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The source holds something ours cannot represent.
    #[error("{0}")]
    Data(String),
    /// After the copy, ours does not say what the source says.
    #[error("verification failed: {0}")]
    Mismatch(String),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What was copied, for the report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub providers: i64,
    pub inventories: i64,
    pub custom_classes: i64,
    pub traits: i64,
    pub aggregates: i64,
    pub provider_aggregates: i64,
    pub provider_traits: i64,
    pub consumers: i64,
    pub incomplete_consumers: i64,
    pub allocations: i64,
}

/// True when ours holds no provider and no consumer.
pub async fn is_empty(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT NOT EXISTS (SELECT 1 FROM resource_providers) AND NOT EXISTS (SELECT 1 FROM consumers)",
    )
    .fetch_one(conn)
    .await
}

fn parse_uuid(text: &str, what: &str) -> Result<Uuid, TargetError> {
    crate::types::parse_uuid_like(text)
        .ok_or_else(|| TargetError::Data(format!("{what} \"{text}\" is not a uuid")))
}

/// Source class id → ours: standard ids are os-resource-classes' index in
/// both; custom classes are matched (or created) by name.
async fn class_map(
    conn: &mut PgConnection,
    s: &Snapshot,
) -> Result<HashMap<i32, i32>, TargetError> {
    let names: Vec<String> = s.classes.iter().map(|(_, n)| n.clone()).collect();
    crate::db::query(
        "INSERT INTO resource_classes (id, name)
         SELECT nextval('custom_resource_class_id_seq'), n FROM UNNEST($1::text[]) n
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&names)
    .execute(&mut *conn)
    .await?;
    let ours: Vec<(i32, String)> = crate::db::query_as("SELECT id, name FROM resource_classes")
        .fetch_all(&mut *conn)
        .await?;
    let by_name: HashMap<&str, i32> = ours.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    let mut map: HashMap<i32, i32> = ours
        .iter()
        .filter(|(i, _)| *i < FIRST_CUSTOM_ID)
        .map(|(i, _)| (*i, *i))
        .collect();
    for (id, name) in &s.classes {
        let ours = by_name
            .get(name.as_str())
            .ok_or_else(|| TargetError::Data(format!("resource class {name} was not created")))?;
        map.insert(*id, *ours);
    }
    Ok(map)
}

/// Source trait id → ours, by name (missing ones created). Into a target
/// where no provider has a trait yet (a first import), the traits take
/// the source's ids, so that the orders that follow them (`GET /traits`,
/// a provider's traits) are the old service's.
async fn trait_map(
    conn: &mut PgConnection,
    s: &Snapshot,
) -> Result<HashMap<i32, i32>, TargetError> {
    let names: Vec<String> = s.traits.iter().map(|(_, n)| n.clone()).collect();
    crate::db::query("INSERT INTO traits (name) SELECT n FROM UNNEST($1::text[]) n ON CONFLICT (name) DO NOTHING")
        .bind(&names)
        .execute(&mut *conn)
        .await?;
    let linked: bool =
        crate::db::query_scalar("SELECT EXISTS (SELECT 1 FROM resource_provider_traits)")
            .fetch_one(&mut *conn)
            .await?;
    if !linked {
        take_source_trait_ids(conn, s).await?;
    }
    let ours: Vec<(i32, String)> =
        crate::db::query_as("SELECT id, name FROM traits WHERE name = ANY($1)")
            .bind(&names)
            .fetch_all(&mut *conn)
            .await?;
    let by_name: HashMap<&str, i32> = ours.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    s.traits
        .iter()
        .map(|(id, name)| {
            by_name
                .get(name.as_str())
                .map(|ours| (*id, *ours))
                .ok_or_else(|| TargetError::Data(format!("trait {name} was not created")))
        })
        .collect()
}

/// Gives every trait the source's id; ours that the source lacks (a newer
/// os-traits) follow its largest, in their own order. Only where nothing
/// refers to a trait id yet: every id is first moved out of the way
/// (negated), then set.
async fn take_source_trait_ids(conn: &mut PgConnection, s: &Snapshot) -> Result<(), TargetError> {
    let (ids, names): (Vec<i32>, Vec<String>) = s.traits.iter().cloned().unzip();
    crate::db::query("UPDATE traits SET id = -id")
        .execute(&mut *conn)
        .await?;
    crate::db::query(
        "WITH source(id, name) AS (SELECT * FROM UNNEST($1::int[], $2::text[])),
              ours(id, name) AS (
                SELECT (SELECT COALESCE(MAX(id), 0) FROM source) + row_number() OVER (ORDER BY -t.id),
                       t.name
                  FROM traits t WHERE t.name <> ALL($2)),
              wanted AS (SELECT id, name FROM source UNION ALL SELECT id, name FROM ours)
         UPDATE traits t SET id = w.id FROM wanted w WHERE w.name = t.name",
    )
    .bind(&ids)
    .bind(&names)
    .execute(&mut *conn)
    .await?;
    crate::db::query(
        "SELECT setval(pg_get_serial_sequence('traits', 'id'), (SELECT MAX(id) FROM traits))",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Providers keep their uuid, name, generation and tree; their ids move
/// by the largest id ours already has. Returns that offset.
async fn providers(conn: &mut PgConnection, s: &Snapshot) -> Result<i64, TargetError> {
    let offset: i64 =
        crate::db::query_scalar("SELECT COALESCE(MAX(id), 0) FROM resource_providers")
            .fetch_one(&mut *conn)
            .await?;
    let mut ids = Vec::new();
    let mut uuids = Vec::new();
    let mut names = Vec::new();
    let mut gens = Vec::new();
    let mut roots = Vec::new();
    let mut parents: Vec<Option<i64>> = Vec::new();
    for p in &s.providers {
        let uuid = parse_uuid(&p.uuid, "provider uuid")?;
        ids.push(i64::from(p.id) + offset);
        uuids.push(uuid);
        // Placement once allowed a provider without a name: its uuid stands in.
        names.push(p.name.clone().unwrap_or_else(|| uuid.to_string()));
        gens.push(p.generation.unwrap_or(0));
        roots.push(i64::from(p.root_provider_id.unwrap_or(p.id)) + offset);
        parents.push(p.parent_provider_id.map(|x| i64::from(x) + offset));
    }
    crate::db::query(
        "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, parent_provider_id)
         SELECT * FROM UNNEST($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::bigint[])",
    )
    .bind(&ids)
    .bind(&uuids)
    .bind(&names)
    .bind(&gens)
    .bind(&roots)
    .bind(&parents)
    .execute(&mut *conn)
    .await
    .map_err(|e| conflict(e, "a provider uuid or name already exists here"))?;
    crate::db::query("SELECT setval('resource_providers_id_seq', GREATEST((SELECT MAX(id) FROM resource_providers), 1))")
        .execute(&mut *conn)
        .await?;
    Ok(offset)
}

fn conflict(e: sqlx::Error, what: &str) -> TargetError {
    match e.as_database_error().and_then(|d| d.code()) {
        Some(code) if code == "23505" => TargetError::Data(format!("{what}: {e}")),
        _ => TargetError::Db(e),
    }
}

async fn inventories(
    conn: &mut PgConnection,
    s: &Snapshot,
    offset: i64,
    classes: &HashMap<i32, i32>,
) -> Result<(), TargetError> {
    let inv = &s.inventories;
    let rps: Vec<i64> = inv
        .iter()
        .map(|i| i64::from(i.resource_provider_id) + offset)
        .collect();
    let ids: Vec<i32> = inv
        .iter()
        .map(|i| class_of(classes, i.resource_class_id))
        .collect::<Result<_, _>>()?;
    let col = |f: fn(&crate::types::Inventory) -> i32| -> Vec<i32> {
        inv.iter().map(|i| f(&i.capacity)).collect()
    };
    let ratios: Vec<f64> = inv.iter().map(|i| i.capacity.allocation_ratio).collect();
    crate::db::query(
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
         SELECT * FROM UNNEST($1::bigint[], $2::int[], $3::int[], $4::int[], $5::int[], $6::int[], $7::int[], $8::float8[])",
    )
    .bind(&rps)
    .bind(&ids)
    .bind(col(|i| i.total))
    .bind(col(|i| i.reserved))
    .bind(col(|i| i.min_unit))
    .bind(col(|i| i.max_unit))
    .bind(col(|i| i.step_size))
    .bind(&ratios)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn class_of(classes: &HashMap<i32, i32>, id: i32) -> Result<i32, TargetError> {
    classes.get(&id).copied().ok_or_else(|| {
        TargetError::Data(format!(
            "resource class id {id} is neither a standard class known here nor a custom one in the source"
        ))
    })
}

/// Aggregates (matched by uuid) and the providers' aggregate and trait links.
async fn links(
    conn: &mut PgConnection,
    s: &Snapshot,
    offset: i64,
    traits: &HashMap<i32, i32>,
) -> Result<(), TargetError> {
    let agg_uuids: Vec<Uuid> = s
        .aggregates
        .iter()
        .map(|(_, u)| parse_uuid(u, "aggregate uuid"))
        .collect::<Result<_, _>>()?;
    let by_source: HashMap<i32, Uuid> = s
        .aggregates
        .iter()
        .map(|(i, _)| *i)
        .zip(agg_uuids.iter().copied())
        .collect();
    crate::db::query("INSERT INTO placement_aggregates (uuid) SELECT u FROM UNNEST($1::uuid[]) u ON CONFLICT (uuid) DO NOTHING")
        .bind(&agg_uuids)
        .execute(&mut *conn)
        .await?;
    let (mut rps, mut aggs) = (Vec::new(), Vec::new());
    for (rp, agg) in &s.provider_aggregates {
        let uuid = by_source
            .get(agg)
            .ok_or_else(|| TargetError::Data(format!("aggregate id {agg} has no row")))?;
        rps.push(i64::from(*rp) + offset);
        aggs.push(*uuid);
    }
    crate::db::query(
        "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id)
         SELECT l.rp, a.id FROM UNNEST($1::bigint[], $2::uuid[]) l(rp, agg) JOIN placement_aggregates a ON a.uuid = l.agg",
    )
    .bind(&rps)
    .bind(&aggs)
    .execute(&mut *conn)
    .await?;
    let (mut rps, mut ts) = (Vec::new(), Vec::new());
    for (rp, t) in &s.provider_traits {
        let ours = traits
            .get(t)
            .ok_or_else(|| TargetError::Data(format!("trait id {t} has no row")))?;
        rps.push(i64::from(*rp) + offset);
        ts.push(*ours);
    }
    crate::db::query(
        "INSERT INTO resource_provider_traits (resource_provider_id, trait_id) SELECT * FROM UNNEST($1::bigint[], $2::int[])",
    )
    .bind(&rps)
    .bind(&ts)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Consumers as `UNNEST` columns.
#[derive(Default)]
struct ConsumerColumns {
    uuids: Vec<Uuid>,
    projects: Vec<String>,
    users: Vec<String>,
    generations: Vec<i32>,
    types: Vec<Option<String>>,
}

impl ConsumerColumns {
    fn push(
        &mut self,
        uuid: Uuid,
        project: &str,
        user: &str,
        generation: i32,
        ctype: Option<String>,
    ) {
        self.uuids.push(uuid);
        self.projects.push(project.to_string());
        self.users.push(user.to_string());
        self.generations.push(generation);
        self.types.push(ctype);
    }
}

/// Consumers with their project, user, generation and type; `incomplete`
/// ones (allocations without a consumer row) get the configured owner, as
/// Placement's own online migration gives them.
async fn consumers(
    conn: &mut PgConnection,
    s: &Snapshot,
    incomplete: &[String],
    owner: (&str, &str),
) -> Result<(), TargetError> {
    let mut cols = ConsumerColumns::default();
    for c in &s.consumers {
        cols.push(
            parse_uuid(&c.uuid, "consumer uuid")?,
            &c.project,
            &c.user,
            c.generation,
            c.consumer_type.clone(),
        );
    }
    for u in incomplete {
        cols.push(
            parse_uuid(u, "allocation consumer")?,
            owner.0,
            owner.1,
            0,
            None,
        );
    }
    // The source's consumer types first, in the order it made them: `GET
    // /usages` lists types in that order (a type no consumer names is
    // made too, as the source has it).
    let types: Vec<&str> = s.consumer_types.iter().map(|(_, n)| n.as_str()).collect();
    crate::db::query(
        "INSERT INTO consumer_types (name)
         SELECT x FROM UNNEST($1::text[]) WITH ORDINALITY AS t(x, n) ORDER BY n
         ON CONFLICT DO NOTHING",
    )
    .bind(&types)
    .execute(&mut *conn)
    .await?;
    crate::db::query(
        "WITH p AS (INSERT INTO projects (external_id) SELECT DISTINCT x FROM UNNEST($1::text[]) x ON CONFLICT DO NOTHING),
              u AS (INSERT INTO users (external_id) SELECT DISTINCT x FROM UNNEST($2::text[]) x ON CONFLICT DO NOTHING),
              t AS (INSERT INTO consumer_types (name) SELECT DISTINCT x FROM UNNEST($3::text[]) x WHERE x IS NOT NULL ON CONFLICT DO NOTHING)
         SELECT 1",
    )
    .bind(&cols.projects)
    .bind(&cols.users)
    .bind(&cols.types)
    .execute(&mut *conn)
    .await?;
    crate::db::query(
        "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id)
         SELECT c.uuid, p.id, u.id, c.gen, t.id
           FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[]) WITH ORDINALITY
                AS c(uuid, project, usr, gen, ctype, n)
           JOIN projects p ON p.external_id = c.project
           JOIN users u ON u.external_id = c.usr
           LEFT JOIN consumer_types t ON t.name = c.ctype
          ORDER BY c.n",
    )
    .bind(&cols.uuids)
    .bind(&cols.projects)
    .bind(&cols.users)
    .bind(&cols.generations)
    .bind(&cols.types)
    .execute(&mut *conn)
    .await
    .map_err(|e| conflict(e, "a consumer uuid already exists here"))?;
    Ok(())
}

async fn allocations(
    conn: &mut PgConnection,
    s: &Snapshot,
    offset: i64,
    classes: &HashMap<i32, i32>,
) -> Result<(), TargetError> {
    let mut cols: (Vec<i64>, Vec<Uuid>, Vec<i32>, Vec<i32>) = Default::default();
    for a in &s.allocations {
        cols.0.push(i64::from(a.resource_provider_id) + offset);
        cols.1
            .push(parse_uuid(&a.consumer_id, "allocation consumer")?);
        cols.2.push(class_of(classes, a.resource_class_id)?);
        cols.3.push(a.used);
    }
    let written = crate::db::query(
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
         SELECT a.rp, c.id, a.class, a.used
           FROM UNNEST($1::bigint[], $2::uuid[], $3::int[], $4::int[]) WITH ORDINALITY
                AS a(rp, consumer, class, used, n)
           JOIN consumers c ON c.uuid = a.consumer
          ORDER BY a.n",
    )
    .bind(&cols.0)
    .bind(&cols.1)
    .bind(&cols.2)
    .bind(&cols.3)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if written != s.allocations.len() as u64 {
        return Err(TargetError::Mismatch(format!(
            "{written} of {} allocations found their consumer",
            s.allocations.len()
        )));
    }
    Ok(())
}

/// Where the copy landed: provider ids moved by `offset`, class ids mapped.
#[derive(Debug, Clone)]
pub struct Landing {
    offset: i64,
    classes: HashMap<i32, i32>,
}

/// Copies the snapshot. `owner` is the (project, user) of consumers the
/// source lacks rows for.
pub async fn write(
    conn: &mut PgConnection,
    s: &Snapshot,
    incomplete: &[String],
    owner: (&str, &str),
) -> Result<Landing, TargetError> {
    let classes = class_map(conn, s).await?;
    let traits = trait_map(conn, s).await?;
    let offset = providers(conn, s).await?;
    inventories(conn, s, offset, &classes).await?;
    links(conn, s, offset, &traits).await?;
    consumers(conn, s, incomplete, owner).await?;
    allocations(conn, s, offset, &classes).await?;
    Ok(Landing { offset, classes })
}

/// Checks ours against the source: every provider's generation and
/// inventory count, and its usage of every class.
pub async fn verify(
    conn: &mut PgConnection,
    s: &Snapshot,
    landing: &Landing,
) -> Result<(), TargetError> {
    let offset = landing.offset;
    let ids: Vec<i64> = s
        .providers
        .iter()
        .map(|p| i64::from(p.id) + offset)
        .collect();
    let ours: Vec<(i64, i32, i64)> = crate::db::query_as(
        "SELECT rp.id, rp.generation,
                (SELECT COUNT(*) FROM inventories i WHERE i.resource_provider_id = rp.id)
           FROM resource_providers rp WHERE rp.id = ANY($1) ORDER BY rp.id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    if ours.len() != s.providers.len() {
        return Err(TargetError::Mismatch(format!(
            "{} of {} providers",
            ours.len(),
            s.providers.len()
        )));
    }
    let mut inv: HashMap<i64, i64> = HashMap::new();
    for i in &s.inventories {
        *inv.entry(i64::from(i.resource_provider_id) + offset)
            .or_default() += 1;
    }
    for (p, (id, generation, inventories)) in s.providers.iter().zip(&ours) {
        let want = (p.generation.unwrap_or(0), inv.get(id).copied().unwrap_or(0));
        if want != (*generation, *inventories) {
            return Err(TargetError::Mismatch(format!(
                "provider {}: source (generation, inventories) {want:?}, here {:?}",
                p.uuid,
                (generation, inventories)
            )));
        }
    }
    verify_counts(conn, s, &ids).await?;
    let mut want: HashMap<(i64, i32), i64> = HashMap::new();
    for a in &s.allocations {
        let key = (
            i64::from(a.resource_provider_id) + offset,
            class_of(&landing.classes, a.resource_class_id)?,
        );
        *want.entry(key).or_default() += i64::from(a.used);
    }
    let have: Vec<(i64, i32, i64)> = crate::db::query_as(
        "SELECT resource_provider_id, resource_class_id, SUM(used)::bigint FROM allocations
          WHERE resource_provider_id = ANY($1) GROUP BY 1, 2",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let have: HashMap<(i64, i32), i64> = have.into_iter().map(|(r, c, u)| ((r, c), u)).collect();
    if have != want {
        let differs = want
            .iter()
            .find(|(k, v)| have.get(k) != Some(v))
            .map(|(k, v)| {
                format!(
                    "provider id {} class id {}: source {v}, here {:?}",
                    k.0,
                    k.1,
                    have.get(k)
                )
            })
            .unwrap_or_else(|| "usage on a provider the source does not use".into());
        return Err(TargetError::Mismatch(differs));
    }
    Ok(())
}

/// The imported providers' trait and aggregate links and the consumers:
/// as many here as in the source.
async fn verify_counts(
    conn: &mut PgConnection,
    s: &Snapshot,
    ids: &[i64],
) -> Result<(), TargetError> {
    let uuids: Vec<Uuid> = s
        .consumers
        .iter()
        .map(|c| parse_uuid(&c.uuid, "consumer uuid"))
        .collect::<Result<_, _>>()?;
    let (traits, aggs, consumers): (i64, i64, i64) = crate::db::query_as(
        "SELECT (SELECT COUNT(*) FROM resource_provider_traits WHERE resource_provider_id = ANY($1)),
                (SELECT COUNT(*) FROM resource_provider_aggregates WHERE resource_provider_id = ANY($1)),
                (SELECT COUNT(*) FROM consumers WHERE uuid = ANY($2))",
    )
    .bind(ids)
    .bind(&uuids)
    .fetch_one(conn)
    .await?;
    let want = (
        s.provider_traits.len(),
        s.provider_aggregates.len(),
        s.consumers.len(),
    );
    let have = (
        usize::try_from(traits).unwrap_or(usize::MAX),
        usize::try_from(aggs).unwrap_or(usize::MAX),
        usize::try_from(consumers).unwrap_or(usize::MAX),
    );
    if want != have {
        return Err(TargetError::Mismatch(format!(
            "(provider traits, provider aggregates, consumers): source {want:?}, here {have:?}"
        )));
    }
    Ok(())
}
