//! The one retry policy of agents and workers (their calls to the coordinator,
//! and the worker's staging writes to the lake): exponential backoff with full
//! jitter, within a total time budget, retrying only errors that may go away.
//!
//! A coordinator restarted in seconds (or a full lake disk freed in minutes)
//! must not fail tasks or jobs: every call is retried while the failure is
//! transient and the budget (`--retry-for`, default [`DEFAULT_RETRY_FOR`]) is
//! not spent. Each retry is logged at WARN with the attempt number and the
//! error (code and message only: never request metadata, so never a token).
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tonic::{Code, Status};

/// The default budget of [`RetryPolicy`]: how long a coordinator may be away.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(120);

/// Exponential backoff with full jitter within a total budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first backoff ceiling (attempt 1 sleeps a random time in `0..=initial`).
    pub initial: Duration,
    /// The largest backoff ceiling.
    pub max_delay: Duration,
    /// Total time from the first failure after which the last error is returned.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(DEFAULT_RETRY_FOR)
    }
}

impl RetryPolicy {
    /// 200 ms first ceiling, doubling to 10 s, for `budget` in all.
    pub fn new(budget: Duration) -> Self {
        Self {
            initial: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            budget,
        }
    }

    /// A policy that never retries.
    pub fn none() -> Self {
        Self::new(Duration::ZERO)
    }

