//! The agent's colocation side at run time: the enforcement thread
//! (started first, and never waiting for the service), and the service
//! task beside it that refreshes the guidance, sends the usage report and
//! records the evictions every `--report-interval`, backing off while the
//! service is away and resuming when it is back.

use super::cgroups::Hierarchy;
use super::enforce::Enforcer;
use super::reporting::{self, Shared};
use super::service::{Service, ServiceError};
use super::state_dir::StateDir;
use super::AgentError;
use crate::config::AgentArgs;
use std::sync::Arc;
use std::time::Duration;

/// The longest wait between tries while the service is away.
const LONGEST_BACKOFF: Duration = Duration::from_secs(300);

/// Finds the cgroups, makes the convention's directories, and starts the
/// enforcement thread; what it shares with the service task.
pub fn start(args: &AgentArgs) -> Result<Arc<Shared>, AgentError> {
    let setup = |e: &dyn std::fmt::Display| AgentError::Setup(e.to_string());
    let cgroups =
        Hierarchy::detect(&args.cgroup_root, &args.cgroup_parent).map_err(|e| setup(&e))?;
    cgroups.prepare().map_err(|e| setup(&e))?;
    let state = StateDir::open(&args.state_dir).map_err(|e| setup(&e))?;
    let shared = Arc::new(Shared::new(state));
    tracing::info!(target: "placement::agent", cgroups = cgroups.version(),
        parent = %args.cgroup_parent.display(), "enforcing colocation's watermarks");
    let reserved = i64::try_from(args.reserved_host_memory_mb).unwrap_or(i64::MAX);
    let enforcer = Enforcer::new(cgroups, &args.procfs_root, shared.clone(), reserved);
    let every = Duration::from_millis(args.memory_check_interval_ms);
    std::thread::Builder::new()
        .name("agent-enforce".into())
        .spawn(move || enforcer.run(every))
        .map_err(|e| setup(&e))?;
    Ok(shared)
}

/// The service task: for ever, a refresh, a report and the evictions'
/// records every interval, with a doubling wait while the service fails.
pub async fn serve(service: &Service, shared: &Shared, node: &str, interval: Duration) {
    let mut provider: Option<String> = None;
    let mut wait = interval;
    let mut last_error: Option<String> = None;
    loop {
        tokio::time::sleep(wait).await;
        match exchange(service, shared, node, &mut provider).await {
            Ok(()) => {
                if last_error.take().is_some() {
                    tracing::info!(target: "placement::agent", "the service is back; reports resume");
                }
                wait = interval;
            }
            Err(e) => {
                let line = e.to_string();
                if last_error.as_deref() != Some(line.as_str()) {
                    tracing::warn!(target: "placement::agent", error = %line,
                        "the service: enforcement goes on with the last policy; trying again");
                    last_error = Some(line);
                }
                wait = (wait * 2).min(LONGEST_BACKOFF.max(interval));
            }
        }
    }
}

async fn exchange(
    service: &Service,
    shared: &Shared,
    node: &str,
    provider: &mut Option<String>,
) -> Result<(), ServiceError> {
    let uuid = match provider {
        Some(u) => u.clone(),
        None => {
            let found =
                service
                    .provider_named(node)
                    .await?
                    .ok_or_else(|| ServiceError::Refused {
                        method: "GET".into(),
                        path: "/resource_providers".into(),
                        status: 404,
                        detail: format!("no provider named {node} yet"),
                    })?;
            provider.insert(found.uuid).clone()
        }
    };
    reporting::refresh(service, shared, &uuid).await?;
    reporting::report(service, shared, &uuid).await?;
    reporting::flush(service, shared, &uuid).await
}
