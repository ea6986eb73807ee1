//! Typed errors of the scheduling algorithms, each saying why and with the numbers involved.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The broad class of a [`SchedError`], matching the Eru error sentinels.
///
/// The service maps a kind to an HTTP status and a stable error code; the
/// vectors in `eru.json` name these kinds in `expect_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Unknown deploy strategy name (`ErrInvaildDeployStrategy`).
    InvalidStrategy,
    /// Deploy count ≤ 0 (`ErrInvaildDeployCount`).
    InvalidCount,
    /// Not enough resource for the plan (`ErrInsufficientResource`).
    InsufficientResource,
    /// Not enough node capacity (`ErrInsufficientCapacity`).
    InsufficientCapacity,
    /// FILL found every chosen node already at the target (`ErrAlreadyFilled`).
    AlreadyFilled,
    /// Invalid CPU request or limit (`ErrInvalidCPU`).
    InvalidCpu,
    /// Invalid memory request or limit (`ErrInvalidMemory`).
    InvalidMemory,
    /// Malformed volume binding.
    InvalidVolume,
}

impl ErrorKind {
    /// The snake_case name used by the vectors and by API error codes.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidStrategy => "invalid_strategy",
            ErrorKind::InvalidCount => "invalid_count",
            ErrorKind::InsufficientResource => "insufficient_resource",
            ErrorKind::InsufficientCapacity => "insufficient_capacity",
            ErrorKind::AlreadyFilled => "already_filled",
            ErrorKind::InvalidCpu => "invalid_cpu",
            ErrorKind::InvalidMemory => "invalid_memory",
            ErrorKind::InvalidVolume => "invalid_volume",
        }
    }
}

/// Every way a scheduling computation can fail.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SchedError {
    /// The strategy name is not one we implement.
    #[error("deploy strategy {0:?} is not supported (use auto, fill, each, global or drained)")]
    UnknownStrategy(String),

    /// A deploy must ask for at least one instance.
    #[error("invalid deploy count {0}: must be at least 1")]
    InvalidCount(i64),

    /// The summed capacity is below the requested count.
    #[error("insufficient resource: need {need} instances, capacity for {total}")]
    NeedExceedsTotal {
        /// Instances requested.
        need: i64,
        /// Summed capacity of the candidate nodes.
        total: i64,
    },

    /// AUTO ran out of nodes below the per-node ceiling.
    #[error(
        "insufficient resource: placed {placed} of {need} instances; every node reached its limit of {limit} instances or its capacity"
    )]
    NodesLimitReached {
        /// Instances requested.
        need: i64,
        /// Instances placed before running out.
        placed: i64,
        /// The per-node ceiling (existing + new).
        limit: i64,
    },

    /// A greedy strategy ran out of node capacity before placing everything.
    #[error(
        "insufficient resource: placed {placed} of {need} instances before every node was full"
    )]
    CapacityExhausted {
        /// Instances requested.
        need: i64,
        /// Instances placed before running out.
        placed: i64,
    },

    /// FILL/EACH were asked for more nodes than were passed in.
    #[error(
        "insufficient resource: nodes limit {limit} is larger than the {nodes} candidate nodes"
    )]
    NodesLimitTooLarge {
        /// Candidate nodes.
        nodes: usize,
        /// The requested number of nodes.
        limit: i64,
    },

    /// FILL could not find enough nodes able to reach the target.
    #[error(
        "insufficient resource: not enough nodes that can fill up to {need} instances, {remaining} more nodes required"
    )]
    NotEnoughFillNodes {
        /// Per-node target.
        need: i64,
        /// Nodes still missing.
        remaining: i64,
    },

    /// FILL's chosen nodes already all hold the target count.
    #[error("already filled: each chosen node already has {need} or more instances")]
    AlreadyFilled {
        /// Per-node target.
        need: i64,
    },

    /// EACH found no node able to host `need` instances.
    #[error("insufficient capacity: no node can host {need} instances")]
    NoNodeFits {
        /// Per-node count.
        need: i64,
    },

    /// EACH found fewer than `limit` nodes able to host `need` instances.
    #[error(
        "insufficient resource: only {found} nodes can host {need} instances, {limit} nodes required"
    )]
    NotEnoughEachNodes {
        /// Per-node count.
        need: i64,
        /// Nodes able to host it.
        found: usize,
        /// Nodes required.
        limit: i64,
    },

    /// A single node cannot host the requested instances (deploy allocation).
    #[error("insufficient capacity ({resource}): need {need}, available {available}")]
    NodeInsufficient {
        /// Which resource ran out: "cpu" or "memory".
        resource: &'static str,
        /// What was needed (instances or CPUs).
        need: f64,
        /// What the node offers.
        available: f64,
    },

    /// No bound CPU plan fits a reallocated workload.
    #[error(
        "insufficient resource: no CPU plan for {cpu} bound CPUs and {memory} bytes on this node"
    )]
    NoCpuPlan {
        /// Bound CPUs requested.
        cpu: f64,
        /// Memory requested.
        memory: i64,
    },

    /// Invalid CPU request/limit (negative, or bind without a request, or below one piece).
    #[error("invalid cpu: {0}")]
    InvalidCpu(String),

    /// Invalid memory request/limit.
    #[error("invalid memory: {0}")]
    InvalidMemory(String),

    /// Malformed volume binding string.
    #[error("invalid volume {binding:?}: {reason}")]
    InvalidVolume {
        /// The binding as given.
        binding: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl SchedError {
    /// The Eru sentinel class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SchedError::UnknownStrategy(_) => ErrorKind::InvalidStrategy,
            SchedError::InvalidCount(_) => ErrorKind::InvalidCount,
            SchedError::NeedExceedsTotal { .. }
            | SchedError::NodesLimitReached { .. }
            | SchedError::CapacityExhausted { .. }
            | SchedError::NodesLimitTooLarge { .. }
            | SchedError::NotEnoughFillNodes { .. }
            | SchedError::NotEnoughEachNodes { .. }
            | SchedError::NoCpuPlan { .. } => ErrorKind::InsufficientResource,
            SchedError::NoNodeFits { .. } | SchedError::NodeInsufficient { .. } => {
                ErrorKind::InsufficientCapacity
            }
            SchedError::AlreadyFilled { .. } => ErrorKind::AlreadyFilled,
            SchedError::InvalidCpu(_) => ErrorKind::InvalidCpu,
            SchedError::InvalidMemory(_) => ErrorKind::InvalidMemory,
            SchedError::InvalidVolume { .. } => ErrorKind::InvalidVolume,
        }
    }
}

/// Result alias for the scheduling module.
pub type SchedResult<T> = Result<T, SchedError>;
