//! Cross-site request forgery defence for the coordinator's HTTP listener.
//!
//! One layer ([`same_origin`], applied by [`crate::http::Http::router`] to
//! every route, so an admin action added later has it too) checks every
//! state-changing request (any method but GET, HEAD and OPTIONS):
//!
//! - `Origin`, when present, must name this listener's own origin (its
//!   `Host`); `Origin: null` (sandboxed frames, privacy redirects) is refused;
//! - without `Origin`, `Referer` must name it;
//! - with neither, the request is refused: every browser sends `Origin` on a
//!   cross-origin POST and on a same-origin one under the dashboard's
//!   `Referrer-Policy: same-origin`, so only non-browser clients send
//!   neither, and they can add `Origin` (docs/dashboard.md);
//! - `Sec-Fetch-Site: cross-site` or `same-site` is refused whatever the
//!   other headers say.
//!
//! A refusal is `403 Forbidden` with a plain-text reason, before the handler
//! runs (no session is created or ended).
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Longest header value quoted in a refusal.
const QUOTE_MAX: usize = 120;

/// The layer: passes safe methods, checks the others with [`check`].
pub async fn same_origin(req: Request, next: Next) -> Response {
    if is_safe(req.method()) {
        return next.run(req).await;
    }
    match check(req.headers(), req.uri()) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            tracing::warn!(
                method = %req.method(),
                path = %req.uri().path(),
                reason = %why,
                "cross-site request refused"
            );
            let mut r = (
                StatusCode::FORBIDDEN,
                format!("403 Forbidden: cross-site request refused: {why}\n"),
            )
                .into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
    }
}

/// Methods that change nothing (and are never checked).
pub fn is_safe(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn quote(v: &str) -> String {
    let mut q: String = v.chars().take(QUOTE_MAX).collect();
    if v.chars().count() > QUOTE_MAX {
        q.push('…');
    }
    q
}

/// Whether a state-changing request with `headers` comes from this
/// listener's own origin; the error says why not.
pub fn check(headers: &HeaderMap, uri: &Uri) -> Result<(), String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| uri.authority().map(|a| a.as_str().to_string()))
        .filter(|h| !h.is_empty())
        .ok_or_else(|| "the request has no Host".to_string())?;
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
            return Err(format!(
                "Sec-Fetch-Site is '{}': only the dashboard's own pages may send this request",
                quote(site)
            ));
        }
    }
    let (name, value) = match (headers.get(header::ORIGIN), headers.get(header::REFERER)) {
        (Some(o), _) => ("Origin", o),
        (None, Some(r)) => ("Referer", r),
        (None, None) => {
            return Err(format!(
                "a state-changing request needs an Origin (or Referer) header naming this host ({}); \
                 browsers send it, other clients must add it",
                quote(&host)
            ));
        }
    };
    let value = value
        .to_str()
        .map_err(|_| format!("the {name} header is not text"))?;
    match origin_of(value) {
        Some((scheme, authority)) if same_authority(scheme, &authority, &host) => Ok(()),
        _ => Err(format!(
            "{name} '{}' is not this dashboard's origin (host {})",
            quote(value),
            quote(&host)
        )),
    }
}

/// The scheme and lower-case authority of an origin or URL
/// (`https://h:8443/x` → `("https", "h:8443")`); None for `null`, other
/// schemes and user info.
fn origin_of(v: &str) -> Option<(&'static str, String)> {
    let (scheme, rest) = v.split_once("://")?;
    let scheme = if scheme.eq_ignore_ascii_case("http") {
        "http"
    } else if scheme.eq_ignore_ascii_case("https") {
        "https"
    } else {
        return None;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some((scheme, authority.to_ascii_lowercase()))
}

/// Whether `authority` (of an origin with `scheme`) is `host`, a default
/// port (80 for http, 443 for https) written or not.
fn same_authority(scheme: &str, authority: &str, host: &str) -> bool {
    let default = if scheme == "https" { ":443" } else { ":80" };
    let strip = |a: &str| -> String {
        let a = a.to_ascii_lowercase();
        match a.strip_suffix(default) {
            Some(s) => s.to_string(),
            None => a,
        }
    };
    strip(authority) == strip(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(kv: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in kv {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn ok(kv: &[(&str, &str)]) -> bool {
        check(&headers(kv), &Uri::from_static("/login")).is_ok()
    }

    #[test]
    fn only_the_own_origin_passes() {
        let host = ("host", "bench.example.org:8080");
        assert!(ok(&[host, ("origin", "http://bench.example.org:8080")]));
        assert!(ok(&[host, ("origin", "https://BENCH.example.org:8080")]));
        assert!(ok(&[
            host,
            ("referer", "http://bench.example.org:8080/login?next=/runs")
        ]));
        assert!(ok(&[
            ("host", "bench.example.org"),
            ("origin", "https://bench.example.org:443")
        ]));
        assert!(ok(&[
            ("host", "bench.example.org:80"),
            ("origin", "http://bench.example.org")
        ]));
        assert!(ok(&[
            ("host", "[::1]:8080"),
            ("origin", "http://[::1]:8080")
        ]));
        assert!(ok(&[
            host,
            ("origin", "http://bench.example.org:8080"),
            ("sec-fetch-site", "same-origin")
        ]));
        for bad in [
            vec![host, ("origin", "http://evil.example")],
            vec![host, ("origin", "http://bench.example.org:8081")],
            vec![
                host,
                ("origin", "http://bench.example.org.evil.example:8080"),
            ],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "file://bench.example.org:8080")],
            vec![host, ("origin", "http://x@bench.example.org:8080")],
            vec![
                host,
                ("referer", "http://evil.example/bench.example.org:8080"),
            ],
            vec![host],
            vec![("origin", "http://bench.example.org:8080")],
            vec![
                host,
                ("origin", "http://bench.example.org:8080"),
                ("sec-fetch-site", "cross-site"),
            ],
            vec![
                host,
                ("origin", "http://bench.example.org:8080"),
                ("sec-fetch-site", "same-site"),
            ],
            // An Origin decides, whatever the Referer says.
            vec![
                host,
                ("origin", "http://evil.example"),
                ("referer", "http://bench.example.org:8080/login"),
            ],
        ] {
            assert!(!ok(&bad), "{bad:?}");
        }
        let e = check(
            &headers(&[host, ("origin", "http://evil.example")]),
            &Uri::from_static("/login"),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "Origin 'http://evil.example' is not this dashboard's origin (host bench.example.org:8080)"
        );
    }

    #[test]
    fn safe_methods_are_not_checked() {
        assert!(is_safe(&Method::GET) && is_safe(&Method::HEAD) && is_safe(&Method::OPTIONS));
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(!is_safe(&m), "{m}");
        }
    }
}
