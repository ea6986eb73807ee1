//! Request normalisation (Eru cpumem `WorkloadResourceRequest.Validate`), in Eru's exact order.

use super::error::{SchedError, SchedResult};
use super::types::ResourceRequest;

impl ResourceRequest {
    /// A memory-first (unbound) request.
    pub fn memory_first(cpu: f64, memory: i64) -> Self {
        Self {
            cpu_request: cpu,
            memory_request: memory,
            ..Self::default()
        }
    }

    /// A CPU-bind request.
    pub fn bound(cpu: f64, memory: i64) -> Self {
        Self {
            cpu_request: cpu,
            memory_request: memory,
            bind: true,
            ..Self::default()
        }
    }

    /// Validate and fill defaults exactly as Eru does (eru.md §6.1); idempotent.
    ///
    /// The order matters: a zero request inherits the limit *before* the
    /// bind-without-request check, and a bound request is raised to its limit last
    /// (bound CPU is always request = limit).
    pub fn normalise(&self) -> SchedResult<ResourceRequest> {
        let mut r = *self;
        if !r.cpu_request.is_finite() || !r.cpu_limit.is_finite() {
            return Err(SchedError::InvalidCpu("cpu must be a finite number".into()));
        }
        if r.cpu_request == 0.0 && r.cpu_limit > 0.0 {
            r.cpu_request = r.cpu_limit;
        }
        if r.memory_limit < 0 || r.memory_request < 0 {
            return Err(SchedError::InvalidMemory(format!(
                "limit {} or request {} less than 0",
                r.memory_limit, r.memory_request
            )));
        }
        if r.cpu_request < 0.0 || r.cpu_limit < 0.0 {
            return Err(SchedError::InvalidCpu(format!(
                "limit {} or request {} less than 0",
                r.cpu_limit, r.cpu_request
            )));
        }
        if r.cpu_request == 0.0 && r.bind {
            return Err(SchedError::InvalidCpu(
                "unlimited (zero) cpu request with bind".into(),
            ));
        }
        if r.memory_request == 0 && r.memory_limit > 0 {
            r.memory_request = r.memory_limit;
        }
        if r.memory_limit > 0 && r.memory_request > 0 && r.memory_limit < r.memory_request {
            r.memory_limit = r.memory_request;
        }
        if r.cpu_request > 0.0 && r.cpu_limit > 0.0 && r.cpu_limit < r.cpu_request {
            r.cpu_limit = r.cpu_request;
        }
        if r.bind && r.cpu_request > 0.0 && r.cpu_limit > r.cpu_request {
            r.cpu_request = r.cpu_limit;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_request_takes_limit() {
        let r = ResourceRequest {
            cpu_limit: 2.0,
            memory_limit: 10,
            ..Default::default()
        };
        let n = r.normalise().expect("valid");
        assert_eq!(n.cpu_request, 2.0);
        assert_eq!(n.memory_request, 10);
    }

    #[test]
    fn bind_raises_request_to_limit() {
        let r = ResourceRequest {
            cpu_request: 1.0,
            cpu_limit: 1.5,
            bind: true,
            ..Default::default()
        };
        assert_eq!(r.normalise().expect("valid").cpu_request, 1.5);
    }

    #[test]
    fn limit_below_request_is_raised() {
        let r = ResourceRequest {
            cpu_request: 2.0,
            cpu_limit: 1.0,
            memory_request: 5,
            memory_limit: 3,
            ..Default::default()
        };
        let n = r.normalise().expect("valid");
        assert_eq!((n.cpu_limit, n.memory_limit), (2.0, 5));
    }

    #[test]
    fn negatives_and_bind_zero_rejected() {
        assert!(matches!(
            ResourceRequest::memory_first(0.0, -1).normalise(),
            Err(SchedError::InvalidMemory(_))
        ));
        assert!(matches!(
            ResourceRequest::memory_first(-1.0, 0).normalise(),
            Err(SchedError::InvalidCpu(_))
        ));
        assert!(matches!(
            ResourceRequest::bound(0.0, 0).normalise(),
            Err(SchedError::InvalidCpu(_))
        ));
    }
}
