//! Request bodies: how much is read, for how long, and the two budgets
//! bodies draw on while they arrive and are handled (bodies received at
//! once, and the memory they hold). Each budget is shared by every caller,
//! capped per caller, and keeps a reserve only the admin and service roles
//! reach, so that no one token, however many connections it opens, can
//! leave the operators and Nova without room to write.

use crate::api::respond::ApiError;
use crate::policy::Credentials;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How much of a request body is read, for how long, and how many at once.
///
/// A body is read only after the route, the method, the caller and the
/// route's policy were decided from the head (`route_guard`; for a route
/// whose target is in the body, the rule with the caller's own project):
/// nobody without a token, and no request the service would refuse
/// anyway, holds a connection busy or memory while a body trickles in.
#[derive(Debug, Clone)]
pub struct BodyLimits {
    /// Larger bodies get 413.
    pub max_bytes: usize,
    /// A body not received in full by then gets 408 (slow clients).
    pub timeout: Duration,
    /// One unit per body being received; none left: 503 at once.
    uploads: Budget,
    /// One unit per KiB that bodies hold, from when they start arriving
    /// until their request is answered; not enough left: 503 at once.
    memory: Budget,
}

/// Bytes per unit of [`BodyLimits::memory`].
const KIB: usize = 1024;

impl BodyLimits {
    /// Limits of `max_bytes` per body, `timeout` to receive one, `uploads`
    /// bodies received at once and `memory_bytes` held by bodies together
    /// (at least one largest body).
    pub fn new(max_bytes: usize, timeout: Duration, uploads: usize, memory_bytes: usize) -> Self {
        let memory_kib = memory_bytes.max(max_bytes) / KIB + 1;
        let largest_kib = u32::try_from(max_bytes.div_ceil(KIB)).unwrap_or(u32::MAX);
        BodyLimits {
            max_bytes,
            timeout,
            uploads: Budget::new(units(uploads.max(1)), 1),
            memory: Budget::new(units(memory_kib), largest_kib),
        }
    }
}

/// A budget's size in semaphore units.
fn units(n: usize) -> u32 {
    u32::try_from(n.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX)
}

impl From<&crate::config::Settings> for BodyLimits {
    fn from(s: &crate::config::Settings) -> Self {
        BodyLimits::new(
            s.http_max_body_bytes,
            Duration::from_secs(s.http_body_timeout_secs),
            usize::try_from(s.http_max_body_uploads).unwrap_or(usize::MAX),
            s.http_body_memory_bytes,
        )
    }
}

/// Who draws on a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drawer {
    /// The admin or service role: no cap of its own (Nova's service user
    /// is one caller for every scheduler and conductor worker), and the
    /// reserve once the shared part is spent.
    Operator,
    /// Anyone else, by user: at most its share of the shared part.
    User(String),
}

impl Drawer {
    /// The drawer a request's caller is (no caller: one anonymous user;
    /// public routes take no body).
    pub fn of(caller: Option<&Credentials>) -> Self {
        match caller {
            Some(c) if c.roles.iter().any(|r| r == "admin" || r == "service") => Drawer::Operator,
            Some(c) => Drawer::User(c.user_id.clone()),
            None => Drawer::User(String::new()),
        }
    }
}

/// Units each user holds of one budget; a user holding none has no entry.
type HeldByUser = Arc<Mutex<HashMap<String, u32>>>;

/// One budget: a shared part, a reserve for operators, and what each
/// user holds of it.
#[derive(Debug, Clone)]
struct Budget {
    shared: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    /// Units one user may hold at once.
    per_user: u32,
    /// Units each user holds now.
    held_by: HeldByUser,
}

impl Budget {
    /// A budget of `total` units: an eighth reserved for operators (at
    /// least one unit where there are two), and a quarter of the rest a
    /// user's share, at least `at_least` (one largest body) where the
    /// shared part has that much.
    fn new(total: u32, at_least: u32) -> Self {
        let reserve = if total >= 2 { (total / 8).max(1) } else { 0 };
        let shared = total - reserve;
        let per_user = (shared / 4).max(at_least.min(shared)).max(1);
        Budget {
            shared: Arc::new(Semaphore::new(shared as usize)),
            reserve: Arc::new(Semaphore::new(reserve as usize)),
            per_user,
            held_by: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// `n` more units for `held`, taken now or not at all.
    fn take(&self, drawer: &Drawer, held: &mut Held, n: u32) -> Result<(), ()> {
        if n == 0 {
            return Ok(());
        }
        match drawer {
            Drawer::Operator => {
                // The shared part first, the reserve for what it lacks.
                let from_shared =
                    n.min(u32::try_from(self.shared.available_permits()).unwrap_or(n));
                let mut got = Vec::new();
                if from_shared > 0 {
                    if let Ok(p) = self.shared.clone().try_acquire_many_owned(from_shared) {
                        got.push(p);
                    }
                }
                let have: u32 = got.iter().map(|p| units(p.num_permits())).sum();
                if have < n {
                    got.push(
                        self.reserve
                            .clone()
                            .try_acquire_many_owned(n - have)
                            .map_err(|_| ())?,
                    );
                }
                held.permits.extend(got);
                Ok(())
            }
            Drawer::User(user) => {
                let mut held_by = self.held_by.lock().unwrap_or_else(|e| e.into_inner());
                let now = held_by.get(user).copied().unwrap_or(0);
                if now.saturating_add(n) > self.per_user {
                    return Err(());
                }
                let permit = self
                    .shared
                    .clone()
                    .try_acquire_many_owned(n)
                    .map_err(|_| ())?;
                held_by.insert(user.clone(), now + n);
                held.permits.push(permit);
                held.user = Some((self.held_by.clone(), user.clone()));
                held.user_units += n;
                Ok(())
            }
        }
    }
}

/// Units of one budget a request holds; given back when dropped.
#[derive(Debug, Default)]
pub struct Held {
    permits: Vec<OwnedSemaphorePermit>,
    /// The user's count to lower when given back.
    user: Option<(HeldByUser, String)>,
    user_units: u32,
}

impl Held {
    fn units(&self) -> usize {
        self.permits
            .iter()
            .map(OwnedSemaphorePermit::num_permits)
            .sum()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((held_by, user)) = self.user.take() {
            let mut held_by = held_by.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = held_by.get_mut(&user) {
                *n = n.saturating_sub(self.user_units);
                if *n == 0 {
                    held_by.remove(&user);
                }
            }
        }
    }
}

/// The memory a request's body holds, given back when its answer is made.
pub type BodyReservation = Option<Held>;

/// A 503 for a body the service has no room to take now.
fn no_room(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("The service is receiving too many request bodies ({what}); retry shortly."),
    )
    .code("placement.http.busy")
}

/// KiB units for `bytes`.
fn kib_of(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(KIB)).unwrap_or(u32::MAX)
}

