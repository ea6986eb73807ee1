//! What the deployment engine binds against, published for the node: its
//! CPU topology (each online CPU a core of `share_base` shares, in its NUMA
//! cell, with each cell's memory: `PUT …/cpu_topology`) and its volumes
//! (each `--volume` path's filesystem size: `PUT …/volumes`). As with the
//! tree, each is read first and written only when it differs, so that a
//! second run moves no generation.

use super::discovery::Machine;
use super::service::{Service, ServiceError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Shares in one whole core (Eru's default).
const SHARE_BASE: i32 = 100;

/// A topology as the agent writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopologyWanted {
    share_base: i32,
    max_fragment_cores: i32,
    cores: Vec<CoreWanted>,
    numa_memory_mb: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct CoreWanted {
    id: String,
    numa_node: Option<String>,
}

/// `GET …/cpu_topology`, as far as the agent compares it.
#[derive(Deserialize)]
struct TopologyHeld {
    share_base: i32,
    max_fragment_cores: i32,
    cores: Vec<CoreWanted>,
    numa_memory_mb: BTreeMap<String, i64>,
}

/// `GET …/volumes`.
#[derive(Deserialize)]
struct VolumesHeld {
    volumes: BTreeMap<String, VolumeHeld>,
}

#[derive(Deserialize)]
struct VolumeHeld {
    size: i64,
}

#[derive(Serialize)]
struct VolumesPut<'a> {
    volumes: &'a BTreeMap<String, i64>,
}

/// The machine's topology: every online CPU in its cell.
pub fn topology(machine: &Machine) -> TopologyWanted {
    let mut cores = Vec::new();
    let mut numa_memory_mb = BTreeMap::new();
    for cell in &machine.cells {
        let node = cell.id.to_string();
        cores.extend(cell.cpus.iter().map(|c| CoreWanted {
            id: c.to_string(),
            numa_node: Some(node.clone()),
        }));
        numa_memory_mb.insert(node, i64::try_from(cell.memory_mb).unwrap_or(i64::MAX));
    }
    TopologyWanted {
        share_base: SHARE_BASE,
        max_fragment_cores: -1,
        cores,
        numa_memory_mb,
    }
}

/// Each volume path's filesystem size in bytes, or which one cannot be
/// read.
pub fn volumes(paths: &[PathBuf]) -> Result<BTreeMap<String, i64>, String> {
    paths
        .iter()
        .map(|p| {
            let fs =
                rustix::fs::statvfs(p).map_err(|e| format!("--volume {}: {e}", p.display()))?;
            let bytes = fs.f_blocks.saturating_mul(fs.f_frsize);
            Ok((
                p.display().to_string(),
                i64::try_from(bytes).unwrap_or(i64::MAX),
            ))
        })
        .collect()
}

/// Writes the topology when it differs from the node's; whether it wrote.
pub async fn sync_topology(
    service: &Service,
    node: &str,
    wanted: &TopologyWanted,
) -> Result<bool, ServiceError> {
    let path = format!("/resource_providers/{node}/cpu_topology");
    let (status, text) = service
        .call::<()>(reqwest::Method::GET, &path, None)
        .await?;
    if status == 200 {
        if let Ok(held) = serde_json::from_str::<TopologyHeld>(&text) {
            let same_cores = held.cores.iter().collect::<BTreeSet<_>>()
                == wanted.cores.iter().collect::<BTreeSet<_>>();
            if same_cores
                && held.share_base == wanted.share_base
                && held.max_fragment_cores == wanted.max_fragment_cores
                && held.numa_memory_mb == wanted.numa_memory_mb
            {
                return Ok(false);
            }
        }
    }
    service
        .expect(reqwest::Method::PUT, &path, Some(wanted), &[200])
        .await?;
    Ok(true)
}

/// Writes the volumes when they differ from the node's; whether it wrote.
pub async fn sync_volumes(
    service: &Service,
    node: &str,
    wanted: &BTreeMap<String, i64>,
) -> Result<bool, ServiceError> {
    let path = format!("/resource_providers/{node}/volumes");
    let held: VolumesHeld = service.read(&path).await?;
    let held: BTreeMap<String, i64> = held.volumes.into_iter().map(|(k, v)| (k, v.size)).collect();
    if &held == wanted {
        return Ok(false);
    }
    service
        .expect(
            reqwest::Method::PUT,
            &path,
            Some(&VolumesPut { volumes: wanted }),
            &[200],
        )
        .await?;
    Ok(true)
}
