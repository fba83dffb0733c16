//! When a registry request is tried again: transient answers, bounded exponential back-off with jitter, `Retry-After`.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use crate::error::Error;

/// How registry requests are retried.
///
/// Issue 28 item 3: a flaky or rate-limited registry (connection resets, short bodies, 429,
/// 5xx) made a pull fail where another attempt would have worked. Each request gets a
/// [`Retries`]: failed attempts in a row are bounded (`attempts`), and so is the time spent
/// retrying without progress (`budget`); an attempt that moved a download forward starts the
/// count over, up to `max_total` attempts in all. The caller's own deadline is kept by
/// cancellation: a PullImage whose deadline passes is dropped, and with it every pause and
/// download it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Attempts in a row without progress before giving up, the first included.
    pub attempts: u32,
    /// Attempts in all for one request, however far each got.
    pub max_total: u32,
    /// The pause before the first retry; each next one doubles, up to `max_delay`.
    pub first_delay: Duration,
    /// The longest pause the back-off makes.
    pub max_delay: Duration,
    /// The longest `Retry-After` waited for; a registry asking for more is given up on at once
    /// (the kubelet's own back-off asks again later), rather than asked again too early.
    pub max_retry_after: Duration,
    /// The longest time spent retrying one request without progress.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts in a row, pauses of 0.3, 0.6, 1.2, 2.4 s (each jittered down by up to a
    /// quarter): about 4.5 s before a dead registry is given up on; `Retry-After` up to 30 s.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            max_total: 20,
            first_delay: Duration::from_millis(300),
            max_delay: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
            budget: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The back-off before retry number `retry` (1 for the first): `first_delay` doubled
    /// `retry - 1` times, at most `max_delay`.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.first_delay
            .saturating_mul(1 << doublings)
            .min(self.max_delay)
    }
}

/// Whether an answer with `status` may go away if asked again: 408, 429 and the 5xx answers
/// other than 501 (Not Implemented) and 505 (HTTP Version Not Supported).
pub(crate) fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error()
            && status != StatusCode::NOT_IMPLEMENTED
            && status != StatusCode::HTTP_VERSION_NOT_SUPPORTED)
}

/// The wait a `Retry-After` value asks for at `now`: delay-seconds or an HTTP-date (RFC 9110
/// 10.2.3; a date in the past is no wait). Anything else is `None`: the back-off applies.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is "very long", which the cap refuses.
        return Some(Duration::from_secs(v.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait an answer's `Retry-After` header asks for.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(v, SystemTime::now())
}

/// Why a failed request is not tried again (appended to its error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// This many attempts were made.
    Attempts(u32),
    /// The registry asked for a longer wait than bosun makes.
    RetryAfter {
        /// The wait asked for.
        asked: Duration,
        /// [`RetryPolicy::max_retry_after`].
        cap: Duration,
    },
    /// The next attempt would start after the retry budget ran out.
    Budget(Duration),
}

impl GiveUp {
    /// `e` with the reason appended: `…: 503 Service Unavailable (gave up after 5 attempts)`.
    pub(crate) fn explain(&self, e: Error) -> Error {
        Error::new(e.kind(), format!("{} ({self})", e.message()))
    }
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::Attempts(n) => write!(f, "gave up after {n} attempts"),
            GiveUp::RetryAfter { asked, cap } => write!(
                f,
                "the registry asks to retry after {} s, longer than the {} s bosun waits",
                asked.as_secs(),
                cap.as_secs()
            ),
            GiveUp::Budget(b) => write!(f, "gave up after retrying for {} s", b.as_secs()),
        }
    }
}

/// The retry state of one request (a manifest GET, or a blob download across its resumes).
#[derive(Debug)]
pub(crate) struct Retries<'a> {
    policy: &'a RetryPolicy,
    /// Failed attempts since the last progress.
    in_a_row: u32,
    /// Failed attempts in all.
    total: u32,
    /// When the current run of failures began (the start, or the last progress).
    since: Instant,
}

impl<'a> Retries<'a> {
    /// A request starting now.
    pub(crate) fn new(policy: &'a RetryPolicy) -> Self {
        Retries {
            policy,
            in_a_row: 0,
            total: 0,
            since: Instant::now(),
        }
    }

    /// The last attempt moved the request forward (bytes were stored): the back-off, the count
    /// in a row and the budget start over.
    pub(crate) fn progress(&mut self, now: Instant) {
        self.in_a_row = 0;
        self.since = now;
    }