impl BodyLimits {
    /// A place among the bodies being received, and the memory of a
    /// declared length (a chunked body's is taken as it comes), for
    /// `drawer`; a 503 when either budget has no room for it.
    fn admit(&self, drawer: &Drawer, declared: Option<u64>) -> Result<(Held, Held), ApiError> {
        let mut receiving = Held::default();
        self.uploads
            .take(drawer, &mut receiving, 1)
            .map_err(|_| no_room("connections"))?;
        let mut held = Held::default();
        if let Some(n) = declared.and_then(|n| usize::try_from(n).ok()) {
            self.memory
                .take(drawer, &mut held, kib_of(n))
                .map_err(|_| no_room("memory"))?;
        }
        Ok((receiving, held))
    }
}

/// Reads the whole body within the limits, so handlers never wait on a
/// slow client and never see more than `max_bytes`; the memory it holds
/// stays reserved until the answer is made.
pub async fn read_body(
    req: Request,
    limits: &BodyLimits,
) -> Result<(Request, BodyReservation), ApiError> {
    use http_body::Body as _;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The request body is over the limit of {} bytes.",
                limits.max_bytes
            ),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(too_large());
    }
    if req.body().is_end_stream() {
        return Ok((req, None));
    }
    let drawer = Drawer::of(req.extensions().get::<Credentials>());
    let (receiving, mut held) = limits.admit(&drawer, declared)?;
    let (parts, mut body) = req.into_parts();
    let mut got = bytes::BytesMut::new();
    let read = tokio::time::timeout(limits.timeout, async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ApiError::bad_request(format!("The request body could not be read: {e}"))
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if got.len() + data.len() > limits.max_bytes {
                return Err(too_large());
            }
            got.extend_from_slice(&data);
            let needed = got.len().div_ceil(KIB);
            let have = held.units();
            if needed > have {
                limits
                    .memory
                    .take(&drawer, &mut held, kib_of((needed - have) * KIB))
                    .map_err(|_| no_room("memory"))?;
            }
        }
        Ok(())
    })
    .await;
    drop(receiving);
    match read {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request body was not received within {} seconds.",
                limits.timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) => Ok((
            Request::from_parts(parts, Body::from(got.freeze())),
            Some(held),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Drawer {
        Drawer::User(name.to_string())
    }

    #[test]
    fn one_user_takes_its_share_and_the_operators_keep_the_reserve() {
        // 64 units: 8 reserved, 56 shared, 14 a user.
        let b = Budget::new(64, 1);
        let mut mallory = Held::default();
        for _ in 0..14 {
            b.take(&user("mallory"), &mut mallory, 1).unwrap();
        }
        assert!(b.take(&user("mallory"), &mut mallory, 1).is_err());
        // Another user still has room; four users spend the shared part.
        let mut others: Vec<Held> = (0..3).map(|_| Held::default()).collect();
        for (i, h) in others.iter_mut().enumerate() {
            b.take(&user(&format!("u{i}")), h, 14).unwrap();
        }
        assert!(b.take(&user("late"), &mut Held::default(), 1).is_err());
        // The operators still get the reserve, and only it.
        let mut admin = Held::default();
        b.take(&Drawer::Operator, &mut admin, 8).unwrap();
        assert!(b.take(&Drawer::Operator, &mut admin, 1).is_err());
        // Given back on drop, a user's count with it.
        drop(mallory);
        assert!(b.held_by.lock().unwrap().get("mallory").is_none());
        let mut again = Held::default();
        b.take(&user("mallory"), &mut again, 14).unwrap();
    }

    #[test]
    fn a_share_is_at_least_one_largest_body_where_it_fits() {
        let b = Budget::new(100, 60);
        assert_eq!(b.per_user, 60);
        let tiny = Budget::new(1, 1);
        assert_eq!(tiny.per_user, 1);
        tiny.take(&user("a"), &mut Held::default(), 1).unwrap();
    }
}
