//! The one write of deployments' instances (one deployment, or the
//! single deployments of a turn placed together), for production and
//! low-priority deployments alike, inside the caller's transaction:
//! priorities (low-priority work), allocations through the shared
//! allocation write (capacity checked again under its locks; a node
//! taken since planning is a lost race, run again), the instance rows with
//! their core bindings, their volume bindings, and the announcement that
//! lets other processes refresh the nodes a large deployment changed.

use super::deployment_request::Deployment;
use super::{refresh, PlannedInstance};
use crate::db::allocations as alloc_db;
use crate::db::colocation as colocation_db;
use crate::db::colocation::PriorityRow;
use crate::db::deployments::{self as db, NewInstance};
use crate::db::volumes::{self, NewBindings};
use crate::error::{Error, Result};
use crate::types::{AllocationsByProvider, ConsumerWrite, GenerationCheck};
use std::collections::{BTreeMap, HashSet};

/// One instance to write: the planned instance, the provider it lands on
/// and what it allocates there.
pub struct InstanceWrite<'a> {
    /// The planned instance (consumer, node, binding, volumes).
    pub instance: &'a PlannedInstance,
    /// Its provider's internal id.
    pub rp_id: i64,
    /// Amounts by class it allocates on that provider.
    pub resources: BTreeMap<String, i64>,
}

/// One deployment's instances to write.
pub struct DeploymentWrite<'a> {
    /// The deployment (owner, app, shape).
    pub d: &'a Deployment,
    /// Its instances.
    pub items: Vec<InstanceWrite<'a>>,
    /// Whether they hold whole cores.
    pub cpu_bind: bool,
}

/// Writes the instances of every deployment of `writes` in `tx` (the
/// caller commits): one allocation write, one statement of instance rows
/// and one of volume bindings for them all. `priority` is the priority
/// their consumers get (low-priority deployments), set before the
/// allocation write checks the classes it may use.
pub async fn write_instances(
    tx: &mut sqlx::PgConnection,
    writes: &[DeploymentWrite<'_>],
    priority: Option<&PriorityRow>,
) -> Result<()> {
    let items = || {
        writes
            .iter()
            .flat_map(|w| w.items.iter().map(move |i| (w.d, i)))
    };
    if let Some(row) = priority {
        let consumers: Vec<uuid::Uuid> = items().map(|(_, i)| i.instance.consumer_uuid).collect();
        colocation_db::set_priorities(tx, &consumers, row).await?;
    }
    let consumer_writes: Vec<ConsumerWrite> = items()
        .map(|(d, i)| ConsumerWrite {
            consumer: i.instance.consumer_uuid,
            project_id: d.owner.project_id.clone(),
            user_id: d.owner.user_id.clone(),
            consumer_type: Some(d.owner.consumer_type.clone()),
            generation: GenerationCheck::New,
            allocations: AllocationsByProvider::from([(
                i.instance.node,
                i.resources.clone().into_iter().collect(),
            )]),
            unparsed_provider: None,
        })
        .collect();
    let ids = match alloc_db::write(tx, &consumer_writes).await {
        Ok(ids) => ids,
        // A node filled up between planning and locking: plan again.
        Err(e @ alloc_db::AllocError::Capacity(..)) => return Err(e.into_error(None).lost_race()),
        Err(e) => return Err(e.into_error(None)),
    };
    let mut rows = Vec::with_capacity(writes.len());
    let mut bindings = Vec::new();
    for w in writes {
        let mut instances = Vec::with_capacity(w.items.len());
        for i in &w.items {
            let consumer_id = consumer_id(&ids, i.instance.consumer_uuid)?;
            if !i.instance.volumes.is_empty() {
                bindings.push(NewBindings {
                    consumer_id,
                    rp_id: i.rp_id,
                    plan: i.instance.volumes.clone(),
                });
            }
            instances.push(NewInstance {
                consumer_id,
                rp_id: i.rp_id,
                numa_node: i.instance.numa_node.clone(),
                cpu_map: i.instance.cpu_map.clone(),
            });
        }
        let shape = &w.d.shape;
        rows.push(db::DeploymentRows {
            app: w.d.app.as_str(),
            sizes: db::InstanceSizes {
                cpu: shape.cpu.get(),
                cpu_bind: w.cpu_bind,
                memory_mb: shape.memory_mb,
            },
            instances,
        });
    }
    db::insert_instances(tx, &rows).await?;
    volumes::insert_bindings(tx, &bindings).await?;
    let nodes: HashSet<i64> = items().map(|(_, i)| i.rp_id).collect();
    refresh::announce(tx, nodes.len()).await?;
    Ok(())
}

/// The id the allocation write gave a new instance's consumer.
fn consumer_id(ids: &alloc_db::ConsumerIds, consumer: uuid::Uuid) -> Result<i64> {
    ids.get(&consumer)
        .copied()
        .ok_or_else(|| Error::internal(format!("consumer {consumer} was not written")))
}