    /// After a failed attempt at `now`: the pause before the next one (`retry_after` when the
    /// registry asked for one, else the jittered back-off), or why there is none.
    pub(crate) fn next_delay(
        &mut self,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Result<Duration, GiveUp> {
        let p = self.policy;
        self.in_a_row += 1;
        self.total += 1;
        if self.in_a_row >= p.attempts || self.total >= p.max_total {
            return Err(GiveUp::Attempts(self.total));
        }
        let delay = match retry_after {
            Some(asked) if asked > p.max_retry_after => {
                return Err(GiveUp::RetryAfter {
                    asked,
                    cap: p.max_retry_after,
                })
            }
            Some(asked) => asked,
            None => jitter(p.backoff(self.in_a_row), rand::random::<f64>()),
        };
        if now + delay > self.since + p.budget {
            return Err(GiveUp::Budget(p.budget));
        }
        Ok(delay)
    }

    /// [`Retries::next_delay`] now, then sleeps it out.
    pub(crate) async fn pause(&mut self, retry_after: Option<Duration>) -> Result<(), GiveUp> {
        let d = self.next_delay(retry_after, Instant::now())?;
        tokio::time::sleep(d).await;
        Ok(())
    }
}

/// `d` shortened by up to a quarter (`r` in [0, 1)), so nodes that failed together do not all
/// come back at once.
fn jitter(d: Duration, r: f64) -> Duration {
    d.mul_f64(1.0 - 0.25 * r.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn backoff_doubles_from_the_first_delay_up_to_the_cap() {
        let p = RetryPolicy {
            max_delay: Duration::from_secs(2),
            ..policy()
        };
        let ms: Vec<u128> = (1..=6).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(ms, [300, 600, 1200, 2000, 2000, 2000]);
        assert_eq!(p.backoff(0), Duration::from_millis(300));
        assert_eq!(p.backoff(u32::MAX), Duration::from_secs(2));
    }

    #[test]
    fn jitter_shortens_by_at_most_a_quarter() {
        let d = Duration::from_millis(1000);
        assert_eq!(jitter(d, 0.0), d);
        assert_eq!(jitter(d, 0.5), Duration::from_millis(875));
        assert!(jitter(d, 0.999_999) >= Duration::from_millis(750));
        assert_eq!(jitter(d, 7.0), Duration::from_millis(750));
    }

    #[test]
    fn attempts_in_a_row_are_bounded_and_pauses_grow() {
        let p = policy();
        let mut r = Retries::new(&p);
        let now = Instant::now();
        let mut pauses = Vec::new();
        let why = loop {
            match r.next_delay(None, now) {
                Ok(d) => pauses.push(d),
                Err(why) => break why,
            }
        };
        assert_eq!(why, GiveUp::Attempts(5));
        assert_eq!(why.to_string(), "gave up after 5 attempts");
        assert_eq!(pauses.len(), 4, "{pauses:?}");
        for (i, d) in pauses.iter().enumerate() {
            let full = p.backoff(i as u32 + 1);
            assert!(*d <= full && *d >= full.mul_f64(0.75), "{i}: {d:?}");
        }
        let total: Duration = pauses.iter().sum();
        assert!(total <= Duration::from_millis(4500), "{total:?}");
    }

    #[test]
    fn progress_starts_the_count_over_up_to_the_total() {
        let p = policy();
        let mut r = Retries::new(&p);
        let now = Instant::now();
        for i in 1..p.max_total {
            assert!(r.next_delay(None, now).is_ok(), "attempt {i}");
            r.progress(now);
        }
        assert_eq!(r.next_delay(None, now), Err(GiveUp::Attempts(p.max_total)));
    }

    #[test]
    fn retry_after_is_waited_exactly_up_to_the_cap() {
        let p = policy();
        let mut r = Retries::new(&p);
        let now = Instant::now();
        let one = Duration::from_secs(1);
        assert_eq!(r.next_delay(Some(one), now), Ok(one));
        assert_eq!(r.next_delay(Some(Duration::ZERO), now), Ok(Duration::ZERO));
        let asked = Duration::from_secs(3600);
        let why = r.next_delay(Some(asked), now).expect_err("beyond the cap");
        assert_eq!(
            why,
            GiveUp::RetryAfter {
                asked,
                cap: p.max_retry_after
            }
        );
        assert!(why.to_string().contains("3600 s"), "{why}");
    }

    #[test]
    fn a_pause_that_would_end_after_the_budget_is_not_made() {
        let p = RetryPolicy {
            budget: Duration::from_secs(10),
            ..policy()
        };
        let mut r = Retries::new(&p);
        let start = r.since;
        // 9 s in, a 2 s wait would end past the budget; 0.5 s would not.
        let late = start + Duration::from_secs(9);
        assert_eq!(
            r.next_delay(Some(Duration::from_secs(2)), late),
            Err(GiveUp::Budget(p.budget))
        );
        assert!(r.next_delay(Some(Duration::from_millis(500)), late).is_ok());
        // Progress moves the budget's start.
        r.progress(late);
        assert!(r.next_delay(Some(Duration::from_secs(2)), late).is_ok());
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        // 1445412480 is Wed, 21 Oct 2015 07:28:00 GMT; all three HTTP-date forms.
        for date in [
            "Wed, 21 Oct 2015 07:28:30 GMT",
            "Wednesday, 21-Oct-15 07:28:30 GMT",
            "Wed Oct 21 07:28:30 2015",
        ] {
            assert_eq!(
                parse_retry_after(date, now),
                Some(Duration::from_secs(30)),
                "{date}"
            );
        }
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past is no wait"
        );
        for bad in ["", "-1", "1.5", "soon", "Wed, 32 Oct 2015 07:28:00 GMT"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn transient_statuses_are_408_429_and_most_5xx() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(
                is_transient(StatusCode::from_u16(s).expect("status")),
                "{s}"
            );
        }
        for s in [200, 400, 401, 403, 404, 416, 501, 505] {
            assert!(
                !is_transient(StatusCode::from_u16(s).expect("status")),
                "{s}"
            );
        }
    }
}
