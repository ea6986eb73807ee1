//! A deployment request as the service uses it: the body's fields checked
//! once and turned into newtypes and enums, so that nothing downstream
//! re-validates a number or re-parses a filter string.

use crate::candidates::query_grammar::{parse_member_of, parse_required, TraitFilter};
use crate::candidates::search::{CandidateQuery, GroupSpec};
use crate::error::{Error, Result};
use crate::sched::{Strategy, VolumeBinding};
use crate::types::{AggFilter, PriorityClass};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Most CPUs one instance may ask for (far above any node). This and the
/// bounds below are the body's schema's too (`api::deployments`), and a
/// resize's, either way.
pub const MAX_CPU: f64 = 4096.0;

/// Most instances one deployment asks for, and the largest `nodes_limit`.
pub const MAX_COUNT: i64 = 100_000;

/// Most memory one instance may ask for, MiB (1 TiB).
pub const MAX_MEMORY_MB: i64 = 1 << 30;

/// An app's name: 1 to 255 characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppName(String);

impl AppName {
    /// A checked name.
    pub fn new(name: &str) -> Result<Self> {
        if name.is_empty() || name.chars().count() > 255 {
            return Err(Error::invalid("An app name has 1 to 255 characters."));
        }
        Ok(AppName(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// CPUs per instance: finite, 0 to [`MAX_CPU`] (0: no CPU asked).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Cpus(f64);

impl Cpus {
    /// Checked CPUs.
    pub fn new(cpu: f64) -> Result<Self> {
        if !cpu.is_finite() || !(0.0..=MAX_CPU).contains(&cpu) {
            return Err(Error::invalid(format!(
                "cpu must be a number from 0 to {MAX_CPU}, not {cpu}."
            )));
        }
        Ok(Cpus(cpu))
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Whole VCPUs a non-bound instance takes on a node without a CPU
    /// topology (a fraction of a VCPU is a whole one in Placement).
    pub fn whole_vcpus(self) -> i64 {
        // `new` bounds the value to [0, MAX_CPU]: exact in i64.
        self.0.ceil() as i64
    }

    /// Milli-CPUs, rounded (the batch classes' unit).
    pub fn milli(self) -> i64 {
        // `new` bounds the value to [0, MAX_CPU]: exact in i64.
        (self.0 * 1000.0).round() as i64
    }
}

/// Who owns the instances: project, user and consumer type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Project id.
    pub project_id: String,
    /// User id.
    pub user_id: String,
    /// Consumer type (INSTANCE unless given).
    pub consumer_type: String,
}

/// What each instance asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceShape {
    /// CPUs.
    pub cpu: Cpus,
    /// Bound to cores (needs a CPU topology).
    pub cpu_bind: bool,
    /// Memory, MiB (at least 1).
    pub memory_mb: i64,
    /// Other Placement classes on the node, by name.
    pub resources: BTreeMap<String, i64>,
    /// Eru volume bindings (`AUTO:/data:rw:100`, `/host:/dst:ro`).
    pub volumes: Vec<VolumeBinding>,
}

/// A checked `POST /deployments`.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The app.
    pub app: AppName,
    /// Instances to add (at least 1).
    pub count: i64,
    /// How they spread.
    pub strategy: Strategy,
    /// The strategy's node limit (0: none).
    pub nodes_limit: u32,
    /// Each instance.
    pub shape: InstanceShape,
    /// Required and forbidden traits of the nodes.
    pub required: TraitFilter,
    /// Aggregate membership of the nodes.
    pub member_of: AggFilter,
    /// The owner of the instances.
    pub owner: Owner,
    /// Plan and answer, write nothing.
    pub dry_run: bool,
    /// prod (default) or a low-priority class.
    pub priority_class: Option<PriorityClass>,
    /// The instances' integer priority.
    pub priority: Option<i32>,
}

/// `POST /deployments`' body as received, after its JSON schema (the
/// API's `deployments::schema`, which also bounds each number): the wire
/// struct, turned into a [`Deployment`] by `TryFrom` once.
#[derive(Debug, Clone, Deserialize)]
pub struct DeploymentBody {
    /// The app.
    pub app: String,
    /// Instances to add.
    pub count: i64,
    /// auto, fill, each, average, global or drained.
    #[serde(default)]
    pub strategy: Strategy,
    /// The strategy's node limit (0: none).
    #[serde(default)]
    pub nodes_limit: u32,
    /// CPUs of each instance.
    #[serde(default)]
    pub cpu: f64,
    /// Bind them to cores.
    #[serde(default)]
    pub cpu_bind: bool,
    /// Memory of each instance, MiB.
    pub memory_mb: i64,
    /// Other classes of each instance.
    #[serde(default)]
    pub resources: BTreeMap<String, i64>,
    /// Eru volume bindings: `AUTO:/data:rw:100` (a scheduled share of a
    /// disk, bytes or 1G-style sizes), `AUTO:/data:rwm:1G` (a whole disk),
    /// `/host:/dst:ro` (a fixed path).
    #[serde(default)]
    pub volumes: Vec<String>,
    /// Required and forbidden traits (Placement's `required` grammar).
    #[serde(default)]
    pub required: Option<String>,
    /// Aggregates (Placement's `member_of` grammar).
    #[serde(default)]
    pub member_of: Option<String>,
    /// Owner.
    pub project_id: String,
    /// Owner.
    pub user_id: String,
    /// The consumers' type (INSTANCE unless given).
    #[serde(default)]
    pub consumer_type: Option<String>,
    /// Plan and answer, write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// batch or free: instances on the batch inventory (§C.3); prod by default.
    #[serde(default)]
    pub priority_class: Option<PriorityClass>,
    /// The instances' integer priority, inside the class's range.
    #[serde(default)]
    pub priority: Option<i32>,
}

/// The parsed volume bindings: 400 for one that does not parse, an
/// explicit size of 0 (leave the size out for an unlimited volume), a size
/// of 2^63 bytes or more, or a destination given twice.
fn volume_bindings(specs: &[String]) -> Result<Vec<VolumeBinding>> {
    let bad = |spec: &str, why: String| {
        Error::invalid(format!("Invalid volume {spec:?}: {why}."))
            .code(crate::error::codes::DEPLOY_INVALID_REQUEST)
    };
    let mut out: Vec<VolumeBinding> = Vec::with_capacity(specs.len());
    for spec in specs {
        let vb: VolumeBinding = spec
            .parse()
            .map_err(|e: crate::sched::SchedError| bad(spec, e.to_string()))?;
        if spec.split(':').count() == 4 && vb.size == 0 {
            return Err(bad(spec, "a size must be at least 1 byte".into()));
        }
        if out.iter().any(|o| o.destination == vb.destination) {
            return Err(bad(spec, "its destination is given twice".into()));
        }
        out.push(vb);
    }
    Ok(out)
}

impl TryFrom<DeploymentBody> for Deployment {
    type Error = Error;

    /// Checks the fields; 400 with the reason for the first that is wrong.
    fn try_from(f: DeploymentBody) -> Result<Self> {
        if !(1..=MAX_COUNT).contains(&f.count) {
            return Err(Error::invalid(format!(
                "count must be from 1 to {MAX_COUNT}, not {}.",
                f.count
            )));
        }
        if i64::from(f.nodes_limit) > f.count {
            return Err(Error::invalid(format!(
                "nodes_limit ({}) is above count ({}).",
                f.nodes_limit, f.count
            )));
        }
        if !(1..=MAX_MEMORY_MB).contains(&f.memory_mb) {
            return Err(Error::invalid(format!(
                "memory_mb must be from 1 to {MAX_MEMORY_MB}, not {}.",
                f.memory_mb
            )));
        }
        if let Some((rc, n)) = f.resources.iter().find(|(_, n)| **n < 1) {
            return Err(Error::invalid(format!(
                "resources: {rc} must be at least 1, not {n}."
            )));
        }
        let version = crate::microversions::LATEST;
        let required = match f.required.as_deref() {
            Some(r) => parse_required(&[r], version).map_err(Error::invalid)?,
            None => TraitFilter::default(),
        };
        let member_of = match f.member_of.as_deref() {
            Some(m) => parse_member_of(&[m], version, "").map_err(Error::invalid)?,
            None => AggFilter::default(),
        };
        let cpu = Cpus::new(f.cpu)?;
        // The scheduler's own request checks (a bound request of 0 CPUs).
        crate::sched::ResourceRequest {
            cpu_request: cpu.get(),
            cpu_limit: cpu.get(),
            memory_request: f.memory_mb,
            memory_limit: f.memory_mb,
            bind: f.cpu_bind,
        }
        .normalise()
        .map_err(|e| {
            Error::invalid(format!("Invalid request: {e}."))
                .code(crate::error::codes::DEPLOY_INVALID_REQUEST)
        })?;
        Ok(Deployment {
            app: AppName::new(&f.app)?,
            count: f.count,
            strategy: f.strategy,
            nodes_limit: f.nodes_limit,
            shape: InstanceShape {
                cpu,
                cpu_bind: f.cpu_bind,
                memory_mb: f.memory_mb,
                resources: f.resources,
                volumes: volume_bindings(&f.volumes)?,
            },
            required,
            member_of,
            owner: Owner {
                project_id: f.project_id,
                user_id: f.user_id,
                consumer_type: f.consumer_type.unwrap_or_else(|| "INSTANCE".to_string()),
            },
            dry_run: f.dry_run,
            priority_class: f.priority_class,
            priority: f.priority,
        })
    }
}

impl Deployment {
    /// The candidate query for one instance's node: its memory and other
    /// classes with the trait and aggregate filters, as one group.
    pub fn node_query(&self) -> CandidateQuery {
        self.query_with(vec![("MEMORY_MB".to_string(), self.shape.memory_mb)])
    }

    /// The candidate query for one instance taking `own` (class, amount)
    /// beside its other classes, with the trait and aggregate filters.
    pub fn query_with(&self, mut own: Vec<(String, i64)>) -> CandidateQuery {
        own.extend(self.shape.resources.iter().map(|(c, n)| (c.clone(), *n)));
        CandidateQuery {
            groups: vec![GroupSpec {
                suffix: String::new(),
                resources: own,
                traits: self.required.clone(),
                member_of: self.member_of.clone(),
                in_tree: None,
            }],
            ..CandidateQuery::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> DeploymentBody {
        serde_json::from_value(serde_json::json!({
            "app": "web", "count": 3, "memory_mb": 512, "project_id": "p", "user_id": "u"
        }))
        .expect("a body")
    }

    #[test]
    fn a_plain_request_is_accepted() {
        let d = Deployment::try_from(fields()).expect("valid");
        assert_eq!(d.owner.consumer_type, "INSTANCE");
        assert_eq!(
            d.node_query().groups[0].resources,
            [("MEMORY_MB".to_string(), 512)]
        );
    }

    #[test]
    fn bad_values_are_refused() {
        let cases: Vec<(DeploymentBody, &str)> = vec![
            (
                DeploymentBody {
                    count: 0,
                    ..fields()
                },
                "count",
            ),
            (
                DeploymentBody {
                    count: -1,
                    ..fields()
                },
                "count",
            ),
            (
                DeploymentBody {
                    nodes_limit: 4,
                    ..fields()
                },
                "nodes_limit",
            ),
            (
                DeploymentBody {
                    cpu: f64::NAN,
                    ..fields()
                },
                "cpu",
            ),
            (
                DeploymentBody {
                    cpu: -0.5,
                    ..fields()
                },
                "cpu",
            ),
            (
                DeploymentBody {
                    cpu: 4096.5,
                    ..fields()
                },
                "cpu",
            ),
            (
                DeploymentBody {
                    memory_mb: 0,
                    ..fields()
                },
                "memory_mb",
            ),
            (
                DeploymentBody {
                    app: String::new(),
                    ..fields()
                },
                "app name",
            ),
            (
                DeploymentBody {
                    required: Some("!!".into()),
                    ..fields()
                },
                "",
            ),
        ];
        for (f, what) in cases {
            let e = Deployment::try_from(f).expect_err(what);
            assert!(matches!(e.kind, crate::error::Kind::Invalid), "{e:?}");
            assert!(e.message.contains(what), "{}", e.message);
        }
    }

    #[test]
    fn whole_vcpus_round_up() {
        assert_eq!(Cpus::new(1.5).expect("cpu").whole_vcpus(), 2);
        assert_eq!(Cpus::new(2.0).expect("cpu").whole_vcpus(), 2);
        assert_eq!(Cpus::new(0.0).expect("cpu").whole_vcpus(), 0);
    }
}
