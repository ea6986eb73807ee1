//! `placement agent`: run on each machine, it publishes the machine's own
//! provider tree to the service (discovery from `/sys` and `/proc`, the
//! tree of Placement's nested model, a generation-safe sync), once
//! (`--once`) or again whenever the machine changes (CPU hotplug, virtual
//! functions made). With `--colocation` it also measures the consumers'
//! cgroups, reports their usage, and enforces colocation's watermarks on
//! the machine itself (`enforce`), with the service down too.

pub mod cgroup_files;
pub mod cgroups;
pub mod deploy_node;
pub mod discovery;
pub mod enforce;
pub mod keystone;
pub mod measure;
pub mod publish;
pub mod reporting;
pub mod service;
pub mod state_dir;
pub mod tree;
pub mod watch;

use crate::config::AgentArgs;
use std::time::Duration;

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
    #[error(transparent)]
    Service(#[from] service::ServiceError),
    #[error("{0}")]
    Setup(String),
}

/// The node's provider name: the flag, else the host's name.
fn node_name(args: &AgentArgs) -> Result<String, AgentError> {
    if let Some(n) = &args.provider_name {
        return Ok(n.clone());
    }
    let path = args.procfs_root.join("sys/kernel/hostname");
    std::fs::read_to_string(&path)
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            AgentError::Setup(format!(
                "no --provider-name and no host name in {}",
                path.display()
            ))
        })
}

/// Runs the agent: one sync with `--once`; else the tree kept in sync
/// (unless `--beside-nova`) and, with `--colocation`, the watermarks
/// enforced and usage reported, until stopped.
pub async fn run(args: AgentArgs, token: String) -> Result<(), AgentError> {
    let creds = match &args.config_file {
        Some(file) => Some(
            crate::config::agent_conf::keystone_credentials(&[
                crate::config::oslo_files::Source::File(file.clone()),
            ])
            .map_err(AgentError::Setup)?,
        ),
        None => None,
    };
    let name = node_name(&args)?;
    let deploys = args.cpu_topology || !args.volumes.is_empty();
    if deploys && args.tree_layout != crate::config::TreeLayout::Flat {
        return Err(AgentError::Setup(
            "--cpu-topology and --volume describe the node the deployment engine places on: \
             they need --tree-layout flat"
                .into(),
        ));
    }
    // Enforcement starts before anything waits for the service.
    let shared = if args.colocation {
        Some(watch::start(&args)?)
    } else {
        None
    };
    let service = service::Service::new(args.placement_url.as_deref(), token, creds)?;
    let colocation = async {
        match &shared {
            Some(s) => {
                let every = Duration::from_secs(args.report_interval);
                watch::serve(&service, s, &name, every).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    if args.beside_nova {
        colocation.await;
        return Ok(());
    }
    let tree = keep_tree(&args, &service, &name);
    tokio::select! {
        r = tree => r,
        () = colocation => Ok(()),
    }
}

/// The tree: one sync with `--once`, else a sync at start and after every
/// change the machine shows, looked at every `--sync-interval`.
async fn keep_tree(
    args: &AgentArgs,
    service: &service::Service,
    name: &str,
) -> Result<(), AgentError> {
    let roots = discovery::Roots {
        sysfs: args.sysfs_root.clone(),
        procfs: args.procfs_root.clone(),
    };
    let settings = tree::TreeSettings {
        name: name.to_string(),
        vf_class: args.vf_resource_class.clone(),
        reserved_memory_mb: args.reserved_host_memory_mb,
        cpu_allocation_ratio: args.cpu_allocation_ratio,
        memory_allocation_ratio: args.ram_allocation_ratio,
        layout: args.tree_layout,
    };
    let mut published: Option<discovery::Machine> = None;
    loop {
        let machine = discovery::discover(&roots)?;
        if published.as_ref() != Some(&machine) {
            let wanted = tree::tree(&machine, &settings);
            match sync_all(args, service, &machine, &wanted).await {
                Ok(changes) => {
                    tracing::info!(
                        providers = wanted.len(),
                        made = changes.providers_made,
                        inventories_written = changes.inventories_written,
                        traits_written = changes.traits_written,
                        "provider tree synced"
                    );
                    published = Some(machine);
                }
                Err(e) if args.once => return Err(e),
                // The service away: the next look tries again.
                Err(e) => tracing::warn!(error = %e, "provider tree not synced; trying again"),
            }
        }
        if args.once {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(args.sync_interval.max(1))).await;
    }
}

/// The tree, then what the deployment engine binds against when asked.
async fn sync_all(
    args: &AgentArgs,
    service: &service::Service,
    machine: &discovery::Machine,
    wanted: &[tree::Wanted],
) -> Result<publish::Changes, AgentError> {
    let changes = publish::sync(service, wanted).await?;
    if args.cpu_topology {
        let topology = deploy_node::topology(machine);
        if deploy_node::sync_topology(service, &changes.root, &topology).await? {
            tracing::info!("CPU topology written");
        }
    }
    if !args.volumes.is_empty() {
        let volumes = deploy_node::volumes(&args.volumes).map_err(AgentError::Setup)?;
        if deploy_node::sync_volumes(service, &changes.root, &volumes).await? {
            tracing::info!(volumes = volumes.len(), "volumes written");
        }
    }
    Ok(changes)
}
