//! A request's policy check (the rules engine is `crate::policy`). The
//! target a rule is checked against is the thing the request addresses
//! ([`Subject`]), built from the very values the handler uses: the query
//! the route guard parsed once for both, the path the router matched, or,
//! for routes whose target is in the body or in the database, whatever the
//! handler read, handed to [`Authorize::check`].

use super::extract::QueryPairs;
use crate::api::respond::{ApiError, ApiResult};
use crate::db::consumers::ConsumerRow;
use crate::policy::{Credentials, Decision, Target};
use crate::state::Security;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a route's policy rule is checked against (oslo.policy's target,
/// read by `%(project_id)s` and `%(user_id)s` in a check string): the thing
/// the request addresses, read from the very value the handler uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// Nothing owned by a project is addressed (providers, classes,
    /// traits, a consumer's allocations as Placement treats them): the
    /// caller's own project and user, which is what Placement's handlers
    /// pass (`context.can(rule)` without a target).
    Caller,
    /// The query's `project_id` and `user_id` (their last values, as the
    /// handler reads them); without them the target holds neither.
    QueryProject,
    /// The query's `project_id` and `user_id` when it names a project (an
    /// extension parameter of a Placement route); otherwise, as Placement,
    /// the caller.
    QueryProjectOrCaller,
    /// The path's `{project_id}`.
    PathProject,
    /// Named in the body, or stored with what the path names (a
    /// consumer's or an app's project): the handler reads it and asks
    /// [`Authorize`] before doing anything else.
    Handler,
}

/// The target naming a project (and a user), either of which may be absent.
pub fn project_target(project_id: Option<&str>, user_id: Option<&str>) -> Target {
    let mut target = Target::new();
    if let Some(p) = project_id {
        target.insert("project_id", p.to_string());
    }
    if let Some(u) = user_id {
        target.insert("user_id", u.to_string());
    }
    target
}

/// The project and user a stored consumer belongs to; none (only rules
/// that ignore the target pass) when there is no such consumer, so that
/// nobody learns which consumers exist through a 404.
pub fn owner_target(consumer: Option<&ConsumerRow>) -> Target {
    consumer.map_or_else(Target::new, |c| {
        project_target(Some(&c.project_id), Some(&c.user_id))
    })
}

/// The caller's own project and user: Placement's default target.
pub fn caller_target(caller: &Credentials) -> Target {
    project_target(caller.project_id.as_deref(), Some(&caller.user_id))
}

/// The target of a route whose subject the guard can read (None for
/// [`Subject::Handler`], which the handler checks itself).
pub fn target_of(
    subject: Subject,
    caller: &Credentials,
    query: &QueryPairs,
    path_project: Option<&str>,
) -> Option<Target> {
    let from_query = || project_target(query.last("project_id"), query.last("user_id"));
    match subject {
        Subject::Caller => Some(caller_target(caller)),
        Subject::QueryProject => Some(from_query()),
        Subject::QueryProjectOrCaller if query.last("project_id").is_some() => Some(from_query()),
        Subject::QueryProjectOrCaller => Some(caller_target(caller)),
        Subject::PathProject => Some(project_target(path_project, None)),
        Subject::Handler => None,
    }
}

/// The policy check a handler owes once it has read what it addresses
/// (routes of [`Subject::Handler`]). The route guard puts it in the
/// request; a success answered without it having passed is turned into a
/// 500 (see [`Authorize::was_checked`]), so a handler that forgets fails
/// closed.
#[derive(Clone)]
pub struct Authorize {
    rule: &'static str,
    caller: Credentials,
    security: Arc<Security>,
    passed: Arc<AtomicBool>,
}

impl Authorize {
    /// The check of `rule` for `caller`, not yet made.
    pub fn new(rule: &'static str, caller: Credentials, security: Arc<Security>) -> Self {
        Authorize {
            rule,
            caller,
            security,
            passed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// 403 unless the rule passes for every target (a body naming several
    /// projects needs each of them); no target at all is checked as an
    /// empty one, which only rules that ignore the target pass.
    pub fn check(&self, targets: impl IntoIterator<Item = Target>) -> ApiResult<()> {
        let mut targets = targets.into_iter().peekable();
        if targets.peek().is_none() {
            return self.check_one(&Target::new());
        }
        for target in targets {
            self.check_one(&target)?;
        }
        Ok(())
    }

    fn check_one(&self, target: &Target) -> ApiResult<()> {
        if self
            .security
            .policy
            .current()
            .enforce(self.rule, &self.caller, target)
            != Decision::Allowed
        {
            self.passed.store(false, Ordering::SeqCst);
            return Err(ApiError::forbidden(self.rule));
        }
        self.passed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the rule also passes for `target`, for what an answer
    /// shows beside what was checked (another project's part of it);
    /// the handler's own check is still owed.
    pub fn allows(&self, target: &Target) -> bool {
        self.security
            .policy
            .current()
            .enforce(self.rule, &self.caller, target)
            == Decision::Allowed
    }

    /// The items whose target the rule passes, for a listing that shows
    /// each caller only what it may see; this is the handler's check (an
    /// empty answer is an answer, not a refusal).
    pub fn filter<T>(&self, items: Vec<T>, target: impl Fn(&T) -> Target) -> Vec<T> {
        self.passed.store(true, Ordering::SeqCst);
        items
            .into_iter()
            .filter(|i| self.allows(&target(i)))
            .collect()
    }

    /// Whether the handler's check was made and passed.
    pub fn was_checked(&self) -> bool {
        self.passed.load(Ordering::SeqCst)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Authorize {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Authorize>().cloned().ok_or_else(|| {
            ApiError::internal(format!(
                "{} asks for a policy check its route does not declare (Subject::Handler)",
                parts.uri.path()
            ))
        })
    }
}
