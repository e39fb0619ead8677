//! The dashboard's OpenID Connect routes ([`crate::oidc`] does the
//! protocol):
//!
//! - `GET /login/oidc?next=PATH` starts a sign-in and sends the browser to
//!   the provider, with a binding cookie (`benchlake_oidc`, HttpOnly,
//!   SameSite=Lax so it comes back on the provider's redirect, Path
//!   `/login/oidc`, 10 minutes) that the callback must carry;
//! - `GET /login/oidc/callback` finishes it: a session as a token login
//!   makes, then a same-site step to `next` (a page that refreshes itself:
//!   the session cookie is SameSite=Strict and a browser does not send it on
//!   a redirect chain that began at the provider). A user the claims give no
//!   role is refused with 403 and a page that says why and what to do; every
//!   other failure shows the login page again with the reason.
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};

use super::{SESSION_TTL, html, login_form, safe_next, session_cookie};
use crate::http::Http;
use crate::oidc::{Callback, MapError, OidcError, PENDING_TTL};

/// The binding cookie's name.
pub const BINDING_COOKIE: &str = "benchlake_oidc";

fn binding_cookie(value: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{BINDING_COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/login/oidc; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The binding of a request's cookie, when well-formed (64 hex digits).
fn cookie_binding(headers: &HeaderMap) -> Option<String> {
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(';') {
            if let Some(b) = part
                .trim()
                .strip_prefix(BINDING_COOKIE)
                .and_then(|r| r.strip_prefix('='))
                && b.len() == 64
                && b.bytes().all(|c| c.is_ascii_hexdigit())
            {
                return Some(b.to_string());
            }
        }
    }
    None
}

/// `GET /login/oidc`.
pub async fn start(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let q = html::parse_query(uri.query().unwrap_or(""));
    let next = safe_next(q.get("next").map(String::as_str));
    let Some(p) = h.oidc() else {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    };
    match p.start(&next).await {
        Ok(s) => (
            StatusCode::SEE_OTHER,
            [
                (
                    header::SET_COOKIE,
                    binding_cookie(&s.binding, PENDING_TTL.as_secs(), h.tls()),
                ),
                (header::LOCATION, s.authorize_url),
            ],
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "OpenID Connect sign-in could not start");
            login_form(
                &h,
                &headers,
                &next,
                Some(&e.user_message()),
                StatusCode::BAD_GATEWAY,
            )
        }
    }
}

/// `GET /login/oidc/callback`.
pub async fn callback(State(h): State<Http>, headers: HeaderMap, uri: Uri) -> Response {
    let q = html::parse_query(uri.query().unwrap_or(""));
    let Some(p) = h.oidc() else {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    };
    let cb = Callback {
        code: q.get("code").cloned(),
        state: q.get("state").cloned(),
        iss: q.get("iss").cloned(),
        error: q.get("error").cloned(),
        error_description: q.get("error_description").cloned(),
    };
    let clear = binding_cookie("", 0, h.tls());
    match p.finish(&cb, cookie_binding(&headers).as_deref()).await {
        Ok(done) => {
            let role = done.identity.role;
            let name = done.identity.name.clone().unwrap_or_default();
            let id = h.sessions().create(done.identity);
            tracing::info!(user = %name, role = role.as_str(), issuer = %p.config().issuer, "dashboard sign-in (OpenID Connect)");
            let next = safe_next(Some(&done.next));
            let target = html::esc(&next);
            let body = format!(
                "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
                 <meta http-equiv=\"refresh\" content=\"0;url={target}\">\
                 <title>Signed in · benchlake</title></head>\
                 <body><p>Signed in as {} ({}). <a href=\"{target}\">Continue</a></p></body></html>\n",
                html::esc(&name),
                role.as_str()
            );
            let mut r = (StatusCode::OK, Html(body)).into_response();
            let hm = r.headers_mut();
            for c in [session_cookie(&id, SESSION_TTL.as_secs(), h.tls()), clear] {
                if let Ok(v) = c.parse() {
                    hm.append(header::SET_COOKIE, v);
                }
            }
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, issuer = %p.config().issuer, "dashboard sign-in (OpenID Connect) failed");
            let mut r = if matches!(e, OidcError::Map(MapError::NoRole { .. })) {
                refused(&h, &headers, &e.user_message(), &p.config().display_name)
            } else {
                let status = if e.is_refusal() {
                    StatusCode::FORBIDDEN
                } else if matches!(e, OidcError::Provider(_)) {
                    StatusCode::BAD_GATEWAY
                } else {
                    StatusCode::BAD_REQUEST
                };
                login_form(&h, &headers, "/", Some(&e.user_message()), status)
            };
            if let Ok(v) = clear.parse() {
                r.headers_mut().append(header::SET_COOKIE, v);
            }
            r
        }
    }
}

/// The page of someone the provider signed in but benchlake gives no
/// role: 403, why, and what to do.
fn refused(h: &Http, headers: &HeaderMap, why: &str, provider: &str) -> Response {
    let body = format!(
        "<section class=\"login\"><h1>No access to this dashboard</h1>\
         <p class=\"error\" id=\"login-error\">{}</p>\
         <p>Ask a benchlake administrator to give one of these a role (the coordinator's \
         <code>--oidc-role-map</code>). To sign in as someone else, sign out at {} first.</p>\
         <p><a href=\"/login\">Back to the login page</a></p></section>",
        html::esc(why),
        html::esc(provider)
    );
    let mut chrome = html::Chrome::of(h, headers);
    chrome.logged_in = false;
    chrome.who = None;
    (
        StatusCode::FORBIDDEN,
        Html(html::page("No access", "", &chrome, &body)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn binding_cookie_is_lax_scoped_and_parsed_strictly() {
        assert_eq!(
            binding_cookie("ab", 600, true),
            "benchlake_oidc=ab; HttpOnly; SameSite=Lax; Path=/login/oidc; Max-Age=600; Secure"
        );
        let mut h = HeaderMap::new();
        let b = "0f".repeat(32);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("benchlake_session=x; {BINDING_COOKIE}={b}")).unwrap(),
        );
        assert_eq!(cookie_binding(&h), Some(b));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("benchlake_oidc=<script>"),
        );
        assert_eq!(cookie_binding(&h), None);
    }
}
