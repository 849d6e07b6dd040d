//! Retry policy arithmetic: server-requested delays, backoff growth, cap and jitter bounds.

use std::time::Duration;

use elfiee_adapters::llm::retry::parse_retry_after;
use elfiee_adapters::llm::{LlmError, RetryPolicy};

#[test]
fn retry_after_ms_wins_over_retry_after_seconds() {
    assert_eq!(
        parse_retry_after(Some("250"), Some("3")),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        parse_retry_after(None, Some("3")),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        parse_retry_after(None, Some("1.5")),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        parse_retry_after(Some("garbage"), Some("2")),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        parse_retry_after(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
        None
    );
    assert_eq!(parse_retry_after(Some("-5"), None), None);
}

#[test]
fn backoff_doubles_up_to_the_cap_with_at_most_a_quarter_of_jitter() {
    let p = RetryPolicy {
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
        ..RetryPolicy::default()
    };
    for (retry, nominal) in [
        (1u32, 100u64),
        (2, 200),
        (3, 400),
        (4, 800),
        (5, 1000),
        (30, 1000),
    ] {
        for _ in 0..50 {
            let d = p.backoff(retry).as_millis() as u64;
            assert!(
                d <= nominal && d >= nominal * 3 / 4,
                "retry {retry}: {d} ms, nominal {nominal}"
            );
        }
    }
}

#[test]
fn server_delay_is_used_unless_absurdly_long() {
    let p = RetryPolicy {
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    let limited = |after| LlmError::RateLimited {
        message: String::new(),
        retry_after: Some(after),
    };
    assert_eq!(
        p.delay_for(1, &limited(Duration::from_secs(2))),
        Duration::from_secs(2)
    );
    assert!(p.delay_for(1, &limited(Duration::from_secs(3600))) <= Duration::from_millis(10));
}

#[test]
fn only_transient_errors_are_retryable() {
    let retryable = |status: u16| LlmError::from_status(status, "{}", None, "hint").is_retryable();
    for s in [408, 429, 500, 502, 503, 504, 529] {
        assert!(retryable(s), "{s} should be retried");
    }
    for s in [400, 401, 403, 404, 413, 422, 501] {
        assert!(!retryable(s), "{s} must not be retried");
    }
    assert!(LlmError::Network("x".into()).is_retryable());
    assert!(!LlmError::StreamError {
        kind: "overloaded_error".into(),
        message: "x".into()
    }
    .is_retryable());
    assert!(!LlmError::Malformed("x".into()).is_retryable());
}