    /// The backoff ceiling before retry `attempt` (1-based): `initial · 2^(attempt−1)`, capped.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let f = 1u32 << attempt.saturating_sub(1).min(20);
        self.initial.saturating_mul(f).min(self.max_delay)
    }

    /// A fresh backoff whose budget starts now.
    pub fn start(&self) -> Backoff {
        Backoff {
            policy: *self,
            attempt: 0,
            deadline: tokio::time::Instant::now() + self.budget,
        }
    }

    /// Calls `call` until it succeeds, fails with a status [`is_transient`] says
    /// is permanent, or the budget is spent; `what` names the call in the logs.
    pub async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        // Code and message only: a status's Display includes metadata.
        let describe = |s: &Status| format!("{:?}: {}", s.code(), s.message());
        self.run(what, is_transient, describe, call).await
    }

    /// Calls `call` until it succeeds, fails with an error `transient` calls
    /// permanent, or the budget is spent (then the last error is returned).
    pub async fn retry<T, E, F, Fut>(
        &self,
        what: &str,
        transient: impl Fn(&E) -> bool,
        call: F,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run(what, transient, |e: &E| e.to_string(), call).await
    }

    async fn run<T, E, F, Fut>(
        &self,
        what: &str,
        transient: impl Fn(&E) -> bool,
        describe: impl Fn(&E) -> String,
        mut call: F,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut backoff: Option<Backoff> = None;
        loop {
            let e = match call().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !transient(&e) {
                return Err(e);
            }
            let b = backoff.get_or_insert_with(|| self.start());
            let Some(delay) = b.next_delay() else {
                crate::obs::retry_metrics().gave_up.inc(&[what]);
                tracing::warn!(
                    call = what,
                    attempts = b.attempt() + 1,
                    error = %describe(&e),
                    budget_s = self.budget.as_secs_f64(),
                    "giving up: still failing after the retry budget"
                );
                return Err(e);
            };
            crate::obs::retry_metrics().retries.inc(&[what]);
            tracing::warn!(
                call = what,
                attempt = b.attempt(),
                error = %describe(&e),
                delay_ms = delay.as_millis() as u64,
                "transient failure; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// The state of one retried operation.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    attempt: u32,
    deadline: tokio::time::Instant,
}

impl Backoff {
    /// The number of retries handed out so far.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The sleep before the next retry (full jitter: uniform in `0..=ceiling`,
    /// cut to the time left), or None when the budget is spent.
    pub fn next_delay(&mut self) -> Option<Duration> {
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        self.attempt += 1;
        let ceiling = self.policy.ceiling(self.attempt);
        Some(jitter(ceiling).min(left))
    }
}

/// A uniformly random duration in `0..=max` (no RNG crate: std's randomly
/// keyed hasher is plenty for spreading retries).
fn jitter(max: Duration) -> Duration {
    let nanos = max.as_nanos().min(u64::MAX as u128) as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(nanos);
    Duration::from_nanos(h.finish() % (nanos + 1))
}

/// Whether a failed call to the coordinator may succeed if repeated.
///
/// Transient: `UNAVAILABLE` (connection refused or reset, the coordinator's
/// lake or state store busy or full — it reports retryable I/O, ENOSPC
/// included, this way), `UNKNOWN` and `CANCELLED` (what tonic makes of a
/// connection that broke mid-call), `DEADLINE_EXCEEDED` and `RESOURCE_EXHAUSTED`
/// (overload). Everything else is permanent: `INVALID_ARGUMENT`, `NOT_FOUND`,
/// `FAILED_PRECONDITION`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `DATA_LOSS`,
/// `INTERNAL`, and `ABORTED`, which the coordinator answers when the caller's
/// lease is gone (the task or job was re-leased or cancelled): repeating the
/// call cannot bring the lease back.
pub fn is_transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn ceilings_double_from_200ms_to_10s_and_jitter_stays_below() {
        let p = RetryPolicy::default();
        assert_eq!(p.budget, Duration::from_secs(120));
        let c: Vec<u128> = (1..=8).map(|a| p.ceiling(a).as_millis()).collect();
        assert_eq!(c, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!(p.ceiling(1000), Duration::from_secs(10));
        let draws: Vec<Duration> = (0..200).map(|_| jitter(Duration::from_secs(1))).collect();
        assert!(draws.iter().all(|d| *d <= Duration::from_secs(1)));
        // Spread out, not a constant.
        assert!(draws.iter().any(|d| *d < Duration::from_millis(300)));
        assert!(draws.iter().any(|d| *d > Duration::from_millis(700)));
    }

    #[test]
    fn classification() {
        for c in [
            Code::Unavailable,
            Code::Unknown,
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            assert!(is_transient(&Status::new(c, "x")), "{c:?}");
        }
        for c in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::Aborted,
            Code::DataLoss,
            Code::Internal,
            Code::AlreadyExists,
            Code::Unimplemented,
            Code::OutOfRange,
        ] {
            assert!(!is_transient(&Status::new(c, "x")), "{c:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_until_the_budget_is_spent() {
        let p = RetryPolicy::new(Duration::from_secs(120));
        let calls = AtomicU32::new(0);
        let t0 = tokio::time::Instant::now();
        let r: Result<(), Status> = p
            .call("test", || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err(Status::unavailable("tcp connect error"))
            })
            .await;
        let took = t0.elapsed();
        assert_eq!(r.unwrap_err().code(), Code::Unavailable);
        // The budget is respected (the last sleep is cut to what is left) ...
        assert!(took <= Duration::from_secs(120), "{took:?}");
        // ... and used: full jitter averages half the 10 s ceiling, so 120 s
        // take dozens of attempts, and the end is close to the budget.
        assert!(took >= Duration::from_secs(110), "{took:?}");
        let n = calls.load(Ordering::Relaxed);
        assert!((12..=2000).contains(&n), "{n} calls");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_shorter_than_the_budget_is_ridden_out() {
        let p = RetryPolicy::new(Duration::from_secs(120));
        let t0 = tokio::time::Instant::now();
        let r = p
            .call("test", || async {
                if t0.elapsed() < Duration::from_secs(30) {
                    Err(Status::unavailable("down"))
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(r.unwrap(), 7);
        // The last sleep was at most one ceiling (10 s) long.
        assert!(t0.elapsed() < Duration::from_secs(41), "{:?}", t0.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_failures_are_not_retried() {
        let p = RetryPolicy::default();
        for s in [
            Status::invalid_argument("bad"),
            Status::not_found("who"),
            Status::failed_precondition("no"),
            Status::permission_denied("no"),
            Status::unauthenticated("no"),
            Status::aborted("lease lost"),
        ] {
            let calls = AtomicU32::new(0);
            let t0 = tokio::time::Instant::now();
            let r: Result<(), Status> = p
                .call("test", || async {
                    calls.fetch_add(1, Ordering::Relaxed);
                    Err(s.clone())
                })
                .await;
            assert_eq!(r.unwrap_err().code(), s.code());
            assert_eq!(calls.load(Ordering::Relaxed), 1, "{s:?}");
            assert_eq!(t0.elapsed(), Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_budget_never_retries_and_custom_errors_work() {
        let calls = AtomicU32::new(0);
        let r: Result<(), String> = RetryPolicy::none()
            .retry(
                "lake put",
                |_| true,
                || async {
                    calls.fetch_add(1, Ordering::Relaxed);
                    Err("No space left on device (os error 28)".to_string())
                },
            )
            .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }
}
